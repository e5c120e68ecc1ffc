#!/usr/bin/python3
"""DeepLoop vs DeepNorm vs a pre-norm looped baseline (docs/systems.md), and the p-sweep.

    experiments/deeploop.py [--quick] [--seeds N]      (full: ~35 min on 2 cores)

Scale: byte-level KJV, d 128, 4 heads, context 128, batch 16, 800 AdamW steps (warmup 50, cosine),
a plain looped core of 2 blocks (RMSNorm, GELU, RoPE, tied embeddings) applied R times.
  Part 1, R in {1, 3, 5}, lr 1e-3 (the deeploop preset's):
    deeploop  sandwich (post-norm) blocks, α = (2N)^p, β = (8N)^-p, p = 1/2
    deepnorm  the same with p = 1/4
    prenorm   pre-norm blocks (no scaling), the usual looped baseline
    dense6    6 pre-norm blocks: with prenorm at R = 1 (2 blocks), the depth check
  Part 2, the p-sweep: sandwich at R = 3, p in {0.25, 0.35, 0.45, 0.5, 0.6}, lr 3e-3 (where post-norm
    models can sit on the unigram plateau: docs/systems.md, DeepLoop and DeepNorm), counting the
    runs whose validation loss ends below the unigram entropy of the training bytes minus 0.25 nats
    ("left the plateau").
Writes experiments/results/deeploop/{results.md, results.json, by_R.png, p_sweep.png}.
"""
import math
import os
import sys
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Experiment, better, verdict, fmt, mean_std  # noqa: E402

ex = Experiment("deeploop", __doc__)
STEPS = 8 if ex.quick else 800
RS = (1, 3) if ex.quick else (1, 3, 5)
PS = (0.25, 0.5) if ex.quick else (0.25, 0.35, 0.45, 0.5, 0.6)
BASE = dict(n_prelude=0, n_coda=0, n_core=2, norm="rmsnorm", mlp="gelu", pos="rope", warmup=50, batch_size=16,
            depth_sampler="fixed")
KINDS = {"deeploop": dict(block="sandwich", deeploop_p=0.5), "deepnorm": dict(block="sandwich", deeploop_p=0.25),
         "prenorm": dict(block="pre_norm", deeploop_p=0)}
LABEL = {"deeploop": "DeepLoop (sandwich, p = 1/2)", "deepnorm": "DeepNorm (sandwich, p = 1/4)",
         "prenorm": "pre-norm looped"}

# The unigram entropy of the training bytes: the loss of a model that learned only byte frequencies.
with open(ex.train_file, "rb") as f:
    counts = Counter(f.read())
total = sum(counts.values())
H_unigram = -sum(c / total * math.log(c / total) for c in counts.values())
PLATEAU = H_unigram - 0.25

part1 = {k: {R: {} for R in RS} for k in KINDS}
dense6 = {}
sweep = {p: {} for p in PS}
for seed in ex.seeds:
    for R in RS:
        for kind, sets in KINDS.items():
            d = ex.train(f"{kind}_R{R}", "deeploop", dict(BASE, **sets, R=R, lr=1e-3), seed, STEPS)
            part1[kind][R][seed] = ex.evaluate(d, R)
    d = ex.train("dense6", "deeploop", dict(BASE, block="pre_norm", deeploop_p=0, n_core=6, R=1, lr=1e-3), seed, STEPS)
    dense6[seed] = ex.evaluate(d, 1)
    for p in PS:
        d = ex.train(f"sweep_p{p}", "deeploop", dict(BASE, block="sandwich", deeploop_p=p, R=3, lr=3e-3), seed, STEPS)
        sweep[p][seed] = ex.evaluate(d, 3)

loss = {k: {R: mean_std([part1[k][R][s]["loss"] for s in ex.seeds]) for R in RS} for k in KINDS}
d6 = mean_std([dense6[s]["loss"] for s in ex.seeds])
d2 = loss["prenorm"][1]
margin, spread = d2[0] - d6[0], max(d2[1], d6[1], 1e-9)
sweep_loss = {p: [sweep[p][s]["loss"] for s in ex.seeds] for p in PS}
left = {p: sum(1 for x in sweep_loss[p] if x < PLATEAU) for p in PS}


md = [f"# DeepLoop vs DeepNorm vs pre-norm looping ({'QUICK CHECK: numbers mean nothing' if ex.quick else 'full run'})", "",
      f"Byte-level KJV, d 128, 4 heads, context 128, batch 16, {STEPS} steps (warmup 50, cosine), a looped core of 2 "
      f"blocks (RMSNorm, GELU, RoPE, tied embeddings) applied R times; seeds {ex.seeds}; validation loss (nats/byte) on "
      "the whole validation split at the trained R, mean ± sample std. Command: `experiments/deeploop.py`.", "",
      f"Depth check: 6 pre-norm blocks {fmt(*d6)} against 2 blocks (pre-norm, R = 1) {fmt(*d2)}: a margin of "
      f"{margin:.4f}, {margin / spread:.1f}x the larger seed spread"
      f"{'' if margin > 3 * spread else ' — depth does NOT clearly matter at this scale'}.", "",
      "## Validation loss by R (lr 1e-3)", "",
      "| R | " + " | ".join(LABEL[k] for k in KINDS) + " |", "|---|" + "---|" * len(KINDS)]
for R in RS:
    md.append(f"| {R} | " + " | ".join(fmt(*loss[k][R]) for k in KINDS) + " |")
neutral = abs(loss["deeploop"][1][0] - loss["deepnorm"][1][0]) <= 2 * math.hypot(loss["deeploop"][1][1], loss["deepnorm"][1][1])
wins = [R for R in RS if R > 1 and better(loss["deeploop"][R], loss["deepnorm"][R])]
md += ["", f"* Claim: DeepLoop is neutral at R = 1: DeepLoop − DeepNorm = {loss['deeploop'][1][0] - loss['deepnorm'][1][0]:+.4f}: "
       f"**{verdict(neutral)}** (within twice the pooled spread).",
       f"* Claim: DeepLoop beats DeepNorm for R > 1: " +
       ", ".join(f"R = {R}: {loss['deeploop'][R][0] - loss['deepnorm'][R][0]:+.4f}" for R in RS if R > 1) +
       f": **{verdict(len(wins) == len([R for R in RS if R > 1]))}** (better by more than the pooled spread at "
       f"{', '.join(map(str, wins)) or 'no R'}).",
       "* Against pre-norm looping (DeepLoop − pre-norm): " +
       ", ".join(f"R = {R}: {loss['deeploop'][R][0] - loss['prenorm'][R][0]:+.4f}" for R in RS) + ".", "",
       f"## The p-sweep: sandwich blocks at R = 3, lr 3e-3", "",
       f"Unigram entropy of the training bytes: {H_unigram:.4f} nats; a run \"left the plateau\" when its validation loss "
       f"ends below {PLATEAU:.4f}.", "",
       "| p | runs that left the plateau | validation loss per seed |", "|---|---|---|"]
for p in PS:
    md.append(f"| {p} | {left[p]} / {len(ex.seeds)} | " + ", ".join(f"{x:.4f}" for x in sweep_loss[p]) + " |")
small_p_stuck = all(left[p] < len(ex.seeds) for p in PS if p < 0.5)
large_p_train = all(left[p] == len(ex.seeds) for p in PS if p >= 0.5)
md += ["", f"* Claim: seeds fail to leave the unigram plateau for small p and train reliably for p ≥ 1/2: small p "
       f"{'stuck in some runs' if small_p_stuck else 'trained in every run'}, p ≥ 1/2 "
       f"{'trained in every run' if large_p_train else 'failed in some runs'}: **{verdict(small_p_stuck and large_p_train)}**."]
ex.write({"H_unigram": H_unigram, "plateau_threshold": PLATEAU,
          "by_R": {k: {str(R): loss[k][R] for R in RS} for k in KINDS},
          "by_R_per_seed": {k: {str(R): {s: part1[k][R][s]["loss"] for s in ex.seeds} for R in RS} for k in KINDS},
          "dense6": d6, "p_sweep": {str(p): {"left_plateau": left[p], "val_loss": sweep_loss[p]} for p in PS},
          "claims": {"neutral_at_R1": neutral, "deeploop_beats_deepnorm_R": wins,
                     "small_p_stuck": small_p_stuck, "p_half_trains": large_p_train}},
         "\n".join(md))
ex.plot("by_R.png", """
set title 'Validation loss against the loop count R (mean ± std over seeds)'
set xlabel 'R'
set ylabel 'validation loss (nats/byte)'
set xtics 1
plot '$dl' using 1:2:3 with yerrorlines lw 2 title 'DeepLoop p = 1/2', \\
     '$dn' using 1:2:3 with yerrorlines lw 2 title 'DeepNorm p = 1/4', \\
     '$pn' using 1:2:3 with yerrorlines lw 2 title 'pre-norm looped'
""", {"dl": [(R, *loss["deeploop"][R]) for R in RS], "dn": [(R, *loss["deepnorm"][R]) for R in RS],
      "pn": [(R, *loss["prenorm"][R]) for R in RS]})
ex.plot("p_sweep.png", f"""
set title 'p-sweep: sandwich blocks at R = 3, lr 3e-3 (one point per seed)'
set xlabel 'p'
set ylabel 'validation loss (nats/byte)'
plot '$pts' using 1:2 with points pt 7 ps 1.5 title 'runs', {PLATEAU} with lines dt 2 title 'plateau threshold (unigram − 0.25)'
""", {"pts": [(p, x) for p in PS for x in sweep_loss[p]]})
