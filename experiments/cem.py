#!/usr/bin/python3
"""CEM (causal energy minimisation, docs/systems.md) at T = 1 and T = 2, with and without the diagonal term
and the preconditioner, against Llama-style stacks of 2, 4 and 6 layers: validation loss against
parameters.

    experiments/cem.py [--quick] [--seeds N] [--threads T] [--reverse]   (full: ~55 min on 2 cores)

Scale: byte-level KJV (the whole training split), d 128, 4 heads, context 128, batch 16, 600 AdamW
steps (lr 2e-3, warmup 50, cosine; the presets' settings), RMSNorm and RoPE everywhere. Validation:
the first 200 KB of data/kjv/val.txt. Arms, each over the seeds:
  cem            6 CEM layers, T = 2, the diagonal term                 (preset cem)
  cem_T1         the same with T = 1
  cem_nodiag     T = 2 without the diagonal term                        (preset cem_nodiag)
  cem_precond    T = 2 with the rank-4 preconditioner                   (preset cem_precond)
  llama6/4/2     untied pre-norm SwiGLU blocks, 6 (preset llama), 4 and 2 layers
Depth check: llama 6 against llama 2. llama 4 has about CEM's parameter count.
The paper's claims: CEM is competitive with the untied baseline while it has about half the attention
and two thirds of the MLP parameters; T = 2 beats T = 1.
Writes experiments/results/cem/{results.md, results.json, loss_vs_params.png}.
"""
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import Experiment, depth_check, fmt, mean_std, pooled, verdict  # noqa: E402

ex = Experiment("cem", __doc__)
STEPS = 8 if ex.quick else 600
EVAL_BYTES = 24000 if ex.quick else 200 * 1024

ex.val_file = ex.slice_file(ex.val_file, EVAL_BYTES, "val_200k.txt")

ARMS = {
    "cem": ("cem", {}, "CEM T = 2"),
    "cem_T1": ("cem", dict(cem_T=1), "CEM T = 1"),
    "cem_nodiag": ("cem_nodiag", {}, "CEM T = 2, no diagonal"),
    "cem_precond": ("cem_precond", {}, "CEM T = 2, preconditioner"),
    "llama6": ("llama", {}, "Llama 6 layers"),
    "llama4": ("llama", dict(n_core=4), "Llama 4 layers"),
    "llama2": ("llama", dict(n_core=2), "Llama 2 layers"),
}
CEM = ("cem", "cem_T1", "cem_nodiag", "cem_precond")
runs = {a: {} for a in ARMS}
for seed in ex.order:  # seed-major: an interrupted run still has every arm for the first seeds
    for arm, (preset, sets, _) in ex.ordered(ARMS):
        d = ex.train(arm, preset, sets, seed, STEPS)
        runs[arm][seed] = ex.evaluate(d, 1)
info = {a: ex.info(p, s) for a, (p, s, _) in ARMS.items()}
loss = {a: mean_std([runs[a][s]["loss"] for s in ex.seeds]) for a in ARMS}
P = {a: info[a]["params_non_embedding"] for a in ARMS}


def llama_at(p):
    """The Llama curve's loss at p non-embedding parameters: linear in log(params) between the two
    nearest measured stacks (extrapolated from the nearest pair outside them)."""
    pts = sorted((P[a], loss[a][0]) for a in ("llama2", "llama4", "llama6"))
    i = 0 if p <= pts[1][0] else 1
    (p0, l0), (p1, l1) = pts[i], pts[i + 1]
    return l0 + (l1 - l0) * (math.log(p) - math.log(p0)) / (math.log(p1) - math.log(p0))


# per-layer attention and MLP parameter counts from the formulas the blocks use (d_ff = 4d):
# Llama: W_Q, W_K, W_V, W_O (4 d^2) and SwiGLU's gate, up, down (3 d d_ff); CEM: W_Q, W_K (2 d^2) and the
# tied gate, up (2 d d_ff).
md = [f"# CEM at small scale ({'QUICK CHECK: numbers mean nothing' if ex.quick else 'full run'})", "",
      f"Byte-level KJV, d 128, 4 heads, context 128, batch 16, {STEPS} steps (lr 2e-3, warmup 50, cosine), RMSNorm and "
      f"RoPE; seeds {ex.seeds}; validation loss (nats/byte) on the first {EVAL_BYTES // 1024} KB of the validation "
      "split, mean ± sample std. Command: `experiments/cem.py`.", "",
      depth_check("Llama 6", loss["llama6"], "Llama 2", loss["llama2"]), "",
      "| model | non-embedding params | val loss | Llama curve at these params | CEM − curve |", "|---|---|---|---|---|"]
for a in ARMS:
    c = llama_at(P[a])
    md.append(f"| {ARMS[a][2]} | {P[a]:,} | {fmt(*loss[a])} | {c:.4f} | "
              + (f"{loss[a][0] - c:+.4f}" if a in CEM else "—") + " |")
d = info["llama6"]["layout"]["d_model"]
ff = 4 * d
md += ["",
       f"Per layer, CEM has {2 * d * d:,} attention parameters against Llama's {4 * d * d:,} (half) and {2 * d * ff:,} MLP "
       f"parameters against {3 * d * ff:,} (two thirds); in all {P['cem'] / P['llama6']:.0%} of Llama 6's.", "",
       f"* Claim: CEM is competitive with the untied baseline at its depth, with fewer parameters. CEM T = 2 − Llama 6 = "
       f"{loss['cem'][0] - loss['llama6'][0]:+.4f} (pooled spread {pooled(loss['cem'], loss['llama6']):.4f}): "
       f"**{verdict(loss['cem'][0] - loss['llama6'][0] <= pooled(loss['cem'], loss['llama6']))}** (within the spread or "
       f"lower). Against Llama 4 (about CEM's parameters): {loss['cem'][0] - loss['llama4'][0]:+.4f} "
       f"(CEM {'below' if loss['cem'][0] < loss['llama4'][0] else 'above'} it; pooled spread "
       f"{pooled(loss['cem'], loss['llama4']):.4f}).",
       f"* Claim: T = 2 beats T = 1: {loss['cem'][0] - loss['cem_T1'][0]:+.4f} (pooled spread "
       f"{pooled(loss['cem'], loss['cem_T1']):.4f}): "
       f"**{verdict(loss['cem_T1'][0] - loss['cem'][0] > pooled(loss['cem'], loss['cem_T1']))}** (lower by more than the spread).",
       f"* The diagonal term: with − without = {loss['cem'][0] - loss['cem_nodiag'][0]:+.4f} (pooled spread "
       f"{pooled(loss['cem'], loss['cem_nodiag']):.4f}).",
       f"* The preconditioner: with − without = {loss['cem_precond'][0] - loss['cem'][0]:+.4f} (pooled spread "
       f"{pooled(loss['cem'], loss['cem_precond']):.4f})."]
ex.write({"arms": {a: {"label": ARMS[a][2], "val_loss": loss[a], "params_non_embedding": P[a],
                       "infer_flops_per_token": info[a]["infer_flops_per_token"],
                       "per_seed": {s: runs[a][s]["loss"] for s in ex.seeds}} for a in ARMS}},
         "\n".join(md))
ex.plot("loss_vs_params.png", """
set title 'Validation loss against non-embedding parameters (mean ± std over seeds)'
set xlabel 'non-embedding parameters'
set ylabel 'validation loss (nats/byte)'
set logscale x
set key top right
plot '$llama' using 2:3:4 with yerrorlines pt 7 title 'Llama 2 / 4 / 6 layers', \
     '$cem' using 2:3:4 with yerrorbars pt 5 ps 1.4 title 'CEM', '$cem' using 2:3:1 with labels offset 0,1 notitle
""", {"llama": [(a, P[a], *loss[a]) for a in ("llama2", "llama4", "llama6")],
      "cem": [(ARMS[a][2].replace("CEM ", "").replace(" ", "_"), P[a], *loss[a]) for a in CEM]})
