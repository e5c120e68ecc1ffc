#!/usr/bin/python3
"""PyTorch peer for looplm's benchmark: the same models as looplm's bench presets, in eager PyTorch.

Run with Debian's PyTorch (torch 1.13.1, CPU):

    /usr/bin/python3 bench/torch_peer.py --config dense --threads 2 [--steps S] [--json] [--bf16]
                                         [--coretype auto|keep|autodetect|NAME]
    /usr/bin/python3 bench/torch_peer.py --config dense --threads 2 --probe-only   # core-type probe

Model (nanoGPT style, identical in architecture to looplm's bench-<config> presets): token embedding
+ learned positional embedding; pre-norm blocks  x = x + attn(ln1(x));  x = x + mlp(ln2(x));
LayerNorm with weight and bias, eps 1e-5; causal multi-head attention whose q, k, v, o projections
are Linear without bias (q, k and v are stored as one [3d, d] Linear, i.e. the three matrices
concatenated: the same parameters and the same arithmetic, one GEMM instead of three); MLP
d -> 4d -> d without bias, exact (erf) GELU; final LayerNorm; lm_head tied to the token embedding.

  tiny:   4 layers, d 128, 4 heads, context 64,  batch 12, vocab 65
  dense:  6 layers, d 384, 6 heads, context 256, batch 8,  vocab 65
  looped: 1 prelude block + 2 core blocks applied R=4 times (weights shared, backprop through all
          4 applications) + 1 coda block; d 384, 6 heads, context 256, batch 8, vocab 65

The looped systems of docs/systems.md on looped's shape (looplm presets bench-<name>; the same
parameter counts, and the same logits as reference/looplm_ref.py given the same weights, up to fp64
rounding):
  recurrent_gpt  loop rule `gated` (RecurrentGPT): per loop step, with h the state (h_pre, the
          prelude's output, at the start): h~ = W_proj [h + ε_x, h_pre] (Linear 2d -> d, no bias);
          o = core(h~); g = σ(f_g([LN_a(h), LN_b(h_pre)]) / τ + ε_g), f_g = Linear(2d -> d) -> SiLU
          -> Linear(d -> d) (both with bias, the last one initialised to +4); h <- g h + (1 - g) o
          (torch.lerp). Training noise σ_x = σ_g = 0.1 (torch.randn_like per step, in train mode),
          τ = 1; none in generation (eval mode).
  deeploop  every block `sandwich`: x = n2(α x + attn(n1(x))); x = n4(α x + mlp(n3(x))), RMSNorm
          (weight, eps 1e-5; written out, torch 1.13 has no nn.RMSNorm) for all four norms and the
          final one, α = (2N)^0.5 with N = 1 + 2*4 + 1 = 10 (torch.add(..., alpha=α)); β = (8N)^-0.5
          scales attn.v, attn.o and the MLP matrices at init.
  hyperloop  loop rule `hyper`, n = 4 streams Y [B, T, 4, d] (copies of h_pre at the start), own
          maps per loop l: z = flatten(Y) / sqrt(mean(flatten(Y)^2) + 1e-20) over n*d;
          H_pre = σ(α_pre φ_pre(z) + b_pre); x = core(Σ_s H_pre[s] Y_s) + loop_emb[l];
          H_post = 2σ(α_post φ_post(z) + b_post); H_res = σ(α_res φ_res(z) + b_res) [n];
          Y_s <- H_res[s] Y_s + H_post[s] x (torch.addcmul). After R loops h = mean_s Y_s -> coda.
          φ: Linear(n*d -> n, no bias); the three of a loop are one stacked Linear (one GEMM, the
          same parameters, as looplm stores them); α learned scalars, b learned [n].
  mhc     as hyperloop, but H_res a full n x n matrix per token: L = α_res φ_res(z) + b_res
          (φ_res: n*d -> n*n, b_res [n, n]), 20 Sinkhorn rounds on exp(L - max L) (rows to sum 1, then
          columns) in fp32, autograd through the unrolled rounds; Y_s <- Σ_t H_res[s,t] Y_t + H_post[s] x
          (a batched [n, n] @ [n, d] matmul).
In decode the rule's per-token computations run for every new token (with torch.mv for the
single-token products, addmv where there is a bias), with one KV cache per (block, loop step).

The energy-based blocks (NRGPT and CEM in docs/systems.md; looplm presets bench-nrgpt, bench-cem;
d 384, 6 heads, context 256, batch 8, vocab 65, tied head, no prelude / coda; the same parameter counts as looplm, and
the same logits and gradients as reference/looplm_ref.py given the same weights, up to fp64 rounding;
peer_config and looplm_state_dict map a looplm checkpoint onto these models):
  nrgpt   one `energy` block (ff2w, P matrix) applied R = 6 times, learned positions, LayerNorm norm_f.
          g = LayerNorm(x) without gain (bias only); k^h = g H_h^T; A = sum_h softmax_causal(g k^hT) k^h
          (scale 1) through F._scaled_dot_product_attention (query g expanded over the heads, times
          sqrt(d) against SDPA's 1/sqrt(d)); u = g W1^T + b1; F = GELU(u) W2^T + b2 + (GELU'(u) ⊙ g W2) W1
          with GELU'(u) = Phi(u) + u phi(u) written out (autograd gives GELU'' in training);
          x <- x + (A + s_ff F) P^T. H, W1 and W2^T all multiply g: one stacked Linear [6d + 8d, d].
          Decode: one cache of k^h per loop step (6), attention as g . k^h per head.
  cem     6 `cem` layers (T = 2 inner steps per sub-layer, the diagonal term δ, no preconditioner), RoPE,
          RMSNorm norm_f. Per sub-layer the context c = its input is fixed, x moves from c, both
          normalised by the sub-layer's RMSNorm. Attention step: one SDPA call with per-head query
          [RoPE(q^k) | x̂ ⊙ δ] (scaled so that SDPA's 1/sqrt(hd + d) becomes 1/sqrt(hd)), key
          [RoPE(k^k) | ĉ], value [k^k | ĉ] (keys and values built once per sub-layer), x <- x + O_q W_Q
          + δ ⊙ sum_heads O_c (W_V = W_K, W_O = W_Q^T). MLP step: x <- x + (SiLU(ĉ W_gate^T) ⊙ (x̂ W_up^T))
          W_up. [W_Q; W_K] and [W_gate; W_up] are stacked Linears (one GEMM at the first step, where
          x̂ = ĉ). Decode: per layer a cache of RoPE(k), k and ĉ (ĉ once, not per head), scores
          q . k per head + (x̂ ⊙ δ) . ĉ once.
--attn manual computes the energy and cem attentions as the decode path does (masked softmax).

Training: random tokens, forward + backward + torch.optim.AdamW(lr 1e-3, weight_decay 0.1).
Reported: median tokens/s over the timed steps (B*T tokens a step) after warm-up steps, and peak RSS
(resource.getrusage ru_maxrss, the whole process) in MiB.

Generation: batch 1, a 16-token prompt, then 256 new tokens greedy (argmax) with a per-layer KV cache
under torch.inference_mode(). For the looped model each of the 4 applications of a core block has
its own cache (its inputs differ). The timed span is prefill + all decode steps; tokens/s = new
tokens / that time, median of --gen-repeats runs after one warm-up run. 16 + 256 exceeds the dense
model's context of 256 (and tiny's 64): when the cache is full, the context is shifted — the last
half of the context is kept, re-encoded at positions 0.. (one batched prefill), and decoding goes on.
For dense that happens once (at the 241st new token); its cost is included and is ~1-2% of the run.

Set-up ("best set-up" of the reference benchmark notes (a Zen 5 machine; not in this repository)), all applied inside this process only:
  * fp32 Linear layers go through the BLAS torch was built against: Debian's OpenBLAS
    (openblas-pthread 0.3.21, which has its own thread pool); everything else, and bf16 GEMMs
    (oneDNN), runs on torch's OpenMP pool (libgomp).
  * OpenBLAS core type, measured on the spot (--coretype auto, the default). OpenBLAS 0.3.21 picks
    its kernels from the CPU model once, when it is loaded, or from OPENBLAS_CORETYPE; it does not
    know every CPU these machines get (an Intel family 6 model 207 gets the SSE3 "Prescott" kernels:
    dense training 323 instead of 1,072 tokens/s at 1 thread), and the environment may preset
    OPENBLAS_CORETYPE=Haswell (for other software), which halves OpenBLAS on a reference Zen 5 machine's. So
    before torch is imported the peer starts one short subprocess per candidate: autodetect
    (variable unset), then SapphireRapids, Cooperlake, SkylakeX if /proc/cpuinfo has avx512f, Zen,
    Haswell if avx2, Sandybridge if avx (--coretype-candidates to change; 0.3.21 has no
    SapphireRapids kernels, and a forced AVX-512 type dies with SIGILL on a CPU without AVX-512,
    hence the flag filter). Each times fp32 torch.mm (x @ W^T, the OpenBLAS path of nn.Linear) on
    this config's training GEMM shapes, those of looplm's measure_gemm_peak: {M,3d,d}, {M,4d,d},
    {M,d,4d}, M = batch*context; 2 warm-up calls, then the best of 7 samples of >= 20 ms per shape,
    rated as all flops / the sum of the best times, with this run's threads, OMP_WAIT_POLICY and
    openblas_set_num_threads. Two rounds (the second in reverse order), best round counts. A
    candidate whose loaded core (openblas_get_corename) is not the one asked for is left out. The
    fastest wins, but autodetect is kept unless another type is more than 3% faster (noise). The
    winner is set in THIS process's os.environ (the parent environment is not changed) and the
    benchmark runs under it. ~10 s. --coretype NAME / autodetect forces a type without probing
    (bench/compare.py probes once with --probe-only and passes the winner down); --coretype keep
    (or --keep-coretype) leaves the environment's value. Printed and in --json: coretype,
    coretype_source (probe / given / environment), coretype_probe (the table), openblas_core, and
    gemm_peak_gflops: the same GEMMs timed in this process after the benchmark, the best shape's
    median rate (looplm bench's definition, so the two are comparable).
  * OMP_WAIT_POLICY=PASSIVE (set in os.environ before torch loads, unless already set): two pools
    (OpenMP + OpenBLAS) on 2 cores, both busy-waiting by default, fight each other; that is the
    biggest effect here (4-5x on dense training, up to 10x on decode).
  * torch.set_num_threads(N) and openblas_set_num_threads(N) (ctypes; torch does not size OpenBLAS's
    pool). Generation runs with torch.set_num_threads(1) (--gen-omp-threads) and OpenBLAS at N:
    the decode ops are too small to split, and that is 15-20% faster than N OpenMP threads.
  * Decode (1 token) uses torch.mv (sgemv) instead of nn.Linear: OpenBLAS 0.3.21 runs a 1-row
    sgemm through its full packing GEMM path (a 1x384 @ 384x1536 product: 149 us vs 34 us).
    Dense decode 166-179 -> 217 tokens/s with that alone. (--no-decode-mv; not under --bf16.)
  * Attention: torch 1.13 has no public F.scaled_dot_product_attention; the private
    F._scaled_dot_product_attention(is_causal=True, need_attn_weights=False) is the composite math
    path: identical results to the manual masked softmax, ~3-5% faster and ~90 MiB less peak RSS on
    dense in training; used for training (--attn manual to switch). Decode uses the manual path.
  * AdamW(foreach=True): the multi-tensor path (fused AdamW is CUDA-only in 1.13); no measurable
    difference from the for-loop path at these sizes.
--out-of-the-box skips all of the above except torch.set_num_threads(N).

Core-type probe on this session's VM (2026-12-01; lscpu: "AMD EPYC", family 25 model 1 = Zen 3,
AVX2, no AVX-512; the 2 cores are shared (a concurrent C++ rebuild was expected, though none was
visible when checked), and rates moved by 10-30% between runs):
fp32 GEMM GFLOP/s, best of the two rounds, autodetect loads "Zen":
  dense/looped, 2 threads: autodetect (Zen) 167-176, Haswell 180-182, Sandybridge 130-147 -> Haswell
  dense/looped, 1 thread:  autodetect (Zen) 91,      Haswell 93,      Sandybridge 72      -> autodetect
  tiny, 2 threads:         autodetect (Zen) 109-163, Haswell 136-174, Sandybridge 91-142  -> Haswell
                           (once autodetect: Zen's 2-thread rate swings 120-163 from process to
                           process; Haswell 171-173 whenever the machine was quiet)
  tiny, 1 thread:          autodetect (Zen) 85-86,   Haswell 91-92                        -> Haswell
  forced Prescott, tiny, 1 thread: 21 (the starved case); forced SkylakeX: SIGILL; Cooperlake and
  SapphireRapids: OpenBLAS loads Haswell instead.
Dense training, 2 threads, 4 steps: autodetect 1,677 / 1,698, Haswell 1,677 / 1,820 tokens/s.

Measurements (2026-11-29, the VM of that day: 2 vCPU AMD EPYC family 25 model 17 = Zen 4, NOT the Zen 5 of
a reference Zen 5 machine; other jobs share the 2 cores, so runs were interleaved and repeated and those hit by
background load discarded). OpenBLAS sgemm here: ~104 GFLOP/s at 1 thread, ~200 at 2 (either core
type: Zen 4 executes AVX-512 as 2x256 bit, so the AVX2 kernels keep up); oneDNN bf16 ~216 / ~436.
dense, 2 threads, train tokens/s | decode tokens/s:
  best set-up (above)                           2120-2172 | 347-432
  same, OPENBLAS_CORETYPE=Haswell kept          2144-2154 | 297-336
  same, OMP_WAIT_POLICY=ACTIVE                   457-513  |  33-82
  same, torch.set_num_threads(1) for training   1784-1808 | (same)
  manual attention + nn.Linear decode           1694      | 222-224
  out of the box (Haswell, spinning pools)       429-1114 |  14-46
tiny: all passive set-ups 11.8k-17.5k (noise-bound), spinning pools 9.0k-12.0k with 0.2-2 s stalls.
Best set-up, medians of separate runs (runs hit by background load left out), 1 thread / 2 threads
(a reference Zen 5 machine's figures in brackets; bench/README.md has the full table):
  tiny   train 11,985-13,261 / 15,982-17,813 (19,150 / 25,996); decode 1,831-1,918 / 1,814-1,982
  dense  train  1,219-1,242  /  2,104-2,194  (2,424 / 4,595);   decode 206-256 / 367-432 (449 / 587)
  looped train    716-758    /  1,261-1,330  (1,468 / 2,648);   decode 141-194 / 215-322
  peak RSS: tiny ~315 MiB, dense 1.19-1.33 GiB, looped 1.62-1.72 GiB
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

CONFIGS = {
    "tiny": dict(n_prelude=0, n_core=4, n_coda=0, loops=1, d=128, heads=4, ctx=64, batch=12, vocab=65),
    "dense": dict(n_prelude=0, n_core=6, n_coda=0, loops=1, d=384, heads=6, ctx=256, batch=8, vocab=65),
    "looped": dict(n_prelude=1, n_core=2, n_coda=1, loops=4, d=384, heads=6, ctx=256, batch=8, vocab=65),
}
# The looped systems of docs/systems.md: bench-looped's shape (1 + 2x4 + 1, d 384, ...) with another
# loop rule or block kind (looplm presets bench-<name>).
_LOOPED = CONFIGS["looped"]
CONFIGS.update({
    "recurrent_gpt": dict(_LOOPED, rule="gated", gate_sigma_x=0.1, gate_sigma_g=0.1, gate_tau=1.0,
                          gate_bias_init=4.0),
    "deeploop": dict(_LOOPED, block="sandwich", norm="rmsnorm", deeploop_p=0.5),
    "hyperloop": dict(_LOOPED, rule="hyper", streams=4, hyper_res="diag"),
    "mhc": dict(_LOOPED, rule="hyper", streams=4, hyper_res="sinkhorn", sinkhorn_iters=20),
})
# The energy-based blocks, NRGPT and CEM (looplm presets bench-nrgpt, bench-cem): d 384, 6 heads,
# context 256, batch 8. nrgpt: one energy block applied R = 6 times (ff2w, P matrix), learned
# positions, LayerNorm norm_f; cem: 6 cem layers (T = 2 inner steps, the diagonal term, no
# preconditioner), RoPE, RMSNorm norm_f. Both tied heads, no prelude / coda.
CONFIGS.update({
    "nrgpt": dict(n_prelude=0, n_core=1, n_coda=0, loops=6, d=384, heads=6, ctx=256, batch=8, vocab=65,
                  block="energy", energy_ff="ff2w", energy_P="matrix", norm="layernorm", pos="learned"),
    "cem": dict(n_prelude=0, n_core=6, n_coda=0, loops=1, d=384, heads=6, ctx=256, batch=8, vocab=65,
                block="cem", cem_T=2, cem_diag=True, cem_precond=False, norm="rmsnorm", pos="rope"),
})
# Defaults of the keys the four above set: the plain pre-norm LayerNorm model with the residual rule.
MODEL_DEFAULTS = dict(block="pre_norm", norm="layernorm", rule="residual", deeploop_p=0.0,
                      pos="learned")
DEFAULT_STEPS = {"tiny": 20, "dense": 8}  # timed training steps; 6 for the looped shapes

# OpenBLAS core types the probe may force, each with the /proc/cpuinfo flag it needs. Debian's
# OpenBLAS 0.3.21 (DYNAMIC_ARCH) has kernels for SkylakeX, Cooperlake, Zen, Haswell, Sandybridge
# and older; SapphireRapids arrived in 0.3.22 (an unknown name makes OpenBLAS autodetect, and the
# probe then sees that the core it asked for was not the one loaded and leaves it out).
CORETYPE_CANDIDATES = (("SapphireRapids", "avx512f"), ("Cooperlake", "avx512f"),
                       ("SkylakeX", "avx512f"), ("Zen", "avx2"), ("Haswell", "avx2"),
                       ("Sandybridge", "avx"))
AUTODETECT = "autodetect"  # --coretype value: OPENBLAS_CORETYPE unset, OpenBLAS detects the CPU
PROBE_MARGIN = 0.03  # a forced core type replaces autodetection only if it is > 3% faster


def gemm_shapes(c):
    """The training GEMMs (M, N, K) of looplm's measure_gemm_peak: qkv, fc and proj."""
    M, d = c["batch"] * c["ctx"], c["d"]
    return [(M, 3 * d, d), (M, 4 * d, d), (M, d, 4 * d)]


def build_parser():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", choices=CONFIGS, required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=None, help="timed steps (default: per config)")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--bf16", action="store_true", help="bf16 autocast (training and generation)")
    ap.add_argument("--gen-prompt", type=int, default=16)
    ap.add_argument("--gen-tokens", type=int, default=256, help="new tokens; 0 skips generation")
    ap.add_argument("--gen-repeats", type=int, default=3)
    ap.add_argument("--gen-omp-threads", type=int, default=1,
                    help="torch.set_num_threads during generation (default 1: decode ops are too "
                         "small to split; OpenBLAS keeps --threads for the matrix-vector products)")
    ap.add_argument("--no-train", action="store_true")
    ap.add_argument("--attn", choices=["manual", "sdpa"], default="sdpa",
                    help="training attention: F._scaled_dot_product_attention or masked softmax")
    ap.add_argument("--no-decode-mv", action="store_true",
                    help="decode through nn.Linear (sgemm) instead of torch.mv (sgemv)")
    ap.add_argument("--no-foreach", action="store_true", help="AdamW for-loop path")
    ap.add_argument("--omp-threads", type=int, default=None,
                    help="torch.set_num_threads value (default: --threads)")
    ap.add_argument("--blas-threads", type=int, default=None,
                    help="OpenBLAS pool size (default: --threads; 0 = leave OpenBLAS's default)")
    ap.add_argument("--coretype", default="auto", metavar="auto|keep|autodetect|NAME",
                    help="OpenBLAS core type (OPENBLAS_CORETYPE of this process): auto (default) = "
                         "probe the candidates in subprocesses and take the fastest; keep = leave "
                         "the environment's value; autodetect = unset it; NAME = force it "
                         "(e.g. SkylakeX, Haswell, Zen)")
    ap.add_argument("--coretype-candidates", default=None, metavar="A,B,...",
                    help="core types for the probe to try besides autodetect (default: those of "
                         + ", ".join(n for n, _ in CORETYPE_CANDIDATES)
                         + " this CPU's flags allow)")
    ap.add_argument("--keep-coretype", action="store_true", help="same as --coretype keep")
    ap.add_argument("--probe-only", action="store_true",
                    help="run the core-type probe, print its result and exit")
    ap.add_argument("--gemm-only", action="store_true",
                    help="only measure fp32 torch.mm GFLOP/s on the config's training GEMM shapes "
                         "(what one probe subprocess does)")
    ap.add_argument("--out-of-the-box", action="store_true",
                    help="no set-up: keep OPENBLAS_CORETYPE, default OpenMP wait policy and OpenBLAS "
                         "pool; only torch.set_num_threads(N)")
    ap.add_argument("--check", action="store_true", help="check KV-cache decode against full forward")
    return ap


def cpu_flags():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def probe_candidates(a):
    if a.coretype_candidates is not None:
        return [n.strip() for n in a.coretype_candidates.split(",") if n.strip()]
    flags = cpu_flags()
    return [name for name, flag in CORETYPE_CANDIDATES if flag in flags]


def probe_coretype(a):
    """Times fp32 torch.mm on the config's training GEMM shapes under each candidate core type, each
    in its own subprocess (OpenBLAS reads OPENBLAS_CORETYPE once, when it is loaded), with this run's
    thread set-up. Two rounds, the second in reverse order; a candidate's rate is its better round.
    Returns (winner, table); table rows: requested core type, the core OpenBLAS reports it loaded,
    aggregate GFLOP/s over the three shapes (None if not measured), per-round rates, note."""
    base = [sys.executable, os.path.abspath(__file__), "--config", a.config, "--threads",
            str(a.threads), "--gemm-only", "--json", "--coretype", "keep"]
    if a.blas_threads is not None:
        base += ["--blas-threads", str(a.blas_threads)]
    if a.omp_threads is not None:
        base += ["--omp-threads", str(a.omp_threads)]

    def measure(cand):
        env = dict(os.environ)
        env.pop("OPENBLAS_CORETYPE", None)
        if cand != AUTODETECT:
            env["OPENBLAS_CORETYPE"] = cand
        try:
            p = subprocess.run(base, env=env, capture_output=True, text=True, timeout=120)
        except (subprocess.TimeoutExpired, OSError) as e:
            return None, f"failed: {type(e).__name__}"
        try:
            return json.loads(p.stdout.strip().splitlines()[-1]), None
        except (ValueError, IndexError):
            return None, f"failed: exit {p.returncode}"

    table, seen = [], set()
    for cand in [AUTODETECT] + probe_candidates(a):  # round 1
        row = {"coretype": cand, "core": None, "gflops": None, "runs": [], "note": ""}
        table.append(row)
        if cand.lower() in seen:  # autodetection already loaded this core
            row["core"], row["note"] = cand, f"= {AUTODETECT}"
            continue
        d, err = measure(cand)
        if d is None:
            row["note"] = err
            continue
        row["core"] = d.get("openblas_core")
        row["runs"].append(d.get("gemm_gflops"))
        if cand != AUTODETECT and (row["core"] or "").lower() != cand.lower():
            row["note"] = f"not loaded, OpenBLAS used {row['core']}"
        else:
            seen.add((row["core"] or "").lower())
    valid = [r for r in table if r["runs"] and not r["note"]]
    for row in reversed(valid):  # round 2, reverse order
        d, _ = measure(row["coretype"])
        if d is not None:
            row["runs"].append(d.get("gemm_gflops"))
    for row in table:
        if row["runs"] and not row["note"]:
            row["gflops"] = max(row["runs"])
    if not valid:
        return AUTODETECT, table
    best = max(valid, key=lambda r: r["gflops"])
    auto = next((r for r in valid if r["coretype"] == AUTODETECT), None)
    if auto is not None and best["gflops"] <= auto["gflops"] * (1 + PROBE_MARGIN):
        best = auto
    return best["coretype"], table


def setup_coretype(a):
    """Sets OPENBLAS_CORETYPE in this process's environment (before torch, and with it OpenBLAS, is
    loaded); the parent environment is not changed. Returns what was chosen and why."""
    mode = "keep" if (a.keep_coretype or a.out_of_the_box) else a.coretype
    info = {"coretype": None, "coretype_source": None, "coretype_probe": None}
    if mode == "keep":
        info["coretype"] = os.environ.get("OPENBLAS_CORETYPE") or AUTODETECT
        info["coretype_source"] = "environment"
        return info
    if mode == "auto":
        mode, info["coretype_probe"] = probe_coretype(a)
        info["coretype_source"] = "probe"
    else:
        info["coretype_source"] = "given"
    os.environ.pop("OPENBLAS_CORETYPE", None)
    if mode.lower() != AUTODETECT:
        os.environ["OPENBLAS_CORETYPE"] = mode
    info["coretype"] = mode
    return info


def format_probe(table):
    parts = []
    for r in table:
        s = r["coretype"]
        if r["coretype"] == AUTODETECT and r["core"]:
            s += f" [{r['core']}]"
        s += " " + (f"{r['gflops']:.1f}" if r["gflops"] else "—")
        if r["note"]:
            s += f" ({r['note']})"
        parts.append(s)
    return ", ".join(parts)


if __name__ == "__main__":
    ARGS = build_parser().parse_args()
    if not ARGS.out_of_the_box:
        # libgomp reads this when it is loaded (with torch). Idle OpenMP workers then sleep instead
        # of spinning, so they do not fight OpenBLAS's own threads for the same cores.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    CORETYPE_INFO = setup_coretype(ARGS)  # before torch is imported
    if ARGS.probe_only:
        c0 = CONFIGS[ARGS.config]
        same = [k for k, v in CONFIGS.items() if gemm_shapes(v) == gemm_shapes(c0)]
        out = dict(config=ARGS.config, threads=ARGS.threads, gemm_shapes=gemm_shapes(c0),
                   applies_to=same, **CORETYPE_INFO)
        if ARGS.json:
            print(json.dumps(out))
        else:
            print(f"config {ARGS.config}, threads {ARGS.threads}: OpenBLAS core type "
                  f"{out['coretype']} ({out['coretype_source']})")
            if out["coretype_probe"]:
                print(f"  probe, fp32 GEMM GFLOP/s: {format_probe(out['coretype_probe'])}")
        sys.exit(0)

import ctypes
import math
import resource

try:
    import torch
except ImportError:
    sys.exit(f"{__file__}: needs PyTorch. Install Debian's build (apt-get install python3-torch) and run "
             "this script with /usr/bin/python3.")
import torch.nn as nn
import torch.nn.functional as F

ATTN = "sdpa"
DECODE_MV = True


def lin(layer, x):
    """layer(x); for a single token (decode) as a matrix-vector product: OpenBLAS 0.3.21 sends a
    1-row sgemm through its full GEMM path (packing the whole weight), up to 4x slower than sgemv."""
    if DECODE_MV and x.shape[0] * x.shape[1] == 1 and not torch.is_autocast_cpu_enabled():
        v = x.reshape(-1)
        if layer.bias is None:
            return torch.mv(layer.weight, v).view(1, 1, -1)
        return torch.addmv(layer.bias, layer.weight, v).view(1, 1, -1)
    return layer(x)


class RMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * weight (torch 1.13 has no nn.RMSNorm)."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def make_norm(c, d):
    return RMSNorm(d, eps=1e-5) if c.get("norm") == "rmsnorm" else nn.LayerNorm(d, eps=1e-5)


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.h = heads
        self.qkv = nn.Linear(d, 3 * d, bias=False)  # q, k, v stacked
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x, cache=None):
        B, T, C = x.shape
        h = self.h
        q, k, v = lin(self.qkv, x).split(C, dim=2)
        q = q.view(B, T, h, C // h).transpose(1, 2)
        k = k.view(B, T, h, C // h).transpose(1, 2)
        v = v.view(B, T, h, C // h).transpose(1, 2)
        if cache is not None:
            k, v = cache.append(k, v)
        S = k.shape[2]
        if ATTN == "sdpa" and cache is None:
            y = F._scaled_dot_product_attention(q, k, v, is_causal=True, need_attn_weights=False)[0]
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.shape[-1]))
            if T > 1:  # causal mask; query i (absolute S-T+i) sees keys 0..S-T+i
                mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
                att = att.masked_fill(~mask, float("-inf"))
            att = F.softmax(att, dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(B, T, C)
        return lin(self.o, y)


class Block(nn.Module):
    """pre_norm: x = x + attn(n1(x)); x = x + mlp(n2(x))."""

    def __init__(self, d, heads, c=None):
        super().__init__()
        c = c or {}
        self.ln1 = make_norm(c, d)
        self.attn = Attention(d, heads)
        self.ln2 = make_norm(c, d)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.proj = nn.Linear(4 * d, d, bias=False)
        self.heads = heads

    def new_cache(self, B, ctx):
        d = self.fc.in_features
        return KVCache(B, self.heads, d // self.heads, ctx)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        x = x + lin(self.proj, F.gelu(lin(self.fc, self.ln2(x))))  # exact (erf) GELU
        return x


class SandwichBlock(Block):
    """sandwich (post-norm, DeepLoop): x = n2(α·x + attn(n1(x))); x = n4(α·x + mlp(n3(x))),
    α = (2N)^p, N = the unrolled depth n_prelude + n_core·R + n_coda. Here ln1, ln2 are n1, n3 (the
    pre-norms of Block) and ln_post1, ln_post2 are n2, n4."""

    def __init__(self, d, heads, c, alpha):
        super().__init__(d, heads, c)
        self.ln_post1 = make_norm(c, d)
        self.ln_post2 = make_norm(c, d)
        self.alpha = alpha

    def forward(self, x, cache=None):
        x = self.ln_post1(torch.add(self.attn(self.ln1(x), cache), x, alpha=self.alpha))
        return self.ln_post2(torch.add(lin(self.proj, F.gelu(lin(self.fc, self.ln2(x)))), x,
                                       alpha=self.alpha))


class KVCache:
    def __init__(self, B, heads, hd, ctx):
        self.k = torch.empty(B, heads, ctx, hd)
        self.v = torch.empty(B, heads, ctx, hd)
        self.n = 0

    def append(self, k, v):
        T = k.shape[2]
        self.k[:, :, self.n:self.n + T] = k
        self.v[:, :, self.n:self.n + T] = v
        self.n += T
        return self.k[:, :, :self.n], self.v[:, :, :self.n]


def mv_ok(x):
    """A single token outside autocast: matrix-vector products through torch.mv (see lin)."""
    return DECODE_MV and x.shape[0] * x.shape[1] == 1 and not torch.is_autocast_cpu_enabled()


def matw(x, W, bias=None, t=True):
    """x @ W^T + bias (t=True, as F.linear) or x @ W + bias (t=False), for a weight W that is a slice
    of a stacked parameter; a single token as torch.mv / addmv (as lin)."""
    if mv_ok(x):
        v = x.reshape(-1)
        M = W if t else W.t()
        return (torch.mv(M, v) if bias is None else torch.addmv(bias, M, v)).view(1, 1, -1)
    if t:
        return F.linear(x, W, bias)
    x2 = x.reshape(-1, x.shape[-1])
    y = torch.mm(x2, W) if bias is None else torch.addmm(bias, x2, W)
    return y.view(*x.shape[:-1], W.shape[1])


def causal_softmax(att, S, T):
    """Softmax over the keys of att [.., T, S]; query i (absolute S - T + i) sees keys 0..S - T + i."""
    if T > 1:
        mask = torch.ones(T, S, dtype=torch.bool).tril(diagonal=S - T)
        att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att, dim=-1)


class EnergyCache:
    """NRGPT: the keys (= values) k_j = H_h g_j of one application of the energy block [B, nh, ctx, d]."""

    def __init__(self, B, heads, d, ctx, dtype=None):
        self.k = torch.empty(B, heads, ctx, d, dtype=dtype)
        self.n = 0

    def append(self, k):
        T = k.shape[2]
        self.k[:, :, self.n:self.n + T] = k
        self.n += T
        return self.k[:, :, :self.n]


class EnergyBlock(nn.Module):
    """energy (NRGPT, docs/systems.md; ff2w, P = matrix): one descent step x <- x + (A + s_ff F) P^T with
        g = LayerNorm(x) without gain (bias b: looplm's attn_norm.bias), eps 1e-5
        A = sum_h sum_j softmax_j(g_i . k^h_j) k^h_j,  k^h_j = H_h g_j   (scale 1, causal j <= i)
        u = g W1^T + b1;  F = (GELU(u) W2^T + b2) + (GELU'(u) * (g W2)) W1,  GELU'(u) = Phi(u) + u phi(u)
    H (all heads), W1 and W2^T all multiply g: they are one stacked bias-free Linear `inp`
    [nh*d + 2f, d] = [H_0; ..; H_{nh-1}; W1; W2^T] (looplm's attn.H.weight, mlp.up.weight,
    mlp.down.weight^T: the same parameters, one GEMM instead of three); b1, b2 = mlp.up.bias,
    mlp.down.bias, ff_scale = s_ff, step = P. A goes through F._scaled_dot_product_attention with
    query g (expanded over the heads, pre-multiplied by sqrt(d) against SDPA's 1/sqrt(d): scale 1),
    keys = values = k^h. GELU' is written out from Phi (torch.special.ndtr) and phi; autograd
    differentiates through it (GELU'' included)."""

    def __init__(self, d, heads, c):
        super().__init__()
        assert c.get("energy_ff", "ff2w") == "ff2w" and c.get("energy_P", "matrix") == "matrix"
        assert not c.get("energy_strict", False)
        self.d, self.h, self.f = d, heads, 4 * d
        self.ln_bias = nn.Parameter(torch.zeros(d))
        self.inp = nn.Linear(d, heads * d + 2 * self.f, bias=False)
        self.b1 = nn.Parameter(torch.zeros(self.f))
        self.b2 = nn.Parameter(torch.zeros(d))
        self.ff_scale = nn.Parameter(torch.ones(1))
        self.step = nn.Linear(d, d, bias=False)

    def reset_parameters(self, n_unrolled):
        """After GPT._init's N(0, 0.02): W2 (mlp.down) and P scaled by 1/sqrt(2N), biases 0 (docs/systems.md)."""
        s = 1.0 / math.sqrt(2.0 * n_unrolled)
        with torch.no_grad():
            self.inp.weight[self.h * self.d + self.f:].mul_(s)
            self.step.weight.mul_(s)

    def new_cache(self, B, ctx):
        return EnergyCache(B, self.h, self.d, ctx, self.step.weight.dtype)

    def forward(self, x, cache=None):
        B, T, d = x.shape
        h, f = self.h, self.f
        g = F.layer_norm(x, (d,), None, self.ln_bias, 1e-5)
        kh, u, gW2 = lin(self.inp, g).split([h * d, f, f], dim=-1)
        kh = kh.view(B, T, h, d).transpose(1, 2)  # [B, nh, T, d]
        if cache is None and ATTN == "sdpa":
            q = (g * math.sqrt(d)).unsqueeze(1).expand(B, h, T, d)
            A = F._scaled_dot_product_attention(q, kh, kh, is_causal=True,
                                                need_attn_weights=False)[0].sum(1)
        else:
            if cache is not None:
                kh = cache.append(kh)
            S = kh.shape[2]
            p = causal_softmax(g.unsqueeze(1) @ kh.transpose(-2, -1), S, T)  # [B, nh, T, S]
            A = (p @ kh).sum(1)
        u = u + self.b1
        # GELU'(u) = Phi(u) + u phi(u), Phi = torch.special.ndtr, phi = exp(-u^2/2 - ln(2 pi)/2):
        # autograd keeps u, phi, GELU'(u), GELU(u), GELU'(u) g W2 ([B, T, f] each) per step (9 such
        # tensors with Phi = (1 + erf(u/sqrt 2))/2, phi = exp(-u u/2)/sqrt(2 pi), GELU(u) = u Phi)
        phi = torch.exp(u.square() * -0.5 - 0.5 * math.log(2.0 * math.pi))
        dgelu = torch.addcmul(torch.special.ndtr(u), u, phi)
        W = self.inp.weight
        W1, W2t = W[h * d:h * d + f], W[h * d + f:]  # [f, d] each
        Fv = matw(F.gelu(u), W2t, self.b2, t=False)  # GELU(u) W2^T + b2 (exact erf GELU)
        Fv = Fv + matw(dgelu * gW2, W1, t=False)  # (GELU'(u) * (g W2)) W1
        return x + lin(self.step, torch.addcmul(A, self.ff_scale, Fv))


class Rope(nn.Module):
    """Rotate-half RoPE tables (channel i pairs with i + hd/2, θ_i = base^(−2i/hd)), cos/sin [ctx, hd],
    built in fp64 and stored in the model's dtype (non-persistent buffers, no parameters)."""

    def __init__(self, hd, ctx, base=10000.0):
        super().__init__()
        i = torch.arange(hd // 2, dtype=torch.float64)
        ang = torch.arange(ctx, dtype=torch.float64)[:, None] * (base ** (-2.0 * i / hd))[None, :]
        ang = torch.cat([ang, ang], dim=-1)
        dt = torch.get_default_dtype()
        self.register_buffer("cos", ang.cos().to(dt), persistent=False)
        self.register_buffer("sin", ang.sin().to(dt), persistent=False)

    def forward(self, x, pos0, scale=1.0):
        """x [.., T, hd] at positions pos0.., times scale."""
        T = x.shape[-2]
        cos, sin = self.cos[pos0:pos0 + T], self.sin[pos0:pos0 + T]
        if scale != 1.0:
            cos, sin = cos * scale, sin * scale
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


class CemCache:
    """CEM, one layer's attention context (the same for its T inner steps): RoPE(k) and k = W_K ĉ
    [B, H, ctx, hd] and ĉ [B, ctx, d] (shared by the heads, stored once)."""

    def __init__(self, B, heads, hd, d, ctx, dtype=None):
        self.kr = torch.empty(B, heads, ctx, hd, dtype=dtype)
        self.kv = torch.empty(B, heads, ctx, hd, dtype=dtype)
        self.c = torch.empty(B, ctx, d, dtype=dtype)
        self.n = 0

    def append(self, kr, kv, c):
        T, n = kr.shape[2], self.n
        self.kr[:, :, n:n + T] = kr
        self.kv[:, :, n:n + T] = kv
        self.c[:, n:n + T] = c
        self.n += T
        return self.kr[:, :, :n + T], self.kv[:, :, :n + T], self.c[:, :n + T]


class CemBlock(nn.Module):
    """cem (CEM, docs/systems.md; no preconditioner): an attention and an MLP sub-layer, each T = cem_T steps
    x <- x + update(x̂, ĉ) from x = c, c the sub-layer's input (fixed), x̂ and ĉ both normalised by
    the sub-layer's RMSNorm (gain, eps 1e-5). No biases.
      attention (hd = d/H, RoPE on q and k only, δ = attn.diag shared by the heads, not rotated):
        s^k_ij = (RoPE(q^k_i) . RoPE(k^k_j) + (x̂_i ⊙ δ) . ĉ_j) / sqrt(hd),  q = x̂ W_Q^T, k = ĉ W_K^T
        update = sum_k W_Q,k^T sum_j a^k_ij k^k_j + δ ⊙ sum_k sum_j a^k_ij ĉ_j
      in training as ONE F._scaled_dot_product_attention call per step with per-head query
      [RoPE(q^k) | x̂ ⊙ δ] (times sqrt((hd + d)/hd) against SDPA's 1/sqrt(hd + d)), key
      [RoPE(k^k) | ĉ] and value [k^k | ĉ] (head width hd + d; keys and values built once per
      sub-layer), output split: update = O[:, :, :, :hd] merged @ W_Q + δ ⊙ sum_heads O[..., hd:].
      MLP: update = (SiLU(ĉ W_gate^T) ⊙ (x̂ W_up^T)) @ W_up  (down = up^T; the gate term once).
    W_Q, W_K are one stacked Linear `qk` [2d, d] and W_gate, W_up one `gate_up` [2f, d] (looplm's
    attn.q/k.weight, mlp.gate/up.weight): at the first step x̂ = ĉ, so one GEMM gives q and k (gate
    and up); later steps use the W_Q (W_up) half. Decode (and --attn manual) computes the scores as
    q.k per head plus the shared (x̂ ⊙ δ).ĉ term once, with a per-layer cache of RoPE(k), k and ĉ."""

    def __init__(self, d, heads, c, rope):
        super().__init__()
        assert not c.get("cem_precond", False)
        self.d, self.h, self.hd, self.f = d, heads, d // heads, 4 * d
        self.T, self.rope = c.get("cem_T", 2), rope
        self.attn_norm = RMSNorm(d, eps=1e-5)
        self.qk = nn.Linear(d, 2 * d, bias=False)  # [W_Q; W_K]
        self.diag = nn.Parameter(torch.zeros(d)) if c.get("cem_diag", True) else None
        self.mlp_norm = RMSNorm(d, eps=1e-5)
        self.gate_up = nn.Linear(d, 2 * self.f, bias=False)  # [W_gate; W_up]

    def new_cache(self, B, ctx):
        return CemCache(B, self.h, self.hd, self.d, ctx, self.qk.weight.dtype)

    def heads(self, t):
        B, T, _ = t.shape
        return t.view(B, T, self.h, self.hd).transpose(1, 2)  # [B, H, T, hd]

    def rot(self, t, pos0, scale=1.0):
        return t if self.rope is None else self.rope(t, pos0, scale)

    def attn_sublayer(self, c, cache):
        B, T, d = c.shape
        H, hd, delta = self.h, self.hd, self.diag
        WQ = self.qk.weight[:d]
        pos0 = 0 if cache is None else cache.n
        ch = self.attn_norm(c)
        q, k = lin(self.qk, ch).split(d, dim=-1)
        kv = self.heads(k)
        kr = self.rot(kv, pos0)
        sdpa = cache is None and ATTN == "sdpa"
        if sdpa:
            s = 1.0
            if delta is not None:  # the shared diagonal term as d extra columns of every head
                ce = ch.unsqueeze(1).expand(B, H, T, d)
                kr, kv = torch.cat([kr, ce], dim=-1), torch.cat([kv, ce], dim=-1)
                s = math.sqrt((hd + d) / hd)
        elif cache is not None:
            kr, kv, C = cache.append(kr, kv, ch)
        else:
            C = ch
        S = kr.shape[2]
        x, xh = c, ch
        for t in range(self.T):
            if t > 0:
                xh = self.attn_norm(x)
                q = matw(xh, WQ)
            if sdpa:
                Q = self.rot(self.heads(q), pos0, s)
                if delta is not None:
                    Q = torch.cat([Q, (xh * (delta * s)).unsqueeze(1).expand(B, H, T, d)], dim=-1)
                O = F._scaled_dot_product_attention(Q, kr, kv, is_causal=True,
                                                    need_attn_weights=False)[0]
                o, od = O.split([hd, d], dim=-1) if delta is not None else (O, None)
                dsum = None if delta is None else od.sum(1)
            else:
                att = self.rot(self.heads(q), pos0) @ kr.transpose(-2, -1)  # [B, H, T, S]
                if delta is not None:
                    att = att + ((xh * delta) @ C.transpose(-2, -1)).unsqueeze(1)
                a = causal_softmax(att * (1.0 / math.sqrt(hd)), S, T)
                o = a @ kv
                dsum = None if delta is None else a.sum(1) @ C
            u = matw(o.transpose(1, 2).reshape(B, T, d), WQ, t=False)  # sum_k o^k W_Q,k
            if delta is not None:
                u = torch.addcmul(u, delta, dsum)
            x = x + u
        return x

    def mlp_sublayer(self, c):
        f = self.f
        Wup = self.gate_up.weight[f:]
        ch = self.mlp_norm(c)
        gt, up = lin(self.gate_up, ch).split(f, dim=-1)
        gate = F.silu(gt)
        x = c
        for t in range(self.T):
            if t > 0:
                up = matw(self.mlp_norm(x), Wup)
            x = x + matw(gate * up, Wup, t=False)
        return x

    def forward(self, x, cache=None):
        return self.mlp_sublayer(self.attn_sublayer(x, cache))


# Loop rules (docs/systems.md, One family): state = init_state(h_pre); for l in 0..R-1:
# state = step(state, h_pre, l, core); h = readout(state). `core(x)` runs the core blocks once (with
# the next KV caches).

class ResidualRule(nn.Module):
    """h(r) = core(h(r-1)), no parameters (tiny, dense, looped, deeploop)."""

    def __init__(self, c=None):
        super().__init__()

    def init_state(self, h_pre):
        return h_pre

    def step(self, h, h_pre, l, core):
        return core(h)

    def readout(self, h):
        return h


class GatedRule(nn.Module):
    """RecurrentGPT (docs/systems.md): h~ = W_proj [h + ε_x, h_pre]; o = core(h~);
    g = σ(f_g([LN_a(h), LN_b(h_pre)]) / τ + ε_g), f_g = Linear(2d→d) → SiLU → Linear(d→d);
    h ← g ⊙ h + (1 − g) ⊙ o. The noise ε_x ~ N(0, σ_x²), ε_g ~ N(0, σ_g²) is drawn per element and
    step in training mode only (model.train()); generation runs in eval mode, without it."""

    def __init__(self, c):
        super().__init__()
        d = c["d"]
        self.sigma_x, self.sigma_g, self.tau = c["gate_sigma_x"], c["gate_sigma_g"], c["gate_tau"]
        self.bias_init = c["gate_bias_init"]
        self.proj = nn.Linear(2 * d, d, bias=c.get("bias", False))  # W_proj
        self.norm_a = make_norm(c, d)  # on h(r-1)
        self.norm_b = make_norm(c, d)  # on h_pre
        self.fc1 = nn.Linear(2 * d, d)
        self.fc2 = nn.Linear(d, d)

    def reset_parameters(self):
        for m in (self.proj, self.fc1, self.fc2):
            nn.init.normal_(m.weight, 0.0, 0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        nn.init.constant_(self.fc2.bias, self.bias_init)  # g ≈ σ(4) ≈ 0.98 at init: copy first

    def init_state(self, h_pre):
        return h_pre

    def step(self, h, h_pre, l, core):
        hx = h
        if self.training and self.sigma_x > 0:
            hx = h + self.sigma_x * torch.randn_like(h)
        # (.to(h.dtype): under bf16 autocast the Linear outputs are bf16; the state stays fp32 as in
        # the other models, where the residual adds promote it. No-ops in fp32.)
        o = core(lin(self.proj, torch.cat([hx, h_pre], dim=-1)).to(h.dtype))
        f = lin(self.fc2, F.silu(lin(self.fc1, torch.cat([self.norm_a(h), self.norm_b(h_pre)],
                                                          dim=-1))))
        if self.tau != 1.0:
            f = f / self.tau
        if self.training and self.sigma_g > 0:
            f = f + self.sigma_g * torch.randn_like(f)
        return torch.lerp(o.to(h.dtype), h, torch.sigmoid(f).to(h.dtype))  # g h + (1 − g) o

    def readout(self, h):
        return h


def sinkhorn(L, iters):
    """Sinkhorn–Knopp on exp(L − max L) over the last two dims: `iters` rounds of {rows to sum 1,
    then columns}; autograd runs back through the unrolled rounds. The max shift does not change
    the result, so it is taken without gradient."""
    M = torch.exp(L - L.detach().amax(dim=(-2, -1), keepdim=True))
    for _ in range(iters):
        M = M / M.sum(dim=-1, keepdim=True)
        M = M / M.sum(dim=-2, keepdim=True)
    return M


class HyperRule(nn.Module):
    """Hyperloop (docs/systems.md; mHC with hyper_res = sinkhorn). State Y [B, T, n, d], n streams, each
    starting as h_pre. Loop l has its own maps: z = flatten(Y) / rms(flatten(Y)) (over n·d, eps
    1e-20); H_pre = σ(α_pre φ_pre(z) + b_pre) [n]; x = core(Σ_s H_pre[s] Y_s) + loop_emb[l];
    H_post = 2σ(α_post φ_post(z) + b_post) [n]; diag: H_res = σ(α_res φ_res(z) + b_res) [n],
    Y_s ← H_res[s] Y_s + H_post[s] x; sinkhorn: H_res = Sinkhorn(α_res φ_res(z) + b_res) [n, n] (in
    fp32), Y_s ← Σ_t H_res[s, t] Y_t + H_post[s] x. Readout: mean_s Y_s. The three φ of a loop (no
    bias) are one stacked Linear [n + n_res + n, n·d] ([pre | res | post], as looplm stores them
    back to back: one GEMM instead of three, the same parameters); α (3 per loop) and b are
    learned."""

    def __init__(self, c):
        super().__init__()
        n, d, R = c["streams"], c["d"], c["loops"]
        self.n, self.R = n, R
        self.full = c["hyper_res"] == "sinkhorn"
        self.iters = c.get("sinkhorn_iters", 20)
        self.nres = n * n if self.full else n
        self.phi = nn.ModuleList(nn.Linear(n * d, 2 * n + self.nres, bias=False) for _ in range(R))
        self.alpha = nn.Parameter(torch.full((R, 3), 0.01))  # α_pre, α_res, α_post per loop
        self.b_pre = nn.Parameter(torch.full((R, n), 1.0 / n))
        self.b_res = nn.Parameter(torch.eye(n).repeat(R, 1, 1) if self.full else torch.ones(R, n))
        self.b_post = nn.Parameter(torch.zeros(R, n))
        self.emb = nn.Parameter(torch.empty(R, d))  # loop position embedding

    def reset_parameters(self):
        for m in self.phi:
            m.reset_parameters()  # PyTorch's Linear default: U(±1/sqrt(n·d)), as docs/systems.md says
        nn.init.normal_(self.emb, 0.0, 0.02)

    def init_state(self, h_pre):
        return h_pre.unsqueeze(-2).expand(*h_pre.shape[:-1], self.n, h_pre.shape[-1])

    def step(self, Y, h_pre, l, core):
        l = min(l, self.R - 1)  # more loops than R reuse the last loop's maps
        n, nres = self.n, self.nres
        B, T = Y.shape[0], Y.shape[1]
        Yf = Y.reshape(B, T, -1)
        # mean(Y^2) over n·d as |Y|^2 / (n·d): one reduction, no [B, T, n·d] temporary (a few % of
        # the rule's time against Yf.pow(2).mean(-1) in eager mode)
        ms = torch.linalg.vector_norm(Yf, dim=-1, keepdim=True).square() / Yf.shape[-1]
        z = Yf * torch.rsqrt(ms + 1e-20)
        p = lin(self.phi[l], z)  # [B, T, n + n_res + n]
        a = self.alpha[l]
        H_pre = torch.sigmoid(p[..., :n] * a[0] + self.b_pre[l])
        # Σ_s H_pre[s] Y_s as a batched [1, n] @ [n, d] product (faster here than (H·Y).sum(-2))
        x = core(torch.matmul(H_pre.unsqueeze(-2), Y).squeeze(-2)) + self.emb[l]
        H_post = 2.0 * torch.sigmoid(p[..., n + nres:] * a[2] + self.b_post[l])
        r = p[..., n:n + nres]
        if self.full:  # Sinkhorn in fp32 (also under bf16 autocast)
            L = (r.float() * a[1]).view(B, T, n, n) + self.b_res[l]
            mixed = torch.matmul(sinkhorn(L, self.iters).to(Y.dtype), Y)
        else:
            mixed = torch.sigmoid(r * a[1] + self.b_res[l]).unsqueeze(-1) * Y
        return torch.addcmul(mixed, H_post.unsqueeze(-1), x.unsqueeze(-2))

    def readout(self, Y):
        return Y.mean(-2)


LOOP_RULES = {"residual": ResidualRule, "gated": GatedRule, "hyper": HyperRule}


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        c = dict(MODEL_DEFAULTS, **c)
        self.c = c
        d = c["d"]
        self.wte = nn.Embedding(c["vocab"], d)
        self.wpe = nn.Embedding(c["ctx"], d) if c["pos"] == "learned" else None
        self.rope = Rope(d // c["heads"], c["ctx"]) if c["pos"] == "rope" else None
        n_unrolled = c["n_prelude"] + c["n_core"] * c["loops"] + c["n_coda"]
        if c["block"] == "energy":
            blk = lambda: EnergyBlock(d, c["heads"], c)
        elif c["block"] == "cem":
            blk = lambda: CemBlock(d, c["heads"], c, self.rope)
        elif c["block"] == "sandwich":
            alpha = (2.0 * n_unrolled) ** c["deeploop_p"] if c["deeploop_p"] > 0 else 1.0
            blk = lambda: SandwichBlock(d, c["heads"], c, alpha)
        else:
            blk = lambda: Block(d, c["heads"], c)
        self.prelude = nn.ModuleList(blk() for _ in range(c["n_prelude"]))
        self.core = nn.ModuleList(blk() for _ in range(c["n_core"]))
        self.coda = nn.ModuleList(blk() for _ in range(c["n_coda"]))
        self.rule = LOOP_RULES[c["rule"]](c)
        self.ln_f = make_norm(c, d)
        self.apply(self._init)
        for b in self.schedule_unique():
            if hasattr(b, "reset_parameters"):
                b.reset_parameters(n_unrolled)  # the energy block's output scaling and biases
        if hasattr(self.rule, "reset_parameters"):
            self.rule.reset_parameters()  # the rule's own init (docs/systems.md)
        if c["block"] == "sandwich" and c["deeploop_p"] > 0:
            # DeepLoop: β = (8N)^(-p) scales attn.v, attn.o and the MLP matrices at init.
            beta = (8.0 * n_unrolled) ** -c["deeploop_p"]
            with torch.no_grad():
                for b in self.schedule_unique():
                    b.attn.qkv.weight[2 * d:].mul_(beta)
                    for w in (b.attn.o.weight, b.fc.weight, b.proj.weight):
                        w.mul_(beta)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def schedule_unique(self):
        return list(self.prelude) + list(self.core) + list(self.coda)

    def schedule(self):
        """The blocks in application order (core blocks repeated `loops` times)."""
        return list(self.prelude) + list(self.core) * self.c["loops"] + list(self.coda)

    def new_caches(self, B):
        """One KV cache per block application, in schedule() order: each loop step of a core
        block has its own (its inputs differ)."""
        return [b.new_cache(B, self.c["ctx"]) for b in self.schedule()]

    def forward(self, idx, caches=None, pos0=0):
        T = idx.shape[1]
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(pos0, pos0 + T))
        cache_it = iter(caches) if caches is not None else None
        nxt = (lambda: None) if caches is None else (lambda: next(cache_it))

        def core(h):
            for blk in self.core:
                h = blk(h, nxt())
            return h

        for blk in self.prelude:
            x = blk(x, nxt())
        state = self.rule.init_state(x)
        for l in range(self.c["loops"]):
            state = self.rule.step(state, x, l, core)
        x = self.rule.readout(state)
        for blk in self.coda:
            x = blk(x, nxt())
        x = self.ln_f(x)
        return x @ self.wte.weight.t()  # tied lm_head


def peer_config(cfg, batch=8):
    """This file's config dict for a looplm config (a configs/*.json, or a checkpoint's "config"
    metadata); energy and cem blocks with the residual rule only (what looplm_state_dict maps)."""
    assert cfg.get("loop_rule", "residual") == "residual" and cfg.get("tie_embeddings", True)
    assert cfg.get("block") in ("energy", "cem") and cfg.get("d_ff", 0) in (0, 4 * cfg["d_model"])
    assert cfg.get("norm_eps", 1e-5) == 1e-5 and cfg.get("rope_base", 10000.0) == 10000.0
    c = dict(n_prelude=cfg.get("n_prelude", 0), n_core=cfg["n_core"], n_coda=cfg.get("n_coda", 0),
             loops=cfg.get("R", 1), d=cfg["d_model"], heads=cfg["n_heads"], ctx=cfg["context"],
             batch=batch, vocab=cfg["vocab_size"], block=cfg["block"],
             norm=cfg.get("norm", "rmsnorm"), pos=cfg.get("pos", "rope"))
    for k, v in dict(energy_ff="ff2w", energy_P="matrix", energy_strict=False, cem_T=2,
                     cem_diag=True, cem_precond=False).items():
        if k.split("_")[0] == c["block"]:
            c[k] = cfg.get(k, v)
    return c


def looplm_state_dict(model, tensors):
    """looplm checkpoint tensors (docs/format.md names) -> this model's state_dict (energy / cem blocks):
    tok_emb, pos_emb, norm_f -> wte, wpe, ln_f; energy: inp = [attn.H; mlp.up; mlp.down^T], b1, b2 =
    mlp.up.bias, mlp.down.bias, ln_bias = attn_norm.bias, ff_scale, step; cem: qk = [attn.q; attn.k],
    gate_up = [mlp.gate; mlp.up], diag = attn.diag, attn_norm, mlp_norm."""
    t = tensors
    out = {"wte.weight": t["tok_emb.weight"]}
    if model.wpe is not None:
        out["wpe.weight"] = t["pos_emb.weight"]
    for k in ("weight", "bias"):
        if f"norm_f.{k}" in t:
            out[f"ln_f.{k}"] = t[f"norm_f.{k}"]
    for sec in ("prelude", "core", "coda"):
        for i, b in enumerate(getattr(model, sec)):
            p = q = f"{sec}.{i}."  # looplm's and the peer's block prefixes are the same
            if isinstance(b, EnergyBlock):
                out[q + "ln_bias"] = t[p + "attn_norm.bias"]
                out[q + "inp.weight"] = torch.cat([t[p + "attn.H.weight"], t[p + "mlp.up.weight"],
                                                   t[p + "mlp.down.weight"].t()])
                out[q + "b1"], out[q + "b2"] = t[p + "mlp.up.bias"], t[p + "mlp.down.bias"]
                out[q + "ff_scale"], out[q + "step.weight"] = t[p + "ff_scale"], t[p + "step.weight"]
            elif isinstance(b, CemBlock):
                out[q + "attn_norm.weight"] = t[p + "attn_norm.weight"]
                out[q + "mlp_norm.weight"] = t[p + "mlp_norm.weight"]
                out[q + "qk.weight"] = torch.cat([t[p + "attn.q.weight"], t[p + "attn.k.weight"]])
                out[q + "gate_up.weight"] = torch.cat([t[p + "mlp.gate.weight"], t[p + "mlp.up.weight"]])
                if b.diag is not None:
                    out[q + "diag"] = t[p + "attn.diag"]
            else:
                # By design: only the energy / cem peers are loaded from looplm checkpoints (their logit
                # check); the other peers are matched by parameter count (compare.py).
                raise ValueError(f"looplm_state_dict maps energy and cem blocks only, not {type(b).__name__}")
    return out


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_train(model, c, steps, warmup, bf16, foreach):
    B, T, V = c["batch"], c["ctx"], c["vocab"]
    model.train()  # training-only terms on (the gated rule's noise)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, foreach=foreach)
    g = torch.Generator().manual_seed(0)
    times = []
    for step in range(warmup + steps):
        x = torch.randint(0, V, (B, T), generator=g)
        y = torch.randint(0, V, (B, T), generator=g)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, V), y.view(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        dt = time.perf_counter() - t0
        if step >= warmup:
            times.append(dt)
    return B * T / statistics.median(times), times


@torch.inference_mode()
def generate(model, c, prompt, n_new, bf16):
    ctx = c["ctx"]
    caches = model.new_caches(1)
    seq = prompt.tolist()[0]
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        logits = model(prompt, caches, 0)
        for _ in range(n_new):
            nxt = int(logits[0, -1].argmax())
            seq.append(nxt)
            if caches[0].n >= ctx:  # context full: keep the last half, re-encode it from position 0
                keep = seq[-(ctx // 2):]
                caches = model.new_caches(1)
                logits = model(torch.tensor([keep]), caches, 0)
            else:
                logits = model(torch.tensor([[nxt]]), caches, caches[0].n)
    return seq


def bench_generate(model, c, n_prompt, n_new, repeats, bf16, omp_threads):
    train_threads = torch.get_num_threads()
    torch.set_num_threads(omp_threads)
    model.eval()  # no training noise in generation
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, c["vocab"], (1, n_prompt), generator=g)
    generate(model, c, prompt, min(n_new, 32), bf16)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        generate(model, c, prompt, n_new, bf16)
        rates.append(n_new / (time.perf_counter() - t0))
    torch.set_num_threads(train_threads)
    model.train()
    return statistics.median(rates), rates


def check_generate(model, c):
    """The cached decode gives the same logits as a full forward pass."""
    g = torch.Generator().manual_seed(2)
    n = min(40, c["ctx"])
    idx = torch.randint(0, c["vocab"], (1, n), generator=g)
    model.eval()
    with torch.inference_mode():
        full = model(idx)
        caches = model.new_caches(1)
        outs = [model(idx[:, :16], caches, 0)]
        for t in range(16, n):
            outs.append(model(idx[:, t:t + 1], caches, t))
        inc = torch.cat(outs, dim=1)
    model.train()
    err = (full - inc).abs().max().item()
    assert err < 1e-4, f"KV-cache decode differs from full forward: {err}"
    return err


def openblas_set_threads(n):
    """Size OpenBLAS's own (pthread) pool; returns the core name OpenBLAS chose, or None."""
    for line in open("/proc/self/maps"):
        path = line.split()[-1]
        if "libopenblas" in os.path.basename(path):
            try:
                lib = ctypes.CDLL(path)
                lib.openblas_get_corename.restype = ctypes.c_char_p
                if n > 0:
                    lib.openblas_set_num_threads(n)
                return lib.openblas_get_corename().decode()
            except (OSError, AttributeError):
                pass
    return None


def measure_gemm(c, samples=7, min_sample_s=0.02):
    """fp32 torch.mm (OpenBLAS sgemm, as nn.Linear: x @ W^T) on the config's training GEMM shapes,
    with this process's thread set-up. Per shape: 2 warm-up calls, then `samples` timed samples (each
    enough back-to-back calls to last >= min_sample_s). Returns the aggregate rate over the three
    shapes from each shape's best sample (the probe's ranking: noise only ever slows a sample), the
    looplm-comparable peak (measure_gemm_peak: the best shape's median) and the per-shape rates."""
    best_s, flops, per_shape, peak = [], [], [], 0.0
    for m, n, k in gemm_shapes(c):
        A = torch.full((m, k), 0.5)
        Wt = torch.full((n, k), 0.25).t()
        out = torch.empty(m, n)
        for _ in range(2):
            torch.mm(A, Wt, out=out)
        t0 = time.perf_counter()
        torch.mm(A, Wt, out=out)
        reps = max(1, int(min_sample_s / max(time.perf_counter() - t0, 1e-6)))
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            for _ in range(reps):
                torch.mm(A, Wt, out=out)
            times.append((time.perf_counter() - t0) / reps)
        f = 2.0 * m * n * k
        best_s.append(min(times))
        flops.append(f)
        per_shape.append({"shape": [m, n, k], "best_gflops": round(f / min(times) / 1e9, 1),
                          "median_gflops": round(f / statistics.median(times) / 1e9, 1)})
        peak = max(peak, f / statistics.median(times) / 1e9)
    return sum(flops) / sum(best_s) / 1e9, peak, per_shape


def main():
    global ATTN, DECODE_MV
    a = ARGS
    ATTN = a.attn
    DECODE_MV = not a.no_decode_mv

    torch.set_num_threads(a.threads if a.omp_threads is None else a.omp_threads)
    blas_threads = a.threads if a.blas_threads is None else a.blas_threads
    corename = openblas_set_threads(0 if a.out_of_the_box else blas_threads)
    c = CONFIGS[a.config]
    if a.gemm_only:
        agg, peak, per_shape = measure_gemm(c)
        out = {"config": a.config, "threads": a.threads, "openblas_core": corename,
               "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
               "gemm_gflops": round(agg, 1), "gemm_peak_gflops": round(peak, 1),
               "gemm_shapes": per_shape}
        if a.json:
            print(json.dumps(out))
        else:
            print(f"config {a.config}, threads {a.threads}, OpenBLAS core {corename}: fp32 GEMM "
                  f"{agg:.1f} GFLOP/s (best samples, all shapes), peak {peak:.1f} "
                  f"(best shape, median); {per_shape}")
        return
    if corename is None and not a.out_of_the_box:
        print(f"{os.path.basename(__file__)}: warning: OpenBLAS is not loaded (torch uses "
              "another libblas.so.3, e.g. Debian's reference BLAS at a few GFLOP/s); install "
              "libopenblas0-pthread for a meaningful benchmark", file=sys.stderr)
    torch.manual_seed(0)
    model = GPT(c)
    n_params = sum(p.numel() for p in model.parameters())
    steps = a.steps if a.steps is not None else DEFAULT_STEPS.get(a.config, 6)

    res = {"config": a.config, "threads": a.threads, "train_tokens_per_s": None,
           "generate_tokens_per_s": None, "peak_rss_mib": None, "gemm_peak_gflops": None}
    extra = {"params": n_params, "bf16": a.bf16, "openblas_core": corename,
             "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"), **CORETYPE_INFO,
             "attn": a.attn, "foreach": not a.no_foreach, "torch": torch.__version__,
             "omp_threads": torch.get_num_threads(), "blas_threads": blas_threads,
             "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY")}
    if a.check:
        extra["kv_check_max_abs_err"] = check_generate(model, c)
    if not a.no_train:
        tps, times = bench_train(model, c, steps, a.warmup, a.bf16, not a.no_foreach)
        res["train_tokens_per_s"] = round(tps, 1)
        extra["train_step_s"] = [round(t, 4) for t in times]
        res["peak_rss_mib"] = round(rss_mib(), 1)  # training peak (generation adds nothing)
    if a.gen_tokens > 0:
        gen_omp = a.threads if a.out_of_the_box else a.gen_omp_threads
        gtps, rates = bench_generate(model, c, a.gen_prompt, a.gen_tokens, a.gen_repeats, a.bf16,
                                     gen_omp)
        res["generate_tokens_per_s"] = round(gtps, 1)
        extra["generate_runs"] = [round(r, 1) for r in rates]
    res["peak_rss_mib"] = round(rss_mib(), 1)
    # Last, as looplm bench does: the fp32 GEMM rate on the same shapes, in this process.
    agg, peak, per_shape = measure_gemm(c)
    res["gemm_peak_gflops"] = round(peak, 1)
    extra["gemm_gflops"] = round(agg, 1)
    extra["gemm_shapes"] = per_shape
    if a.json:
        res.update(extra)
        print(json.dumps(res))
    else:
        print(f"config {a.config}: {n_params / 1e6:.2f} M params, threads {a.threads}, "
              f"{'bf16 autocast' if a.bf16 else 'fp32'}, OpenBLAS core {corename}")
        ci = CORETYPE_INFO
        print(f"  OpenBLAS core type: {ci['coretype']} ({ci['coretype_source']}"
              + (f"; OPENBLAS_CORETYPE={extra['OPENBLAS_CORETYPE']})"
                 if extra["OPENBLAS_CORETYPE"] else "; OPENBLAS_CORETYPE unset)"))
        if ci["coretype_probe"]:
            print(f"  probe, fp32 GEMM GFLOP/s: {format_probe(ci['coretype_probe'])}")
        print(f"  fp32 GEMM: {res['gemm_peak_gflops']:>10.1f} GFLOP/s (best shape, median; "
              f"{agg:.1f} over all three shapes, best samples)")
        if res["train_tokens_per_s"] is not None:
            print(f"  train:    {res['train_tokens_per_s']:>10.1f} tokens/s (median of {steps} steps; "
                  f"step times {extra['train_step_s']})")
        if res["generate_tokens_per_s"] is not None:
            print(f"  generate: {res['generate_tokens_per_s']:>10.1f} tokens/s "
                  f"(runs {extra['generate_runs']})")
        print(f"  peak RSS: {res['peak_rss_mib']:>10.1f} MiB")
        if "kv_check_max_abs_err" in extra:
            print(f"  KV-cache check: max |err| {extra['kv_check_max_abs_err']:.2e}")


if __name__ == "__main__":
    main()
