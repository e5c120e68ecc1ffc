#!/usr/bin/python3
"""RecurrentGPT, DeepLoop, NRGPT and CEM at the larger scale of experiments/scale.py (the Hyperloop
comparison): the small-scale claims (experiments/{recurrent_gpt,deeploop,nrgpt,cem}.py) re-tested where
depth clearly matters, resumable run by run.

    experiments/scale_systems.py --system {recurrent_gpt,recurrent_gpt_llama,deeploop,nrgpt,cem} [--seeds 2] [--max-runs K]
                                 [--tables-only] [--ranks 2] [--corpus DIR] [--p-sweep] [--despite-depth-check]
                                 [--quick]

Why: at d 128 on bytes the depth checks were weak (RecurrentGPT's dense 6 beat dense 2 by 1.4x the
seed spread, DeepLoop's by 3.6x; GPT_Rec looped 6 times lost to the same block once), so the claims
were tested where depth barely mattered; at scale.py's scale dense 6 beat dense 2 by 77x the spread
and every Hyperloop claim turned. Each system here gets that scale, and its own depth check first.

The common scale (scale.py's, so every arm and the Hyperloop comparison share it): the ~51.5 MB BPE
corpus (data/corpus, scripts/prepare_corpus.sh when missing), d 384, 6 heads, context 256, the
vocabulary of the corpus tokenizer, global batch 16 x 256 tokens (batch_size 8 x grad_accum 2: one
micro-batch per rank at 2 ranks), AdamW lr 1e-3, warmup 200, cosine, precision bf16, STEPS = 2400 steps
for every arm (9.8 M tokens), eval_every STEPS/8, eval_batches 16. Loss: nats per BPE token of
`looplm eval` on the whole validation split, at the arm's trained depth (R for looped arms). Every arm
is a config file plus --set overrides, all recorded in its summary ("sets"): the configs/*.json presets
are d 128 byte-level, so they get d_model, n_heads, context, tokenizer hf (tokenizer_file and
vocab_size from the corpus), lr, warmup and the training settings above.

The depth check gates the rest: once both its arms have every seed, the comparisons' arms are
trained only when the deeper model wins by more than 3x the larger seed spread (--despite-depth-check
overrides; added after RecurrentGPT's first GPT-2 seed, where dense 2 came out 0.006 nats *better*
than dense 6, before any comparison arm was trained).

Systems, arms and the verdict rules (fixed before any run; the small-scale scripts' rules):

recurrent_gpt: GPT-2 blocks (LayerNorm, GELU, learned positions, biases) in every arm, as at small
  scale: they are the RecurrentGPT paper's blocks, and affording Llama-style arms as well would double
  the cost.
    dense6, dense2   the gpt preset with those blocks, R 1, fixed depth: the depth check
    grt              configs/recurrent_gpt.json: 1 + 2x4 + 1, the gated rule, r ~ U{1..4}; evaluated at
                     every exit r = 1..2R = 8, its loss the exit-R entry
    dense_isoflop    dense with grt's FLOPs per token at THIS scale (looplm info: iso_flop_dense.n_core)
    dense_isoparam   dense with grt's parameters (iso_param_dense.n_core)
  * iso-FLOP match: held when |grt − isoflop| ≤ 2 x the pooled spread, or grt is lower.
  * U-shape beyond R: held when the lowest exit is at r ≤ R + 1 and the loss at r = 2R is above that
    minimum by more than its seed spread at r = 2R.
  * grt − isoparam: reported.
recurrent_gpt_llama: the same arms and rules with Llama-style blocks (RMSNorm, SwiGLU, RoPE, no
  biases): configs/recurrent_gpt.json with those four keys, and scale.py's dense arms (dense 6 and
  dense 2 reused; the iso-FLOP and iso-param dense arms of its blocks). Added after the GPT-2 blocks'
  depth check failed on both seeds (dense 2 at or below dense 6: 3.9141 against 3.9199 and 3.9277),
  before any comparison arm was trained: there depth does not pay at this budget, so no claim about
  depth could be tested with them. With Llama-style blocks it pays (scale.py: 77x the seed spread).
  Reported as such: a test of the paper's rule, not of its GPT-2 blocks.
deeploop: Llama-style blocks (RMSNorm, SwiGLU, RoPE: the deeploop preset's GELU becomes SwiGLU), 2
  blocks, no prelude or coda, fixed depth, so that the pre-norm arms are the Hyperloop scale's dense
  models.
    dense6, prenorm_R1  the depth check: scale.py's dense 6 and dense 2 (configs/corpus/hyperloop.json
                     with scale.py's dense sets, reused from experiments/results/scale/runs when the sets
                     match). 2 pre-norm blocks applied once IS dense 2, so prenorm_R1 is that arm.
    deeploop_R1, _R3 sandwich blocks, deeploop_p 0.5 (DeepLoop)
    deepnorm_R1, _R3 sandwich blocks, deeploop_p 0.25 (DeepNorm)
    prenorm_R3       pre-norm blocks, deeploop_p 0: plain pre-norm looping, the reference
  * neutral at R = 1: held when |DeepLoop − DeepNorm| ≤ 2 x the pooled spread.
  * DeepLoop beats DeepNorm at R = 3: held when lower by more than the pooled spread.
  * both against pre-norm looping (R = 1 and 3): reported.
  --p-sweep, a separate stage (not run by default; after every other run):
    the learning rate, chosen on seed 1: deeploop_R3 (p 0.5) at lr 3e-3 (probe_lr3e-3); if its
    validation loss is no more than 0.05 nats above deeploop_R3's at lr 1e-3 (lower is fine), the
    sweep uses 3e-3, else 1e-3. The sweep needs the highest lr here at which p = 1/2 still trains:
    small p fails, where it does, at a high lr (the small-scale sweep ran at 3e-3).
    sweep_p0.25, _p0.35, _p0.5, _p0.6: sandwich blocks at R = 3 and that lr, seeds 1..N.
  * small p fails to leave the plateau, p ≥ 1/2 trains reliably: held when, for every p < 1/2, some
    run ends at or above the plateau, and every run of every p ≥ 1/2 ends below it. The plateau: the
    unigram entropy of the training tokens (train.bin) minus 0.25 nats.
nrgpt: one block applied R = 6 times, learned positions.
    gpt_rec, gpt_rec_R1 configs/gpt_rec.json (one shared pre-norm GPT-2 block) at R 6 and R 1: the
                     depth check
    nrgpt            configs/nrgpt.json: one energy block (ff2w, learned step matrix P), R 6, 3 heads
  The small-scale overfitting claim needed a small slice seen several times; here a run sees 9.8 M of
  the 15.5 M training tokens once, so only comparability is tested:
  * NRGPT's loss is comparable to its recurrent baseline: held when nrgpt − gpt_rec ≤ the pooled
    spread (or lower). The energy of every step is reported (not a claim).
  Parameters: NRGPT's energy attention has a full d x d matrix H_h per head, so its parameters grow
  with the head count (at 6 heads 2.21 M non-embedding against GPT_Rec's 1.78 M, +25%). The claim is
  at matched parameters, so NRGPT runs 3 heads of 128 (1,772,545 against 1,775,232: −0.2%), chosen by
  `looplm info` before any run; GPT_Rec keeps the common 6 heads of 64. The tables print both.
cem: Llama-style layers (RMSNorm, RoPE); the untied baseline at matched depth is scale.py's dense 6.
    llama6, llama2   the depth check: scale.py's dense 6 and dense 2 (reused as for deeploop)
    cem              configs/cem.json: 6 CEM layers, T = 2, the diagonal term
    cem_T1           the same with cem_T 1
  (llama4, about CEM's parameter count at small scale, is skipped.)
  * CEM is competitive with the untied baseline at matched depth: held when cem − llama6 ≤ the pooled
    spread (or lower); its share of llama6's parameters is printed.
  * T = 2 beats T = 1: held when cem_T1 − cem > the pooled spread.

Training order: the depth-check arms first (every seed), then the other arms seed-major.
A third seed: once both arms of a claim have seeds 1..N (N = --seeds, 2 by default), if their
|mean difference| < 3 x the pooled spread, seed N + 1 (seed 3) is scheduled for both arms, after
every N-seed run; that claim's verdict then uses N + 1 seeds (and stays open, held null, until they
are in), as does a claim about one of those arms alone (the U-shape). The depth check always uses
seeds 1..N.

Reuse: a run whose config and sets equal those of a finished run (in this system's runs/, or in
experiments/results/scale/runs/, scale.py's, whose config is configs/corpus/hyperloop.json) is not
trained again: its summary is used, and results.json lists it under "reused".

Resumable run by run, across machines: each finished run's numbers go to
experiments/results/scale_<system>/runs/<arm>_s<seed>.json (kept in git); a run with that file is not
trained again, an interrupted one resumes from its checkpoint (runs/experiments/scale_<system>/).
--max-runs K stops after K new runs; results.md always shows what is finished. A rank count or a thread
count does not change a run (docs/training.md), so parts may run with different --ranks.

--quick: the pipeline on the small corpus (prepared into the quick runs directory, vocabulary 1024),
tiny models and a few steps; its numbers mean nothing.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time
from array import array
from collections import Counter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import (BIN, ROOT, Experiment, better, cpu_name, depth_check, fmt, mean_std, mpi_launcher,  # noqa: E402
                    pooled, training_seconds, verdict, write_json_atomic)

# Steps for every arm: scale.py's (about an hour for 8 block applications at 2 ranks in bf16 on the
# 2-core VM where it was chosen), so every arm here also compares with the Hyperloop runs.
STEPS = 2400
SYSTEM_NAMES = ("recurrent_gpt", "recurrent_gpt_llama", "deeploop", "nrgpt", "cem")
SCALE_BASE = "configs/corpus/hyperloop.json"  # scale.py's BASE: its summaries' config
# The common scale for the d 128 presets (SCALE_BASE holds the same values: checked below).
SCALE = dict(d_model=384, n_heads=6, context=256, tokenizer="hf", lr=1e-3, warmup=200)
SCALE_DENSE = dict(n_prelude=0, n_coda=0, R=1, loop_rule="residual")  # scale.py's dense arms' sets


def options(ap):
    ap.add_argument("--system", required=True, choices=SYSTEM_NAMES, help="the system whose claims are re-tested")
    ap.add_argument("--max-runs", type=int, default=0, help="stop after training this many new runs (0: all)")
    ap.add_argument("--tables-only", action="store_true", help="train nothing: the tables of the finished runs")
    ap.add_argument("--ranks", type=int, default=2, help="MPI ranks per run (1: one process; default 2)")
    ap.add_argument("--corpus", default=None, help="the prepared corpus (default data/corpus; prepared when missing)")
    ap.add_argument("--p-sweep", action="store_true", help="deeploop: also the p-sweep stage (after every other run)")
    ap.add_argument("--despite-depth-check", action="store_true",
                    help="train the comparisons' arms even where the depth check failed (depth does not pay there)")


_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--system", choices=SYSTEM_NAMES)
SYSTEM = _pre.parse_known_args()[0].system
ex = Experiment(f"scale_{SYSTEM}", __doc__, default_seeds=2, data=None, options=options)
A = ex.args
steps = 6 if ex.quick else STEPS

# ---------------------------------------------------------------- the corpus and the common settings
corpus = os.path.abspath(A.corpus or (os.path.join(ROOT, "runs", "experiments", "quick", "scale", "corpus") if ex.quick
                                      else os.path.join(ROOT, "data", "corpus")))
have_corpus = os.path.exists(os.path.join(corpus, "corpus.json"))
if not have_corpus and not A.tables_only:
    ex.log(f"preparing the corpus in {corpus} (scripts/prepare_corpus.sh)")
    cmd = [os.path.join(ROOT, "scripts", "prepare_corpus.sh"), "--out", corpus, "--bin", BIN]
    subprocess.run(cmd + (["--small", "--vocab-size", "1024"] if ex.quick else []), check=True, cwd=ROOT)
    have_corpus = True
if have_corpus:
    manifest = json.load(open(os.path.join(corpus, "corpus.json")))["summary"]
    vocab_size = len(json.load(open(os.path.join(corpus, "tokenizer.json")))["model"]["vocab"])
else:  # --tables-only without the corpus: the tables of the kept summaries; looplm info with the byte tokenizer
    ex.log(f"no corpus in {corpus}: tables only, looplm info with the byte tokenizer at the base vocabulary")
    manifest, vocab_size = None, json.load(open(os.path.join(ROOT, SCALE_BASE)))["vocab_size"]
DATA = dict(data_train=os.path.join(corpus, "train.bin"), data_val=os.path.join(corpus, "val.bin"),
            tokenizer_file=os.path.join(corpus, "tokenizer.json"), vocab_size=vocab_size)
TRAIN = dict(precision="bf16", batch_size=8, grad_accum=2, steps=steps, eval_every=max(1, steps // 8), eval_batches=16)
if ex.quick:
    TRAIN.update(d_model=32, n_heads=2, context=32, batch_size=2, warmup=2, eval_batches=1)
CONTEXT = TRAIN.get("context", SCALE["context"])
TOKENS = steps * 16 * CONTEXT
base_cfg = json.load(open(os.path.join(ROOT, SCALE_BASE)))
if any(base_cfg.get(k) != v for k, v in SCALE.items()):
    sys.exit(f"scale_systems: {SCALE_BASE} no longer has the common scale {SCALE}: the reused dense arms would differ")
summaries = os.path.join(ex.out, "runs")
os.makedirs(summaries, exist_ok=True)
# scale.py's summaries (its --quick ones for a quick check)
SCALE_RUNS = os.path.join(ROOT, "runs", "experiments", "quick", "scale", "results", "runs") if ex.quick else \
    os.path.join(ROOT, "experiments", "results", "scale", "runs")


def bf16_supported():
    p = subprocess.run([BIN, "info", "--config", SCALE_BASE, "--set", "precision=bf16", "--set", "tokenizer=byte",
                        "--no-measure"], cwd=ROOT, capture_output=True, text=True)
    return p.returncode == 0


if not A.tables_only and not bf16_supported():
    if not ex.quick:
        sys.exit("scale_systems: this CPU has no AVX512_BF16 (precision=bf16 is refused): every run of this comparison "
                 "is trained in bf16, so its parts must run on a CPU that has it")
    ex.log("no AVX512_BF16 here: the quick check trains in fp32")
    TRAIN["precision"] = "fp32"


def set_args(sets):
    return [a for k, v in sets.items() for a in ("--set", f"{k}={v}")]


class Arm:
    """One arm: a config file, its own --set overrides, a label, the trained R and the eval depth.
    A d 128 preset (scaled=True) also gets SCALE; scale.py's config already has the common scale."""
    def __init__(self, config, sets, label, R=1, depth=None, scaled=True):
        self.config, self.own, self.label, self.R, self.depth = config, dict(sets), label, R, depth or R
        self.scaled = scaled

    def sets(self, seed):
        """Every --set of a run but the data paths (those are DATA): what its summary records."""
        return dict(SCALE if self.scaled else {}, **TRAIN) | self.own | dict(seed=seed)


def info_of(arm):
    """looplm info of an arm (seed 1): parameters and FLOPs per token. precision does not change them
    (and bf16 is refused on a CPU without it); without the corpus the byte tokenizer stands in."""
    sets = dict(arm.sets(1), **DATA)
    sets.pop("precision")
    if not os.path.exists(DATA["tokenizer_file"]):
        sets.pop("tokenizer_file")
        sets["tokenizer"] = "byte"
    return json.loads(ex.looplm("info", "--config", arm.config, "--json", "--no-measure", *set_args(sets)))


def scale_dense(n_core, label):
    """scale.py's dense arm of n_core Llama-style blocks, with exactly its sets (so its runs are reused)."""
    return Arm(SCALE_BASE, dict(SCALE_DENSE, n_core=n_core), label, scaled=False)


# ---------------------------------------------------------------- the systems
# Each: title, the blocks (for the header), arms (dict, in training order after the depth check),
# depth_check (deep, shallow), pairs {claim: (a, b)} (the two arms of a claim: the third-seed rule),
# claims(G) -> (claims [(name, held or None, text)], reports [(small key or None, text)]), small(d128 results.json) ->
# {"depth": text, claim: text}, and an optional extra(G) -> (markdown lines, json) for more tables.


def pending(G, statement, *arms):
    """A claim whose runs are not all in: held None."""
    return None, f"{statement}: open ({', '.join(G.missing(*arms))} not finished)"


def recurrent_gpt(llama=False):
    R = 4
    LLAMA = dict(norm="rmsnorm", mlp="swiglu", pos="rope", bias="false")
    grt = Arm("configs/recurrent_gpt.json", LLAMA if llama else {},
              f"RecurrentGPT 1 + 2x{R} + 1 (gated, r ~ U{{1..{R}}}){', Llama-style blocks' if llama else ''}", R=R, depth=2 * R)
    gi = info_of(grt)
    lf, lp = gi["iso_flop_dense"]["n_core"], gi["iso_param_dense"]["n_core"]
    if llama:  # scale.py's dense arms (reused where they ran): the same blocks
        arms = {"dense6": scale_dense(6, "dense 6 (scale.py's)"), "dense2": scale_dense(2, "dense 2 (scale.py's)"), "grt": grt,
                "dense_isoflop": scale_dense(lf, f"dense {lf} (iso-FLOP)"), "dense_isoparam": scale_dense(lp, f"dense {lp} (iso-param)")}
    else:
        GPT2 = dict(norm="layernorm", pos="learned", bias="true", mlp="gelu", depth_sampler="fixed", n_prelude=0, n_coda=0, R=1)
        arms = {"dense6": Arm("configs/gpt.json", dict(GPT2, n_core=6), "GPT-2 dense 6"),
                "dense2": Arm("configs/gpt.json", dict(GPT2, n_core=2), "GPT-2 dense 2"),
                "grt": grt,
                "dense_isoflop": Arm("configs/gpt.json", dict(GPT2, n_core=lf), f"GPT-2 dense {lf} (iso-FLOP)"),
                "dense_isoparam": Arm("configs/gpt.json", dict(GPT2, n_core=lp), f"GPT-2 dense {lp} (iso-param)")}

    def exits(G):
        runs = G.runs("grt")
        return None if runs is None else [mean_std([r["eval"]["loss_by_depth"][i] for r in runs]) for i in range(2 * R)]

    def claims(G):
        out, rep = [], []
        p = G.pair("iso_flop_match")
        if p:
            (g, d), ps = p, max(pooled(*p), 1e-9)
            gap = g[0] - d[0]
            share = G.info["grt"]["params_non_embedding"] / G.info["dense_isoflop"]["params_non_embedding"]
            out.append(("iso_flop_match", abs(gap) <= 2 * ps or gap < 0,
                        f"an iso-FLOP RecurrentGPT matches the dense model with ~36% of the parameters. Here it has "
                        f"{100 * share:.0f}% of dense {lf}'s parameters; RecurrentGPT − dense {lf} = {gap:+.4f} (pooled "
                        f"spread {ps:.4f}, {G.seeds_text('iso_flop_match')})"))
        else:
            out.append(("iso_flop_match", *pending(G, "an iso-FLOP RecurrentGPT matches the dense model", "grt",
                                                   "dense_isoflop")))
        c = exits(G)
        if c:
            best = min(range(1, 2 * R + 1), key=lambda r: c[r - 1][0])
            rise = c[-1][0] - c[best - 1][0]
            out.append(("u_shape", best <= R + 1 and rise > max(c[-1][1], 1e-9),
                        f"loss against depth is U-shaped beyond R = {R}. Lowest at r = {best}; at r = {2 * R} it is "
                        f"{rise:+.4f} above the minimum (seed spread there {c[-1][1]:.4f})"))
        else:
            out.append(("u_shape", *pending(G, "loss against depth is U-shaped beyond R", "grt")))
        if G.loss("grt") and G.loss("dense_isoparam"):
            rep.append(("isoparam", f"Against the iso-param dense {lp} (the same parameters): RecurrentGPT − dense {lp} = "
                       f"{G.loss('grt')[0] - G.loss('dense_isoparam')[0]:+.4f} (pooled spread "
                       f"{pooled(G.loss('grt'), G.loss('dense_isoparam')):.4f})."))
        return out, rep

    def small(d):
        a, c = d["arms"], d["claims"]
        return {"depth": small_depth(a["dense6"]["val_loss"], a["dense2"]["val_loss"]),
                "iso_flop_match": f"{a['grt']['val_loss'][0] - a['dense_isoflop']['val_loss'][0]:+.4f}, "
                                  f"{verdict(c['iso_flop_match'])}",
                "u_shape": verdict(c["u_shape"]),
                "isoparam": f"{a['grt']['val_loss'][0] - a['dense_isoparam']['val_loss'][0]:+.4f}"}

    def extra(G):
        c = exits(G)
        if not c:
            return [], {}
        runs = G.runs("grt")
        gate = [mean_std([r["eval"]["diagnostics"]["gate"][i] for r in runs]) for i in range(2 * R)] \
            if all("gate" in r["eval"].get("diagnostics", {}) for r in runs) else None
        md = ["", f"## RecurrentGPT: loss at every exit r = 1..{2 * R} (trained R = {R})", "",
              "| r | val loss | mean gate |", "|---|---|---|"]
        md += [f"| {r}{' (R)' if r == R else ''} | {fmt(*c[r - 1])} | {fmt(*gate[r - 1], digits=3) if gate else '—'} |"
               for r in range(1, 2 * R + 1)]
        return md, {"grt_exits": {"loss": c, "gate": gate}}

    return dict(title="RecurrentGPT" + (" (Llama-style blocks)" if llama else ""),
                blocks="Llama-style blocks (RMSNorm, SwiGLU, RoPE, no biases)" if llama else
                "GPT-2 blocks (LayerNorm, GELU, learned positions, biases)",
                arms=arms, depth_check=("dense6", "dense2"), pairs={"iso_flop_match": ("grt", "dense_isoflop")},
                claims=claims, small=small, extra=extra)


def deeploop():
    DL = dict(n_prelude=0, n_coda=0, n_core=2, norm="rmsnorm", mlp="swiglu", pos="rope", depth_sampler="fixed")
    KINDS = {"deeploop": (dict(block="sandwich", deeploop_p=0.5), "DeepLoop (sandwich, p = 1/2)"),
             "deepnorm": (dict(block="sandwich", deeploop_p=0.25), "DeepNorm (sandwich, p = 1/4)"),
             "prenorm": (dict(block="pre_norm", deeploop_p=0), "pre-norm looped")}
    arms = {"dense6": scale_dense(6, "dense 6 (scale.py's)"),
            "prenorm_R1": scale_dense(2, "pre-norm looped R = 1 (= dense 2, scale.py's)")}
    for R in (1, 3):
        for k, (s, label) in KINDS.items():
            if f"{k}_R{R}" not in arms:
                arms[f"{k}_R{R}"] = Arm("configs/deeploop.json", dict(DL, **s, R=R), f"{label}, R = {R}", R=R)

    def claims(G):
        out, rep = [], []
        p = G.pair("neutral_at_R1")
        if p:
            gap = p[0][0] - p[1][0]
            out.append(("neutral_at_R1", abs(gap) <= 2 * pooled(*p),
                        f"DeepLoop is neutral at R = 1: DeepLoop − DeepNorm = {gap:+.4f} (pooled spread "
                        f"{pooled(*p):.4f}, within twice it to hold; {G.seeds_text('neutral_at_R1')})"))
        else:
            out.append(("neutral_at_R1", *pending(G, "DeepLoop is neutral at R = 1", "deeploop_R1", "deepnorm_R1")))
        p = G.pair("deeploop_beats_deepnorm_R3")
        if p:
            out.append(("deeploop_beats_deepnorm_R3", better(*p),
                        f"DeepLoop beats DeepNorm at R = 3: DeepLoop − DeepNorm = {p[0][0] - p[1][0]:+.4f} (pooled "
                        f"spread {pooled(*p):.4f}, lower by more than it to hold; "
                        f"{G.seeds_text('deeploop_beats_deepnorm_R3')})"))
        else:
            out.append(("deeploop_beats_deepnorm_R3", *pending(G, "DeepLoop beats DeepNorm at R = 3", "deeploop_R3",
                                                               "deepnorm_R3")))
        for k in ("deeploop", "deepnorm"):
            cells = [f"R = {R}: {G.loss(f'{k}_R{R}')[0] - G.loss(f'prenorm_R{R}')[0]:+.4f}" for R in (1, 3)
                     if G.loss(f"{k}_R{R}") and G.loss(f"prenorm_R{R}")]
            if cells:
                rep.append((None, f"Against pre-norm looping ({KINDS[k][1].split(' (')[0]} − pre-norm): " + ", ".join(cells) + "."))
        return out, rep

    def small(d):
        b = d["by_R"]
        return {"depth": small_depth(d["dense6"], b["prenorm"]["1"]),
                "neutral_at_R1": f"{b['deeploop']['1'][0] - b['deepnorm']['1'][0]:+.4f}, "
                                 f"{verdict(d['claims']['neutral_at_R1'])}",
                "deeploop_beats_deepnorm_R3": f"{b['deeploop']['3'][0] - b['deepnorm']['3'][0]:+.4f}, "
                                              f"{verdict(3 in d['claims']['deeploop_beats_deepnorm_R'])}",
                "p_sweep": f"lr 3e-3, {verdict(d['claims']['small_p_stuck'] and d['claims']['p_half_trains'])} "
                           f"(small p stuck: {d['claims']['small_p_stuck']}, p ≥ 1/2 trained: {d['claims']['p_half_trains']})"}

    return dict(title="DeepLoop vs DeepNorm vs pre-norm looping",
                blocks="Llama-style blocks (RMSNorm, SwiGLU, RoPE), a core of 2 blocks looped R times",
                arms=arms, depth_check=("dense6", "prenorm_R1"),
                pairs={"neutral_at_R1": ("deeploop_R1", "deepnorm_R1"),
                       "deeploop_beats_deepnorm_R3": ("deeploop_R3", "deepnorm_R3")},
                claims=claims, small=small)


def nrgpt():
    R = 6
    arms = {"gpt_rec": Arm("configs/gpt_rec.json", dict(R=R), f"GPT_Rec (one GPT-2 block x {R})", R=R),
            "gpt_rec_R1": Arm("configs/gpt_rec.json", dict(R=1), "GPT_Rec at R = 1 (depth check)"),
            "nrgpt": Arm("configs/nrgpt.json", dict(R=R, **({} if ex.quick else dict(n_heads=3))), f"NRGPT (one energy block x {R}, P matrix, 3 heads)",
                         R=R)}

    def claims(G):
        p = G.pair("comparable")
        if not p:
            return [("comparable", *pending(G, "NRGPT's loss is comparable to its recurrent baseline", "nrgpt",
                                            "gpt_rec"))], []
        gap = p[0][0] - p[1][0]
        return [("comparable", gap <= pooled(*p),
                 f"NRGPT's loss is comparable to its recurrent baseline: NRGPT − GPT_Rec = {gap:+.4f} (pooled spread "
                 f"{pooled(*p):.4f}, within it or lower to hold; {G.seeds_text('comparable')})")], []

    def small(d):
        a = d["arms"]
        n, g = a["nrgpt"]["val_loss"], a["gpt_rec"]["val_loss"]
        return {"depth": small_depth(g, a["gpt_rec_R1"]["val_loss"]),
                "comparable": f"{n[0] - g[0]:+.4f}, {verdict(n[0] - g[0] <= pooled(n, g))} (on a 512 KB slice seen 3.9 "
                              "times; its claim took the better of two baselines)",
                "energy": "yes" if d["energy_monotone_after_step1"]["nrgpt"] else "no"}

    def extra(G):
        pn, pg = G.info["nrgpt"]["params_non_embedding"], G.info["gpt_rec"]["params_non_embedding"]
        md = ["", f"Non-embedding parameters: NRGPT {pn:,}, GPT_Rec {pg:,} ({100 * (pn / pg - 1):+.1f}%: "
              f"{'within' if abs(pn / pg - 1) <= 0.10 else 'NOT within'} 10%)."]
        ex.log(md[1])
        runs = G.runs("nrgpt")
        if not runs or not all("energy" in r["eval"].get("diagnostics", {}) for r in runs):
            return md, {}
        per = [r["eval"]["diagnostics"]["energy"] + r["eval"]["diagnostics"].get("energy_final", []) for r in runs]
        n = min(map(len, per))
        energy = [mean_std([e[i] for e in per]) for i in range(n)]
        fell = [mean_std([r["eval"]["diagnostics"]["energy_fell"][i] for r in runs]) for i in range(R)] \
            if all("energy_fell" in r["eval"]["diagnostics"] for r in runs) else None
        mono = all(all(e[i + 1] < e[i] for i in range(1, n - 1)) for e in per)
        md += ["", "## NRGPT: energy per step (validation; mean per-token energy of each step's input, then of the final state)",
               "", "| step input | energy | fraction lowered by the step |", "|---|---|---|"]
        md += [f"| {'final' if i == R else i + 1} | {fmt(*energy[i], digits=2)} | "
               f"{fmt(*fell[i], digits=3) if fell and i < R else '—'} |" for i in range(n)]
        md += ["", f"From step 2 on, the energy falls at every step in every seed: {'yes' if mono else 'no'} (reported, "
               f"not a claim here). {at_d128('energy')}"]
        return md, {"energy": energy, "energy_fell": fell, "energy_monotone_after_step1": mono}

    return dict(title="NRGPT vs its recurrent baseline", blocks=f"one block applied R = {R} times, learned positions",
                arms=arms, depth_check=("gpt_rec", "gpt_rec_R1"), pairs={"comparable": ("nrgpt", "gpt_rec")},
                claims=claims, small=small, extra=extra)


def cem():
    arms = {"llama6": scale_dense(6, "Llama 6 layers (scale.py's dense 6)"),
            "llama2": scale_dense(2, "Llama 2 layers (scale.py's dense 2)"),
            "cem": Arm("configs/cem.json", {}, "CEM 6 layers, T = 2"),
            "cem_T1": Arm("configs/cem.json", dict(cem_T=1), "CEM 6 layers, T = 1")}

    def claims(G):
        out = []
        p = G.pair("competitive")
        if p:
            gap = p[0][0] - p[1][0]
            share = G.info["cem"]["params_non_embedding"] / G.info["llama6"]["params_non_embedding"]
            out.append(("competitive", gap <= pooled(*p),
                        f"CEM is competitive with the untied baseline at matched depth, with {100 * share:.0f}% of its "
                        f"non-embedding parameters: CEM T = 2 − Llama 6 = {gap:+.4f} (pooled spread {pooled(*p):.4f}, "
                        f"within it or lower to hold; {G.seeds_text('competitive')})"))
        else:
            out.append(("competitive", *pending(G, "CEM is competitive with the untied baseline at matched depth",
                                                "cem", "llama6")))
        p = G.pair("T2_beats_T1")
        if p:
            out.append(("T2_beats_T1", better(p[1], p[0]),
                        f"T = 2 beats T = 1: CEM T = 2 − T = 1 = {p[1][0] - p[0][0]:+.4f} (pooled spread {pooled(*p):.4f}, "
                        f"lower by more than it to hold; {G.seeds_text('T2_beats_T1')})"))
        else:
            out.append(("T2_beats_T1", *pending(G, "T = 2 beats T = 1", "cem", "cem_T1")))
        return out, []

    def small(d):
        a = d["arms"]
        c, l6, t1 = a["cem"]["val_loss"], a["llama6"]["val_loss"], a["cem_T1"]["val_loss"]
        return {"depth": small_depth(l6, a["llama2"]["val_loss"]),
                "competitive": f"{c[0] - l6[0]:+.4f}, {verdict(c[0] - l6[0] <= pooled(c, l6))}",
                "T2_beats_T1": f"{c[0] - t1[0]:+.4f}, {verdict(t1[0] - c[0] > pooled(c, t1))}"}

    return dict(title="CEM against the untied Llama baseline",
                blocks="Llama-style layers (RMSNorm, RoPE; SwiGLU in the baseline)",
                arms=arms, depth_check=("llama6", "llama2"),
                pairs={"competitive": ("cem", "llama6"), "T2_beats_T1": ("cem_T1", "cem")},
                claims=claims, small=small)


def small_depth(deep, shallow):
    margin, spread = shallow[0] - deep[0], max(shallow[1], deep[1], 1e-9)
    return f"{margin:.4f} nats, {margin / spread:.1f}x the larger seed spread"


S = {"recurrent_gpt": recurrent_gpt, "recurrent_gpt_llama": lambda: recurrent_gpt(llama=True), "deeploop": deeploop, "nrgpt": nrgpt,
     "cem": cem}[SYSTEM]()
ARMS = S["arms"]
DC = S["depth_check"]


# ---------------------------------------------------------------- training, reuse
def norm(sets):
    """sets as compared: numbers as floats, booleans as 'true'/'false', the rest as strings."""
    def one(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return float(v)
        try:
            return float(v)
        except ValueError:
            return str(v)
    return {k: one(v) for k, v in sets.items() if k not in DATA}


def train(arm, seed):
    """Train or resume one run; its summary (the numbers the tables need) is written last."""
    a = ARMS[arm]
    d = os.path.join(ex.runs, f"{arm}_s{seed}")
    mpi, threads = mpi_launcher(A.ranks, ex.log)
    cmd = mpi + [BIN, "train", "--config", a.config, "--out", d, "--quiet", "--sample-len", "0", "--threads", str(threads)]
    cmd += set_args(dict(a.sets(seed), **DATA))
    ex.run_training(d, cmd, f"{arm} seed {seed}")  # a second copy of the script waits for it, then finds its summary
    ev = ex.evaluate(d, a.depth, data=DATA["data_val"])
    rows = [json.loads(l) for l in open(os.path.join(d, "metrics.jsonl"))]
    steps_rows = [r for r in rows if r.get("split") == "train"]
    curve = [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]
    train_s = training_seconds(steps_rows)
    return dict(arm=arm, seed=seed, steps=steps, ranks=A.ranks, config=a.config, R=a.R, depth=a.depth,
                loss=ev["loss_by_depth"][a.R - 1], eval=ev, val_curve=curve,
                train_loss_last=[(r["step"], r["loss"]) for r in steps_rows[-20:]], train_seconds=train_s,
                sets=a.sets(seed), corpus=manifest, cpu=cpu_name(),
                finished=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()))


def finished_runs():
    """Every kept summary that another arm's run may be: this system's, then scale.py's (its config is
    its BASE, which its summaries do not record)."""
    out = []
    for folder, default_config in ((summaries, None), (SCALE_RUNS, SCALE_BASE)):
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            if name.endswith(".json"):
                p = os.path.join(folder, name)
                s = json.load(open(p))
                out.append((os.path.relpath(p, ROOT), s.get("config", default_config), norm(s.get("sets", {})),
                            s.get("corpus")))
    return out


done, reused = {}, {}
new = 0


def obtain(arm, seed, may_train=True):
    """The run's summary: its own file, an identical finished run (reused), or trained now (unless
    --tables-only, not may_train, or --max-runs is reached: then None)."""
    global new
    path = os.path.join(summaries, f"{arm}_s{seed}.json")
    a = ARMS[arm]
    if os.path.exists(path):
        s = json.load(open(path))
        if norm(s["sets"]) != norm(a.sets(seed)) or s.get("config") != a.config:
            sys.exit(f"scale_systems: {path} was trained with other settings than this script's {arm} "
                     f"({s.get('config')} {s['sets']}): restore them, or move that summary away")
        done[(arm, seed)] = s
        return s
    want = (a.config, norm(a.sets(seed)))
    for p, config, sets, corpus in finished_runs():
        # the same settings on the same corpus (its summary: sizes and token counts; unknown without it)
        if (config, sets) == want and (manifest is None or corpus == manifest):
            s = json.load(open(os.path.join(ROOT, p)))
            done[(arm, seed)], reused[f"{arm}_s{seed}"] = s, p
            return s
    if A.tables_only or not may_train or (A.max_runs and new >= A.max_runs):
        return None
    s = train(arm, seed)
    if os.path.exists(path):  # another copy of the script finished it while this one waited
        return obtain(arm, seed, False)
    write_json_atomic(path, s)
    done[(arm, seed)] = s
    new += 1
    ex.new_training = True
    return s


# Stage 1: the depth check (every seed), then the other arms seed-major — only where depth matters:
# when the check is complete and the deeper model is not better by more than 3x the larger seed
# spread, the comparisons would be tested where depth does not pay, so their arms are not trained
# (--despite-depth-check trains them anyway; --quick always does, its numbers mean nothing).
checks = [(a, s) for s in ex.seeds for a in DC]
for arm, seed in checks:
    obtain(arm, seed)
depth_fails = False
if all(k in done for k in checks) and not ex.quick and not A.despite_depth_check:
    d_deep, d_shallow = (mean_std([done[(a, s)]["loss"] for s in ex.seeds]) for a in DC)
    depth_fails = not (d_shallow[0] - d_deep[0] > 3 * max(d_shallow[1], d_deep[1], 1e-9))
    if depth_fails:
        ex.log(f"depth check: {DC[0]} does not beat {DC[1]} by 3x the seed spread; the comparisons' arms are not trained "
               "(--despite-depth-check trains them)")
main = checks + [(a, s) for s in ex.seeds for a in ARMS if a not in DC]
for arm, seed in main[len(checks):]:
    obtain(arm, seed, not depth_fails)
missing = [f"{a}_s{s}" for a, s in main if (a, s) not in done]

# Stage 2, the third seed: a claim whose arms are within 3 pooled spreads after seeds 1..N gets seed N + 1.
EXTRA = ex.seeds[-1] + 1
extended = {}  # claim -> |difference| / pooled spread after seeds 1..N
for claim, (a, b) in S["pairs"].items():
    if all((x, s) in done for x in (a, b) for s in ex.seeds):
        la, lb = (mean_std([done[(x, s)]["loss"] for s in ex.seeds]) for x in (a, b))
        if abs(la[0] - lb[0]) < 3 * pooled(la, lb):
            extended[claim] = abs(la[0] - lb[0]) / max(pooled(la, lb), 1e-12)
extra_runs = list(dict.fromkeys((x, EXTRA) for c in extended for x in S["pairs"][c]))
for arm, seed in extra_runs:
    obtain(arm, seed, not missing)  # trained after every N-seed run
missing += [f"{a}_s{s}" for a, s in extra_runs if (a, s) not in done]


def arm_seeds(arm):
    return ex.seeds + ([EXTRA] if (arm, EXTRA) in extra_runs else [])


# Stage 3 (deeploop --p-sweep): the learning rate on seed 1, then the sweep (trained only with
# --p-sweep, after every other run; shown whenever some of its runs are finished).
PS = (0.25, 0.35, 0.5, 0.6)
sweep, sweep_lr, sweep_missing = None, None, []
if SYSTEM == "deeploop" and (A.p_sweep or any(n.startswith(("sweep_", "probe_")) for n in os.listdir(summaries))):
    base = ARMS["deeploop_R3"]
    ARMS["probe_lr3e-3"] = Arm(base.config, dict(base.own, lr=3e-3), "DeepLoop R = 3 at lr 3e-3 (the lr probe)", R=3)
    may = A.p_sweep and not missing
    if ("deeploop_R3", 1) in done and obtain("probe_lr3e-3", 1, may):
        sweep_lr = 3e-3 if done[("probe_lr3e-3", 1)]["loss"] - done[("deeploop_R3", 1)]["loss"] <= 0.05 else 1e-3
        for p in PS:
            ARMS[f"sweep_p{p}"] = Arm(base.config, dict(base.own, deeploop_p=p, lr=sweep_lr), f"sandwich p = {p}", R=3)
        for seed in ex.seeds:
            for p in PS:
                obtain(f"sweep_p{p}", seed, may)
        sweep = {p: [done[(f"sweep_p{p}", s)]["loss"] for s in ex.seeds if (f"sweep_p{p}", s) in done] for p in PS}
    sweep_missing = [f"{a}_s{s}" for a, s in [("probe_lr3e-3", 1)] + [(f"sweep_p{p}", s) for s in ex.seeds for p in PS]
                     if (a, s) not in done]


# ---------------------------------------------------------------- the tables
TABLE = [a for a in ARMS if not a.startswith(("sweep_", "probe_"))]
TABLE = [a for a in TABLE if a not in DC] + list(DC)  # the depth check last, as in scale.py
info = {a: info_of(ARMS[a]) for a in TABLE}


def loss_over(arm, seeds):
    xs = [done[(arm, s)]["loss"] for s in seeds if (arm, s) in done]
    return mean_std(xs) if len(xs) == len(seeds) else None


def claim_seeds(claim):
    return ex.seeds + ([EXTRA] if claim in extended else [])


class G:
    """What a system's claims see: losses over the seeds each arm or claim is scheduled for."""
    info = info

    @staticmethod
    def loss(arm):
        return loss_over(arm, arm_seeds(arm))

    @staticmethod
    def pair(claim):
        la, lb = (loss_over(x, claim_seeds(claim)) for x in S["pairs"][claim])
        return (la, lb) if la and lb else None

    @staticmethod
    def runs(arm):
        seeds = arm_seeds(arm)
        return [done[(arm, s)] for s in seeds] if all((arm, s) in done for s in seeds) else None

    @staticmethod
    def missing(*arms):
        return [f"{a}_s{s}" for a in arms for s in arm_seeds(a) if (a, s) not in done]

    @staticmethod
    def seeds_text(claim):
        n = len(claim_seeds(claim))
        return f"{n} seeds" + (f": the arms were {extended[claim]:.1f} pooled spreads apart after {len(ex.seeds)}"
                               if claim in extended else "")


small_path = os.path.join("experiments", "results", SYSTEM.replace("_llama", ""), "results.json")  # (the d 128 runs: GPT-2 blocks)
try:
    small = S["small"](json.load(open(os.path.join(ROOT, small_path))))
except (OSError, KeyError, TypeError, ValueError, IndexError, ZeroDivisionError):
    small = {}


def at_d128(key):
    return f"At d 128 on bytes ({os.path.dirname(small_path)}): {small[key]}." if key in small \
        else f"At d 128: see {os.path.dirname(small_path)}."


corpus_summary = manifest or next((s["corpus"] for s in done.values() if s.get("corpus")), None)
ranks = sorted({s.get("ranks", A.ranks) for s in done.values()}) or [A.ranks]
status = ("QUICK CHECK: numbers mean nothing" if ex.quick else "full run" if not missing
          else f"partial: {len(done)} of {len(done) + len(missing)} runs")
train_tokens = f"{corpus_summary['train_tokens']:,} training tokens, " if corpus_summary else ""
md = [f"# {S['title']} at a larger scale ({status})", "",
      f"BPE corpus ({train_tokens}vocabulary {vocab_size:,}; scripts/prepare_corpus.sh), "
      f"d {TRAIN.get('d_model', SCALE['d_model'])}, context {CONTEXT}, {S['blocks']}, {steps} steps of 16 sequences "
      f"({TOKENS / 1e6:.1f} M tokens), {TRAIN['precision']} products, {'/'.join(map(str, ranks))} MPI rank(s); seeds "
      f"{ex.seeds} (and seed {EXTRA} for a claim whose two arms were within 3 pooled spreads); validation loss in nats "
      "per token on the whole validation split at the trained R, mean ± sample std. Command: "
      f"`experiments/scale_systems.py --system {SYSTEM}` (resumable in parts: `--max-runs K`).", ""]
if missing:
    md += [f"Not trained yet: {', '.join(missing)}.", ""]
if reused:
    md += ["Reused (the same config and sets): " + ", ".join(f"{k} = {v}" for k, v in reused.items()) + ".", ""]
deep, shallow = (loss_over(a, ex.seeds) for a in DC)
both = [s for s in ex.seeds if (DC[0], s) in done and (DC[1], s) in done]
if both and not (deep and shallow):
    md += ["Depth check so far (seed " + ", ".join(map(str, both)) + "; the spread needs every seed): " +
           "; ".join(f"{ARMS[DC[0]].label} {done[(DC[0], s)]['loss']:.4f} against {ARMS[DC[1]].label} "
                     f"{done[(DC[1], s)]['loss']:.4f} ({done[(DC[1], s)]['loss'] - done[(DC[0], s)]['loss']:.4f} nats)"
                     for s in both) + ".", at_d128("depth"), ""]
depth_json = None
if deep and shallow:
    text = depth_check(ARMS[DC[0]].label, deep, ARMS[DC[1]].label, shallow)
    margin, spread = shallow[0] - deep[0], max(shallow[1], deep[1], 1e-9)
    depth_json = dict(deep=DC[0], shallow=DC[1], margin=margin, x_spread=margin / spread,
                      depth_matters=margin > 3 * spread, text=text)
    md += [text, at_d128("depth"), ""]
    if depth_fails:
        md += ["**Depth does not pay here with these blocks, so the comparisons below were not trained** (the "
               "depth-check gate; `--despite-depth-check` trains them anyway).", ""]
md += ["| model | unique non-embedding params | FLOPs/token (fwd) | val loss | per seed | training time per run |",
       "|---|---|---|---|---|---|"]
for a in TABLE:
    per = [done[(a, s)] for s in arm_seeds(a) if (a, s) in done]
    l = G.loss(a)
    cell = fmt(*l) if l else f"{fmt(*mean_std([r['loss'] for r in per]))} ({len(per)} of {len(arm_seeds(a))} seeds)" \
        if per else "pending"
    per_loss = ", ".join(f"{r['loss']:.4f}" for r in per) or "—"
    per_time = ", ".join(f"{r['train_seconds'] / 60:.0f} min" for r in per) or "—"
    md.append(f"| {ARMS[a].label} | {info[a]['params_non_embedding']:,} | {info[a]['infer_flops_per_token'] / 1e6:.2f} M | "
              f"{cell} | {per_loss} | {per_time} |")
claims, reports = S["claims"](G)

# The p-sweep (deeploop): its claim, when its stage has begun.
sweep_json = None
if SYSTEM == "deeploop" and ("probe_lr3e-3" in ARMS):
    def unigram_entropy(path):
        """The entropy (nats) of the token frequencies of a token file (docs/data.md: an llm.c shard, or
        headerless uint16), cached next to the runs."""
        cache = os.path.join(ex.runs, "unigram.json")
        key = [os.path.abspath(path), os.path.getsize(path), os.path.getmtime(path)]
        if os.path.exists(cache):
            c = json.load(open(cache))
            if c.get("key") == key:
                return c["H"]
        with open(path, "rb") as f:
            raw = f.read()
        head = array("i", raw[:8])
        if head[0] in (20240520, 20240801):
            toks = array("H" if head[0] == 20240520 else "I", raw[1024:])
        else:
            toks = array("H", raw)
        if sys.byteorder != "little":
            toks.byteswap()
        counts, n = Counter(toks), len(toks)
        H = -sum(c / n * math.log(c / n) for c in counts.values())
        with open(cache, "w") as f:
            json.dump(dict(key=key, H=H, tokens=n), f)
        return H

    prev = os.path.join(ex.out, "results.json")
    H = unigram_entropy(DATA["data_train"]) if os.path.exists(DATA["data_train"]) else \
        (json.load(open(prev)).get("p_sweep") or {}).get("H_unigram") if os.path.exists(prev) else None
    plateau = H - 0.25 if H is not None else None
    md += ["", "## The p-sweep: sandwich blocks at R = 3", ""]
    if sweep_lr is None:
        md += ["The learning rate is not chosen yet (needs deeploop_R3 and probe_lr3e-3, seed 1)."]
    else:
        pr, b = done[("probe_lr3e-3", 1)]["loss"], done[("deeploop_R3", 1)]["loss"]
        md += [f"The learning rate: on seed 1 DeepLoop R = 3 reached {pr:.4f} at lr 3e-3 against {b:.4f} at lr 1e-3 "
               f"({pr - b:+.4f}; 3e-3 when no more than 0.05 above): the sweep runs at lr {'3e-3' if sweep_lr == 3e-3 else '1e-3'}."]
    if H is not None:
        md += ["", f"Unigram entropy of the training tokens: {H:.4f} nats; a run \"left the plateau\" when its "
               f"validation loss ends below {plateau:.4f}."]
    if sweep:
        md += ["", "| p | runs that left the plateau | validation loss per seed |", "|---|---|---|"]
        for p in PS:
            left = sum(1 for x in sweep[p] if plateau is not None and x < plateau)
            md.append(f"| {p} | {left} / {len(sweep[p])} | " + (", ".join(f"{x:.4f}" for x in sweep[p]) or "—") + " |")
    if sweep and plateau is not None and not sweep_missing:
        stuck = all(any(x >= plateau for x in sweep[p]) for p in PS if p < 0.5)
        trains = all(all(x < plateau for x in sweep[p]) for p in PS if p >= 0.5)
        claims.append(("p_sweep", stuck and trains,
                       f"small p fails to leave the plateau and p ≥ 1/2 trains reliably: p < 1/2 "
                       f"{'stuck in some run at every p' if stuck else 'trained in every run at some p'}, p ≥ 1/2 "
                       f"{'trained in every run' if trains else 'failed in some run'}"))
    else:
        claims.append(("p_sweep", None, "small p fails to leave the plateau and p ≥ 1/2 trains reliably: open ("
                       + (", ".join(sweep_missing) or "the unigram entropy") + " not finished)"))
    if sweep_missing:
        md += ["", f"p-sweep runs not trained yet (`--p-sweep`): {', '.join(sweep_missing)}."]
    sweep_json = dict(lr=sweep_lr, H_unigram=H, plateau_threshold=plateau, missing=sweep_missing,
                      val_loss={str(p): v for p, v in (sweep or {}).items()})
elif SYSTEM == "deeploop":
    md += ["", "The p-sweep (`--p-sweep`, a separate stage) has not been started."]

md += [""]
for name, held, text in claims:
    md.append(f"* Claim: {text}" + (". " if held is None else f": **{verdict(held)}**. ") + at_d128(name))
for key, text in reports:
    md.append(f"* {text}" + (f" {at_d128(key)}" if key else ""))
extra_md, extra_json = S["extra"](G) if "extra" in S else ([], {})
md += extra_md
md += ["", "Losses are nats per BPE token here and nats per byte at d 128: only the verdicts and the signs compare. "
       "Training time is wall-clock on a shared machine. Plot: `val_loss.png`, the validation loss during training "
       "(the first 16 x 8 windows of the validation split) against training tokens, every finished run."]
ex.write({"system": SYSTEM, "steps": steps, "tokens_per_run": TOKENS, "missing": missing,
          "arms": {a: {"label": ARMS[a].label, "config": ARMS[a].config, "sets": ARMS[a].own, "seeds": arm_seeds(a),
                       "val_loss": G.loss(a), "per_seed": {s: done[(a, s)]["loss"] for s in arm_seeds(a) if (a, s) in done},
                       "params_non_embedding": info[a]["params_non_embedding"],
                       "infer_flops_per_token": info[a]["infer_flops_per_token"]} for a in TABLE},
          "depth_check": depth_json,
          "claims": {name: {"held": held, "text": text} for name, held, text in claims},
          "third_seed": {c: {"arms": S["pairs"][c], "apart_in_pooled_spreads": x} for c, x in extended.items()},
          "reused": reused, "small_scale": small, "p_sweep": sweep_json, **extra_json}, "\n".join(md))
if done:
    series = {f"{a}_s{s}": [(st * 16 * CONTEXT / 1e6, v) for st, v in r["val_curve"]] for (a, s), r in sorted(done.items())}
    ex.plot("val_loss.png", "set title 'Validation loss during training (every finished run)'\n"
            "set xlabel 'training tokens (millions)'\nset ylabel 'validation loss (nats/token)'\nset key top right\n"
            "plot " + ", ".join(f"'${n}' using 1:2 with linespoints title '{n}'" for n in series), series)
