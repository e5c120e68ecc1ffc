#!/usr/bin/python3
"""Hyperloop against plain looping and a depth-matched dense model at a larger scale: the BPE corpus,
d 384, bf16 products, data parallel over MPI ranks (docs/training.md).

    experiments/scale.py [--seeds 2] [--max-runs K] [--tables-only] [--ranks 2] [--corpus DIR] [--quick]

Why this comparison: at d 128 on bytes (experiments/hyperloop.py) depth mattered (dense 6 beat
dense 2 by 18.8x the seed spread), yet every Hyperloop claim failed by more than the spread; that is
the result a larger scale can most change. (RecurrentGPT's iso-FLOP comparison ran where depth did
not matter; its open question is the scale itself, which the depth check below answers first.)

Scale: the ~51.5 MB Debian English corpus and its 8,192-id BPE (scripts/prepare_corpus.sh), d 384,
6 heads, context 256, Llama-style blocks (RMSNorm, SwiGLU, RoPE), global batch 16 x 256 tokens
(2 micro-batches of 8: one per rank), AdamW lr 1e-3, warmup 200, cosine, `precision=bf16`, STEPS
steps for every arm (the same tokens). The arms, in training order:
  dense6, dense2   the depth check, trained first (every seed): does depth matter here, by how many
                   seed spreads?
  hyperloop        1 + 2x3 + 1, the hyper rule (4 streams, diagonal H_res, per-loop maps)
  looped           the same layout with the residual rule
  dense8           the depth-matched dense model (8 blocks, the others' unrolled depth)
Loss: nats per BPE token on the whole validation split (150,741 tokens), at the trained R.

Resumable run by run, across machines: each finished run's numbers go to
experiments/results/scale/runs/<arm>_s<seed>.json (kept in git); a run with that file is not
trained again, an interrupted one resumes from its checkpoint (runs/experiments/scale/). --max-runs
K stops after K new runs, so the whole set can be trained in parts; results.md always shows what is
finished. A rank count or a thread count does not change a run: N ranks give the bits of one
process with the same micro-batches (docs/training.md), so parts may run with different --ranks.

--quick: the pipeline on the small corpus (prepared into the quick runs directory, vocabulary 1024),
tiny models and a few steps; its numbers mean nothing.
"""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BIN, ROOT, Experiment, better, cpu_name, depth_check, fmt, mean_std, mpi_launcher,  # noqa: E402
                    training_seconds, verdict, write_json_atomic)

# Steps for every arm: about an hour for the slowest arms (8 block applications) at 2 ranks x 1
# thread in bf16 on the 2-core Zen 5 VM where it was chosen (bench/README.md, "A larger scale").
STEPS = 2400
R = 3
BASE = os.path.join(ROOT, "configs", "corpus", "hyperloop.json")  # Llama-style blocks, 1 + 2x3 + 1, hyper
DENSE = dict(n_prelude=0, n_coda=0, R=1, loop_rule="residual")
ARMS = {
    "dense6": (dict(DENSE, n_core=6), "dense 6"),
    "dense2": (dict(DENSE, n_core=2), "dense 2"),
    "hyperloop": ({}, "Hyperloop 1 + 2x3 + 1 (4 streams)"),
    "looped": (dict(loop_rule="residual"), "plain looped 1 + 2x3 + 1"),
    "dense8": (dict(DENSE, n_core=8), "dense 8 (depth-matched)"),
}
LOOPED = ("hyperloop", "looped")


def options(ap):
    ap.add_argument("--max-runs", type=int, default=0, help="stop after training this many new runs (0: all)")
    ap.add_argument("--tables-only", action="store_true", help="train nothing: the tables of the finished runs")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks per run (1: one process; default 2)")
    ap.add_argument("--corpus", default=None, help="the prepared corpus (default data/corpus; prepared when missing)")


ex = Experiment("scale", __doc__, default_seeds=2, data=None, options=options)
A = ex.args
steps = 6 if ex.quick else STEPS
corpus = os.path.abspath(A.corpus or (os.path.join(ex.runs, "corpus") if ex.quick else os.path.join(ROOT, "data", "corpus")))
if not os.path.exists(os.path.join(corpus, "corpus.json")):
    ex.log(f"preparing the corpus in {corpus} (scripts/prepare_corpus.sh)")
    cmd = [os.path.join(ROOT, "scripts", "prepare_corpus.sh"), "--out", corpus, "--bin", BIN]
    subprocess.run(cmd + (["--small", "--vocab-size", "1024"] if ex.quick else []), check=True, cwd=ROOT)
with open(os.path.join(corpus, "corpus.json")) as f:
    manifest = json.load(f)
vocab = json.load(open(os.path.join(corpus, "tokenizer.json")))["model"]["vocab"]
DATA = dict(data_train=os.path.join(corpus, "train.bin"), data_val=os.path.join(corpus, "val.bin"),
            tokenizer_file=os.path.join(corpus, "tokenizer.json"), vocab_size=len(vocab))
TRAIN = dict(precision="bf16", batch_size=8, grad_accum=2, steps=steps, eval_every=max(1, steps // 8), eval_batches=16)
if ex.quick:
    TRAIN.update(d_model=32, n_heads=2, context=32, batch_size=2, warmup=2, eval_batches=1)
summaries = os.path.join(ex.out, "runs")
os.makedirs(summaries, exist_ok=True)


def bf16_supported():
    p = subprocess.run([BIN, "info", "--config", BASE, "--set", "precision=bf16", "--no-measure"], cwd=ROOT,
                       capture_output=True, text=True)
    return p.returncode == 0


def sets_of(arm, seed):
    return dict(ARMS[arm][0], **DATA, **TRAIN, seed=seed)


def set_args(sets):
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


def train(arm, seed):
    """Train or resume one run; its summary (the numbers the tables need) is written last."""
    d = os.path.join(ex.runs, f"{arm}_s{seed}")
    mpi, threads = mpi_launcher(A.ranks, ex.log)
    cmd = mpi + [BIN, "train", "--config", BASE, "--out", d, "--quiet", "--sample-len", "0", "--threads", str(threads)]
    cmd += set_args(sets_of(arm, seed))
    ex.run_training(d, cmd, f"{arm} seed {seed}")  # a second copy of the script waits for it, then finds its summary
    ev = ex.evaluate(d, R if arm in LOOPED else 1, data=DATA["data_val"])
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    steps_rows = [r for r in rows if r.get("split") == "train"]
    curve = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    train_s = training_seconds(steps_rows)
    return dict(arm=arm, seed=seed, steps=steps, ranks=A.ranks, loss=ev["loss"], eval=ev, val_curve=curve,
                train_loss_last=[(r["step"], r["loss"]) for r in steps_rows[-20:]], train_seconds=train_s,
                sets={k: v for k, v in sets_of(arm, seed).items() if k not in DATA},
                corpus=manifest["summary"],
                cpu=cpu_name(), finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


# ---------------------------------------------------------------- the runs, in parts
if not bf16_supported():
    if not ex.quick:
        sys.exit("scale: this CPU has no AVX512_BF16 (precision=bf16 is refused): every run of this comparison is "
                 "trained in bf16, so its parts must run on a CPU that has it")
    ex.log("no AVX512_BF16 here: the quick check trains in fp32")
    TRAIN["precision"] = "fp32"
done = {}
new = 0
DEPTH_CHECK = ("dense6", "dense2")
order = [(a, s) for s in ex.seeds for a in DEPTH_CHECK] + [(a, s) for s in ex.seeds for a in ARMS if a not in DEPTH_CHECK]
for arm, seed in order:
        path = os.path.join(summaries, f"{arm}_s{seed}.json")
        if os.path.exists(path):
            done[(arm, seed)] = json.load(open(path))
            continue
        if A.tables_only or (A.max_runs and new >= A.max_runs):
            continue
        s = train(arm, seed)
        if os.path.exists(path):  # another copy of the script finished it while this one waited
            done[(arm, seed)] = json.load(open(path))
            continue
        write_json_atomic(path, s)
        done[(arm, seed)] = s
        new += 1
        ex.new_training = True
missing = [f"{a}_s{s}" for s in ex.seeds for a in ARMS if (a, s) not in done]

# ---------------------------------------------------------------- the tables
info = {}
for arm in ARMS:
    info[arm] = json.loads(ex.looplm("info", "--config", BASE, "--json", "--no-measure",
                                     *set_args(dict(ARMS[arm][0], **DATA, **TRAIN))))


def loss_of(arm):
    xs = [done[(arm, s)]["loss"] for s in ex.seeds if (arm, s) in done]
    return mean_std(xs) if len(xs) == len(ex.seeds) else None


loss = {a: loss_of(a) for a in ARMS}
tokens = steps * 16 * (TRAIN.get("context") or 256)
md = [f"# Hyperloop at a larger scale ({'QUICK CHECK: numbers mean nothing' if ex.quick else 'full run' if not missing else 'partial: ' + str(len(done)) + ' of ' + str(len(done) + len(missing)) + ' runs'})", "",
      f"BPE corpus ({manifest['summary']['train_tokens']:,} training tokens, vocabulary {len(vocab):,}; scripts/prepare_corpus.sh), "
      f"d {TRAIN.get('d_model', 384)}, context {TRAIN.get('context', 256)}, Llama-style blocks, {steps} steps of 16 sequences "
      f"({tokens / 1e6:.1f} M tokens), bf16 products, {A.ranks} MPI rank(s); seeds {ex.seeds}; validation loss in nats per "
      "token on the whole validation split at the trained R, mean ± sample std. Command: `experiments/scale.py` "
      "(resumable in parts: `--max-runs K`).", ""]
if missing:
    md += [f"Not trained yet: {', '.join(missing)}.", ""]
AT_D128 = "At d 128 on bytes (experiments/results/hyperloop): 0.0561 nats, 18.8x the larger seed spread."
both = [s for s in ex.seeds if ("dense6", s) in done and ("dense2", s) in done]
if both and not (loss["dense6"] and loss["dense2"]):
    md += ["Depth check so far (seed " + ", ".join(map(str, both)) + "; the spread needs every seed): " +
           "; ".join(f"dense 6 {done[('dense6', s)]['loss']:.4f} against dense 2 {done[('dense2', s)]['loss']:.4f} "
                     f"({done[('dense2', s)]['loss'] - done[('dense6', s)]['loss']:.4f} nats)" for s in both) + ".",
           AT_D128, ""]
if loss["dense6"] and loss["dense2"]:
    md += [depth_check("dense 6", loss["dense6"], "dense 2", loss["dense2"]),
           AT_D128, ""]
md += ["| model | unique non-embedding params | FLOPs/token (fwd) | val loss | per seed | training time per run |",
       "|---|---|---|---|---|---|"]
for a in ("hyperloop", "looped", "dense8", "dense6", "dense2"):
    per = [done[(a, s)] for s in ex.seeds if (a, s) in done]
    per_loss = ", ".join(f"{r['loss']:.4f}" for r in per) or "—"
    per_time = ", ".join(f"{r['train_seconds'] / 60:.0f} min" for r in per) or "—"
    md.append(f"| {ARMS[a][1]} | {info[a]['params_non_embedding']:,} | {info[a]['infer_flops_per_token'] / 1e6:.2f} M | "
              f"{fmt(*loss[a]) if loss[a] else 'pending'} | {per_loss} | {per_time} |")
small = {"hyperloop": 1.2227, "looped": 1.1897, "dense8": 1.1830}  # experiments/results/hyperloop (nats/byte)
claims = []
if loss["hyperloop"] and loss["dense8"]:
    ratio = info["hyperloop"]["params_non_embedding"] / info["dense8"]["params_non_embedding"]
    claims.append(f"* Claim: with ~50% of the parameters Hyperloop beats the depth-matched dense model. It has {100 * ratio:.0f}% "
                  f"of dense 8's parameters; Hyperloop − dense 8 = {loss['hyperloop'][0] - loss['dense8'][0]:+.4f}: "
                  f"**{verdict(better(loss['hyperloop'], loss['dense8']))}** (lower by more than the pooled spread). "
                  f"At d 128: {small['hyperloop'] - small['dense8']:+.4f}, did not hold.")
if loss["hyperloop"] and loss["looped"]:
    claims.append(f"* Claim: Hyperloop beats plain looping: {loss['hyperloop'][0] - loss['looped'][0]:+.4f}: "
                  f"**{verdict(better(loss['hyperloop'], loss['looped']))}**. At d 128: "
                  f"{small['hyperloop'] - small['looped']:+.4f}, did not hold.")
if claims:
    md += [""] + claims
cos = {}
for a in LOOPED:
    if loss[a]:
        cos[a] = [mean_std([done[(a, s)]["eval"]["diagnostics"]["state_cosine"][r] for s in ex.seeds]) for r in range(R)]
if len(cos) == 2:
    md += ["", "## Cosine of successive loop states cos(h(r), h(r-1)) (eval)", "", "| r | Hyperloop | plain looped |", "|---|---|---|"]
    md += [f"| {r + 1} | {fmt(*cos['hyperloop'][r])} | {fmt(*cos['looped'][r])} |" for r in range(R)]
    less = sum(cos["hyperloop"][r][0] for r in range(1, R)) < sum(cos["looped"][r][0] for r in range(1, R))
    md += ["", f"* Claim: loop representations are less similar than with plain looping (steps 2..{R}): **{verdict(less)}**. "
           "At d 128: did not hold."]
md += ["", "Training time is wall-clock on a shared 2-core machine, pauses included (others' timings ran with "
       "the training stopped). Plot: `val_loss.png`, the validation loss during training against training tokens "
       "(every finished run). That curve is the first 16 x 8 windows of the validation split (32,768 tokens: the "
       "KJV, the Debian manuals and the start of FOLDOC, which come first), harder text than the whole split, most of "
       "which is GCIDE and WordNet definitions, so it sits above the tables' whole-split loss."]
ex.write({"steps": steps, "tokens_per_run": tokens, "missing": missing,
          "arms": {a: {"label": ARMS[a][1], "val_loss": loss[a], "params_non_embedding": info[a]["params_non_embedding"],
                       "infer_flops_per_token": info[a]["infer_flops_per_token"],
                       "per_seed": {s: done[(a, s)]["loss"] for s in ex.seeds if (a, s) in done}} for a in ARMS},
          "state_cosine": cos}, "\n".join(md))
if done:
    series = {f"{a}_s{s}": [(st * 16 * (TRAIN.get("context") or 256) / 1e6, v) for st, v in r["val_curve"]]
              for (a, s), r in sorted(done.items())}
    ex.plot("val_loss.png", "set title 'Validation loss during training (every finished run)'\n"
            "set xlabel 'training tokens (millions)'\nset ylabel 'validation loss (nats/token)'\nset key top right\n"
            "plot " + ", ".join(f"'${n}' using 1:2 with linespoints title '{n}'" for n in series), series)
