#!/usr/bin/env python3
"""Batched decoding against batch 1 at every weight format (target: batch 8 at least 3x batch 1).

    python3 bench/batched.py [--looplm build/looplm] [--threads 1,2] [--repeats 3] [--n-new 64]
                             [--preset bench-dense] [--d-model 1024 --heads 16 --layers 8]
                             [--formats fp32,bf16,q8_0,q4_0,q4_k] [--kv-cache int8]

The model: `looplm train --steps 0` of --preset (default bench-dense: GPT-style, GELU, LayerNorm)
with the byte vocabulary at --d-model / --heads / --layers (default 8 x d1024, ~100M parameters,
405 MB in fp32: larger than the L3, as models people deploy are), random weights (decode speed does
not depend on their values); `looplm quantize --method rtn` makes q8_0 / q4_0 / q4_k, and bf16 is
`--weights bf16` over the fp32 file. The prompts: the first 8 lines of data/kjv/val.txt cut to 14
characters (`bash scripts/prepare_kjv.sh` makes it), and the first of them alone for batch 1.
`looplm generate --prompts P --batch 8|1 -n N --temperature 0 -t T --kv-cache C`; the figure is the
"generation: ... (X tokens/s)" line on stderr (new tokens of all sequences over the decode time).
For every repeat, thread count and format, batch 1 and batch 8 run back to back (order
alternating); the table gives medians and the ratio batch 8 / batch 1.
"""

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def sh(cmd, timeout=900):  # from the repository root: the presets name data/kjv
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=ROOT)


def must(r, what):
    if r.returncode != 0:
        sys.exit(f"batched.py: {what} failed: {r.stderr.strip()[-400:]}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build", "looplm"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--n-new", type=int, default=64)
    ap.add_argument("--preset", default="bench-dense")
    ap.add_argument("--d-model", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--formats", default="fp32,bf16,q8_0,q4_0,q4_k")
    ap.add_argument("--kv-cache", default="int8")
    ap.add_argument("--val", default=os.path.join(ROOT, "data", "kjv", "val.txt"))
    a = ap.parse_args()
    if not os.path.exists(a.looplm):
        sys.exit(f"batched.py: {a.looplm} not found (build first)")
    if not os.path.exists(a.val):
        sys.exit(f"batched.py: {a.val} not found (bash scripts/prepare_kjv.sh)")
    threads = [int(t) for t in a.threads.split(",")]
    formats = a.formats.split(",")

    tmp = tempfile.mkdtemp(prefix="looplm_batched_")
    try:
        measure(a, threads, formats, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def measure(a, threads, formats, tmp):
    run = os.path.join(tmp, "model")
    must(sh([a.looplm, "train", "--preset", a.preset, "--steps", "0", "--out", run, "--quiet", "--sample-len", "0",
             "--set", "tokenizer=byte", "--set", "vocab_size=256", "--set", f"d_model={a.d_model}",
             "--set", f"n_heads={a.heads}", "--set", f"n_core={a.layers}"], timeout=1800), "train --steps 0")
    ck = {"fp32": (run, []), "bf16": (run, ["--weights", "bf16"])}
    for f in formats:
        if f.startswith("q"):
            out = os.path.join(tmp, f"model.{f}.safetensors")
            must(sh([a.looplm, "quantize", "--checkpoint", run, "--format", f, "--method", "rtn", "--out", out],
                    timeout=1800), f"quantize {f}")
            ck[f] = (out, [])
    with open(a.val, encoding="utf-8", errors="replace") as fh:
        lines = [l.strip()[:14] for l in fh if len(l.strip()) >= 14][:8]
    p8, p1 = os.path.join(tmp, "p8.txt"), os.path.join(tmp, "p1.txt")
    with open(p8, "w") as fh:
        fh.write("\n".join(lines) + "\n")
    with open(p1, "w") as fh:
        fh.write(lines[0] + "\n")

    def tokens_per_s(f, batch, t):
        path, extra = ck[f]
        r = must(sh([a.looplm, "generate", "--checkpoint", path, *extra, "--prompts", p8 if batch > 1 else p1,
                     "--batch", str(batch), "-n", str(a.n_new), "--temperature", "0", "--speculative", "0", "-t", str(t),
                     "--kv-cache", a.kv_cache]), f"generate {f} batch {batch}")
        m = re.search(r"generation: \d+ tokens in [0-9.]+ ms \(([0-9.]+) tokens/s\)", r.stderr)
        if not m:
            sys.exit(f"batched.py: no generation line from {f} batch {batch}: {r.stderr.strip()[-300:]}")
        return float(m.group(1))

    res = {}
    for rep in range(a.repeats):
        for t in threads:
            for f in formats:
                order = (1, 8) if rep % 2 == 0 else (8, 1)
                for b in order:
                    res.setdefault((t, f, b), []).append(tokens_per_s(f, b, t))
    print(f"Batched decoding, {a.preset} {a.layers} x d{a.d_model} (byte vocab), 8 prompts of 14 characters"
          f" against the first alone, -n {a.n_new}, --kv-cache {a.kv_cache}; medians of {a.repeats}"
          " interleaved repeats (new tokens/s of all sequences):\n")
    print("| threads | weights | batch 1 | batch 8 | ratio | batch 8 range |")
    print("|---|---|---|---|---|---|")
    for t in threads:
        for f in formats:
            b1, b8 = statistics.median(res[(t, f, 1)]), statistics.median(res[(t, f, 8)])
            lo, hi = min(res[(t, f, 8)]), max(res[(t, f, 8)])
            print(f"| {t} | {f} | {b1:,.0f} | {b8:,.0f} | {b8 / b1:.2f}x | {lo:,.0f}-{hi:,.0f} |")


if __name__ == "__main__":
    main()
