#!/usr/bin/python3
"""NRGPT vs its recurrent baselines on ListOps across model sizes (docs/systems.md, docs/data.md).

    experiments/listops.py [--quick] [--seeds N]      (full: about an hour on 2 cores)

Data: NRGPT's small ListOps set (`looplm data listops --preset nrgpt_small`: SM / MAX / MED, depth
2, 2-3 arguments, 50,000 train / 2,000 test with no test expression in train). Each model reads
the expression and predicts the label at the `=` (data_mode = examples: trained on the label only).
Arms, at widths d in SIZES (2 heads, R = 6, learned positions), each over the seeds:
  nrgpt             one NRGPT energy block (ff2w, step matrix P) applied 6 times   (listops_nrgpt)
  gpt_rec_parallel  one shared parallel GPT-2 block applied 6 times               (listops_gpt_rec_parallel)
  gpt_rec           one shared pre-norm GPT-2 block applied 6 times               (listops_gpt_rec)
Depth check: gpt_rec at the largest width with R = 1 against R = 6.
The paper's claim: NRGPT matches the recurrent baselines, all reaching a learning transition
(> 80% accuracy) at about 2.3-3.0e4 parameters. Accuracy is on the whole test set at the trained R.
Writes experiments/results/listops/{results.md, results.json, accuracy_vs_params.png}.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Experiment, mean_std  # noqa: E402

ex = Experiment("listops", __doc__, data="listops")
STEPS = 6 if ex.quick else 3000
SIZES = [16, 32] if ex.quick else [16, 24, 32, 48, 64]
ARMS = {"nrgpt": ("listops_nrgpt", "NRGPT (ff2w, P matrix)"),
        "gpt_rec_parallel": ("listops_gpt_rec_parallel", "GPT_Rec_parallel"),
        "gpt_rec": ("listops_gpt_rec", "GPT_Rec")}
R = 6


def sets_for(d):
    s = dict(d_model=d, n_heads=2)
    if ex.quick:  # common.QUICK would widen every model to 32; keep the sizes apart
        s.update(context=32, batch_size=8)
    return s


runs = {a: {d: {} for d in SIZES} for a in ARMS}
info = {a: {} for a in ARMS}
for seed in ex.seeds:
    for d in SIZES:
        for arm, (preset, _) in ARMS.items():
            rd = ex.train(f"{arm}_d{d}", preset, sets_for(d), seed, STEPS)
            runs[arm][d][seed] = ex.evaluate(rd, R)
for arm, (preset, _) in ARMS.items():
    for d in SIZES:
        info[arm][d] = ex.info(preset, sets_for(d))
# depth check at the largest width
big = SIZES[-1]
depth_runs = {}
for seed in ex.seeds:
    rd = ex.train(f"gpt_rec_R1_d{big}", "listops_gpt_rec", dict(sets_for(big), R=1), seed, STEPS)
    depth_runs[seed] = ex.evaluate(rd, 1)

acc = {a: {d: mean_std([runs[a][d][s]["accuracy"] for s in ex.seeds]) for d in SIZES} for a in ARMS}
loss = {a: {d: mean_std([runs[a][d][s]["loss"] for s in ex.seeds]) for d in SIZES} for a in ARMS}
params = {a: {d: info[a][d]["params"] for d in SIZES} for a in ARMS}
acc_r1 = mean_std([depth_runs[s]["accuracy"] for s in ex.seeds])
acc_r6 = acc["gpt_rec"][big]


def crossing(a, level=0.8):
    """Parameters where the mean accuracy first crosses `level` (log-linear between sizes), or None."""
    pts = [(params[a][d], acc[a][d][0]) for d in SIZES]
    for (p0, y0), (p1, y1) in zip(pts, pts[1:]):
        if y0 < level <= y1:
            t = (level - y0) / (y1 - y0)
            return math.exp(math.log(p0) + t * (math.log(p1) - math.log(p0)))
    return pts[0][0] if pts[0][1] >= level else None


cross = {a: crossing(a) for a in ARMS}
spread = max(acc_r1[1], acc_r6[1], 1e-9)
md = [f"# NRGPT on ListOps across sizes ({'QUICK CHECK: numbers mean nothing' if ex.quick else 'full run'})", "",
      f"NRGPT's small ListOps set (SM/MAX/MED, depth 2, 2-3 arguments; 50,000 train / 2,000 test, no test expression in "
      f"train), label-only training (data_mode = examples), {STEPS} AdamW steps of 64 examples (lr 2e-3, warmup 100, "
      f"cosine), 2 heads, R = {R}, learned positions; seeds {ex.seeds}; test accuracy (label = argmax at the `=`) at R, "
      "mean ± sample std. Command: `experiments/listops.py`.", "",
      f"Depth check (GPT_Rec at d {big}): R = 6 accuracy {acc_r6[0]:.3f} ± {acc_r6[1]:.3f} against R = 1 "
      f"{acc_r1[0]:.3f} ± {acc_r1[1]:.3f}: {acc_r6[0] - acc_r1[0]:+.3f} "
      f"({(acc_r6[0] - acc_r1[0]) / spread:.1f}x the larger seed spread)"
      + ("" if acc_r6[0] - acc_r1[0] > 3 * spread else " — depth does NOT clearly matter here") + ".", "",
      "| d | " + " | ".join(f"{ARMS[a][1]}: params, accuracy" for a in ARMS) + " |",
      "|---|" + "---|" * len(ARMS)]
for d in SIZES:
    md.append(f"| {d} | " + " | ".join(f"{params[a][d]:,}, {acc[a][d][0]:.3f} ± {acc[a][d][1]:.3f}" for a in ARMS) + " |")
md += ["", "Where the mean accuracy crosses 80% (log-linear between sizes): " +
       ", ".join(f"{ARMS[a][1]} {('%.2g' % cross[a]) + ' parameters' if cross[a] else 'not within the sizes run'}" for a in ARMS) + ".", ""]
matched = all(abs(acc["nrgpt"][d][0] - acc["gpt_rec_parallel"][d][0]) <= 2 * math.hypot(acc["nrgpt"][d][1], acc["gpt_rec_parallel"][d][1]) + 0.02
              for d in SIZES)
md += [f"* Claim: NRGPT matches GPT_Rec_parallel at every size (within twice the pooled spread + 2 points): "
       f"**{'held' if matched else 'did not hold'}**.",
       f"* Claim: a learning transition (> 80%) near 2.3-3.0e4 parameters: NRGPT crosses at "
       f"{('%.2g' % cross['nrgpt']) if cross['nrgpt'] else 'no size run'}; "
       f"**{'held' if cross['nrgpt'] and 1.5e4 <= cross['nrgpt'] <= 4.5e4 else 'did not hold'}** (window 1.5-4.5e4)."]
ex.write({"sizes": SIZES, "steps": STEPS, "accuracy": acc, "loss": loss, "params": params, "crossing_80": cross,
          "depth_check": {"R1": acc_r1, "R6": acc_r6},
          "per_seed": {a: {d: {s: runs[a][d][s]["accuracy"] for s in ex.seeds} for d in SIZES} for a in ARMS}},
         "\n".join(md))
ex.plot("accuracy_vs_params.png", """
set title 'ListOps test accuracy against parameters (mean ± std over seeds)'
set xlabel 'parameters'
set ylabel 'test accuracy'
set logscale x
set key bottom right
plot '$nrgpt' using 1:2:3 with yerrorlines pt 7 title 'NRGPT', \\
     '$gpt_rec_parallel' using 1:2:3 with yerrorlines pt 5 title 'GPT_Rec_parallel', \\
     '$gpt_rec' using 1:2:3 with yerrorlines pt 9 title 'GPT_Rec', 0.8 dt 2 lc 'gray' title '80%'
""", {a: [(params[a][d], *acc[a][d]) for d in SIZES] for a in ARMS})
