#!/usr/bin/python3
"""PyTorch peer for looplm's benchmark: the same models as looplm's bench presets, in eager PyTorch.

Run with Debian's PyTorch (torch 1.13.1, CPU):

    /usr/bin/python3 bench/torch_peer.py --config dense --threads 2 [--steps S] [--json] [--bf16]

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

Set-up ("best set-up" of /work/shared/PERF.md), all applied inside this process only:
  * fp32 Linear layers go through the BLAS torch was built against: Debian's OpenBLAS
    (openblas-pthread 0.3.21, which has its own thread pool); everything else, and bf16 GEMMs
    (oneDNN), runs on torch's OpenMP pool (libgomp).
  * OPENBLAS_CORETYPE: this environment may preset OPENBLAS_CORETYPE=Haswell (deliberately, for other
    software), which makes OpenBLAS use its AVX2 kernels; on PERF.md's Zen 5 machine that halves its
    GEMM rate. This script removes the variable from ITS OWN environment (os.environ, before torch
    and with it OpenBLAS is loaded: OpenBLAS reads it at load time), so OpenBLAS detects the CPU
    (Cooperlake kernels, AVX-512). The parent environment is not changed. --keep-coretype keeps it.
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

Measurements (2026-11-29, this VM: 2 vCPU AMD EPYC family 25 model 17 = Zen 4, NOT the Zen 5 of
PERF.md; other jobs share the 2 cores, so runs were interleaved and repeated and those hit by
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
(PERF.md's Zen 5 figures in brackets; bench/README.md has the full table):
  tiny   train 11,985-13,261 / 15,982-17,813 (19,150 / 25,996); decode 1,831-1,918 / 1,814-1,982
  dense  train  1,219-1,242  /  2,104-2,194  (2,424 / 4,595);   decode 206-256 / 367-432 (449 / 587)
  looped train    716-758    /  1,261-1,330  (1,468 / 2,648);   decode 141-194 / 215-322
  peak RSS: tiny ~315 MiB, dense 1.19-1.33 GiB, looped 1.62-1.72 GiB
"""

import os
import sys

# Must happen before torch (and with it OpenBLAS, which reads the variable when it is loaded) is
# imported. Only this process's environment is changed.
_OUT_OF_THE_BOX = "--out-of-the-box" in sys.argv
if not _OUT_OF_THE_BOX and "--keep-coretype" not in sys.argv:
    os.environ.pop("OPENBLAS_CORETYPE", None)
if not _OUT_OF_THE_BOX:
    # libgomp reads this when it is loaded (with torch). Idle OpenMP workers then sleep instead of
    # spinning, so they do not fight OpenBLAS's own threads for the same cores.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import argparse
import ctypes
import json
import math
import resource
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

CONFIGS = {
    "tiny": dict(n_prelude=0, n_core=4, n_coda=0, loops=1, d=128, heads=4, ctx=64, batch=12, vocab=65),
    "dense": dict(n_prelude=0, n_core=6, n_coda=0, loops=1, d=384, heads=6, ctx=256, batch=8, vocab=65),
    "looped": dict(n_prelude=1, n_core=2, n_coda=1, loops=4, d=384, heads=6, ctx=256, batch=8, vocab=65),
}

ATTN = "sdpa"
DECODE_MV = True


def lin(layer, x):
    """layer(x); for a single token (decode) as a matrix-vector product: OpenBLAS 0.3.21 sends a
    1-row sgemm through its full GEMM path (packing the whole weight), up to 4x slower than sgemv."""
    if DECODE_MV and x.shape[0] * x.shape[1] == 1 and not torch.is_autocast_cpu_enabled():
        return torch.mv(layer.weight, x.reshape(-1)).view(1, 1, -1)
    return layer(x)


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
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = Attention(d, heads)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, 4 * d, bias=False)
        self.proj = nn.Linear(4 * d, d, bias=False)

    def forward(self, x, cache=None):
        x = x + self.attn(self.ln1(x), cache)
        x = x + lin(self.proj, F.gelu(lin(self.fc, self.ln2(x))))  # exact (erf) GELU
        return x


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


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        d = c["d"]
        self.wte = nn.Embedding(c["vocab"], d)
        self.wpe = nn.Embedding(c["ctx"], d)
        self.prelude = nn.ModuleList(Block(d, c["heads"]) for _ in range(c["n_prelude"]))
        self.core = nn.ModuleList(Block(d, c["heads"]) for _ in range(c["n_core"]))
        self.coda = nn.ModuleList(Block(d, c["heads"]) for _ in range(c["n_coda"]))
        self.ln_f = nn.LayerNorm(d, eps=1e-5)
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, 0.02)

    def schedule(self):
        """The blocks in application order (core blocks repeated `loops` times)."""
        return list(self.prelude) + list(self.core) * self.c["loops"] + list(self.coda)

    def new_caches(self, B):
        c = self.c
        return [KVCache(B, c["heads"], c["d"] // c["heads"], c["ctx"]) for _ in self.schedule()]

    def forward(self, idx, caches=None, pos0=0):
        T = idx.shape[1]
        pos = torch.arange(pos0, pos0 + T)
        x = self.wte(idx) + self.wpe(pos)
        for i, blk in enumerate(self.schedule()):
            x = blk(x, None if caches is None else caches[i])
        x = self.ln_f(x)
        return x @ self.wte.weight.t()  # tied lm_head


def rss_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def bench_train(model, c, steps, warmup, bf16, foreach):
    B, T, V = c["batch"], c["ctx"], c["vocab"]
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
    g = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, c["vocab"], (1, n_prompt), generator=g)
    generate(model, c, prompt, min(n_new, 32), bf16)  # warm-up
    rates = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        generate(model, c, prompt, n_new, bf16)
        rates.append(n_new / (time.perf_counter() - t0))
    torch.set_num_threads(train_threads)
    return statistics.median(rates), rates


def check_generate(model, c):
    """The cached decode gives the same logits as a full forward pass."""
    g = torch.Generator().manual_seed(2)
    n = min(40, c["ctx"])
    idx = torch.randint(0, c["vocab"], (1, n), generator=g)
    with torch.inference_mode():
        full = model(idx)
        caches = model.new_caches(1)
        outs = [model(idx[:, :16], caches, 0)]
        for t in range(16, n):
            outs.append(model(idx[:, t:t + 1], caches, t))
        inc = torch.cat(outs, dim=1)
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


def main():
    global ATTN, DECODE_MV
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
    ap.add_argument("--keep-coretype", action="store_true",
                    help="keep OPENBLAS_CORETYPE from the environment")
    ap.add_argument("--out-of-the-box", action="store_true",
                    help="no set-up: keep OPENBLAS_CORETYPE, default OpenMP wait policy and OpenBLAS "
                         "pool; only torch.set_num_threads(N)")
    ap.add_argument("--check", action="store_true", help="check KV-cache decode against full forward")
    a = ap.parse_args()
    ATTN = a.attn
    DECODE_MV = not a.no_decode_mv

    torch.set_num_threads(a.threads if a.omp_threads is None else a.omp_threads)
    blas_threads = a.threads if a.blas_threads is None else a.blas_threads
    corename = openblas_set_threads(0 if a.out_of_the_box else blas_threads)
    torch.manual_seed(0)
    c = CONFIGS[a.config]
    model = GPT(c)
    n_params = sum(p.numel() for p in model.parameters())
    steps = a.steps if a.steps is not None else {"tiny": 20, "dense": 8, "looped": 6}[a.config]

    res = {"config": a.config, "threads": a.threads, "train_tokens_per_s": None,
           "generate_tokens_per_s": None, "peak_rss_mib": None}
    extra = {"params": n_params, "bf16": a.bf16, "openblas_core": corename,
             "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"), "attn": a.attn,
             "foreach": not a.no_foreach, "torch": torch.__version__,
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
    if a.json:
        res.update(extra)
        print(json.dumps(res))
    else:
        print(f"config {a.config}: {n_params / 1e6:.2f} M params, threads {a.threads}, "
              f"{'bf16 autocast' if a.bf16 else 'fp32'}, OpenBLAS core {corename}")
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
