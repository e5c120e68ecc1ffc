#!/usr/bin/env python3
"""Self-speculative decoding (loop-as-draft) against plain greedy decoding of the same looped model.

    python3 bench/speculative.py [--looplm build/looplm] [--base OLD_LOOPLM] [--threads 1,2] [--repeats 3]
                                 [--d-model 640 --heads 10] [--train-steps 400] [--run DIR]
                                 [--grid 4:1,4:2,8:1,auto] [--formats fp32,bf16,q8_0] [--n-new 128]

The model: the `looped` preset (1 + 2x4 + 1 blocks, R = 4, byte vocabulary) at --d-model / --heads,
trained --train-steps steps on the KJV (batch 8 x 128, lr 1e-3) so that its drafts are meaningful
(`bash scripts/prepare_kjv.sh` makes the data; --run DIR keeps the run for the next time). At d640
its fp32 weights are ~80 MB, past the last-level cache: decoding is memory-bound there, which is
where drafting pays. q8_0 is `looplm quantize --method rtn`; bf16 is `--weights bf16`.

For each repeat, thread count and format, one `looplm generate -p PROMPT -n N --temperature 0
--ignore-eos` plain and one per (K, r) in --grid (`--speculative K --draft-depth r`) run back to
back (auto: `--speculative auto`, whose measurement is not in the decode time: it is paid once per
process, and its line says how long it took); the figure is the "generation: ... (X tokens/s)" line, with the acceptance and the tokens per
weight stream from the "speculative:" line. Every speculative text must equal the plain one (the
script fails otherwise). --base OLD_LOOPLM adds the same speculative runs with another binary
(e.g. the build before loop-as-draft, whose verification re-ran every step). The table gives
medians and each ratio to plain decoding of the same binary in the same repeat.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PROMPT = "And God said, Let there be light: and there was light. And God saw the light,"


def sh(cmd, timeout=1800):
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", timeout=timeout, cwd=ROOT)


def must(r, what):
    if r.returncode != 0:
        sys.exit(f"speculative.py: {what} failed: {r.stderr.strip()[-600:]}")
    return r


def generate(binary, ckpt, args, threads, n_new, weights):
    cmd = [binary, "generate", "--checkpoint", ckpt, "-p", PROMPT, "-n", str(n_new), "--temperature", "0", "--ignore-eos",
           "-t", str(threads)] + args + (["--weights", weights] if weights else [])
    if not args and n_new >= 1000:  # plain: greedy generate drafts by default from 1000 tokens (--base binaries predate that)
        cmd += ["--speculative", "0"]
    r = must(sh(cmd), " ".join(cmd))
    speed = float(re.search(r"generation: \d+ tokens in [\d.]+ ms \(([\d.]+) tokens/s\)", r.stderr).group(1))
    acc = re.search(r"accepted \(([\d.]+)%\), ([\d.]+) tokens per (weight stream|full pass)", r.stderr)
    return r.stdout, speed, (float(acc.group(1)) if acc else None), (float(acc.group(2)) if acc else None)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build", "looplm"))
    ap.add_argument("--base", help="another looplm binary to time the same speculative runs with")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--d-model", type=int, default=640)
    ap.add_argument("--heads", type=int, default=10)
    ap.add_argument("--train-steps", type=int, default=400)
    ap.add_argument("--run", default=os.path.join(ROOT, "runs", "bench_speculative"))
    ap.add_argument("--grid", default="4:1,4:2,8:1,auto", help="K:r pairs, and auto")
    ap.add_argument("--formats", default="fp32,bf16,q8_0")
    ap.add_argument("--n-new", type=int, default=128)
    a = ap.parse_args()
    grid = [kr if kr == "auto" else tuple(int(x) for x in kr.split(":")) for kr in a.grid.split(",")]
    ckpt = os.path.join(a.run, "model.safetensors")
    if not os.path.exists(ckpt):
        if not os.path.exists(os.path.join(ROOT, "data", "kjv", "train.txt")):
            sys.exit("speculative.py: data/kjv is missing (bash scripts/prepare_kjv.sh)")
        print(f"training the looped preset at d{a.d_model} for {a.train_steps} steps into {a.run} ...", file=sys.stderr)
        must(sh([a.looplm, "train", "--preset", "looped", "--out", a.run, "--overwrite", "--quiet", "--steps", str(a.train_steps),
                 "--set", f"d_model={a.d_model}", "--set", f"n_heads={a.heads}", "--set", "batch_size=8", "--set", "context=128",
                 "--set", "warmup=10", "--set", f"eval_every={a.train_steps}", "--set", "eval_batches=2"], timeout=7200), "training")
    files = {"fp32": (ckpt, ""), "bf16": (ckpt, "bf16")}
    if "q8_0" in a.formats.split(","):
        q8 = os.path.join(a.run, "model.q8_0.safetensors")
        if not os.path.exists(q8):
            must(sh([a.looplm, "quantize", "--checkpoint", ckpt, "--format", "q8_0", "--method", "rtn", "--out", q8]), "quantize")
        files["q8_0"] = (q8, "")
    binaries = [("new", a.looplm)] + ([("base", a.base)] if a.base else [])
    rows = {}  # (format, threads, label) -> lists
    for rep in range(a.repeats):
        for fmt in a.formats.split(","):
            path, weights = files[fmt]
            for t in [int(x) for x in a.threads.split(",")]:
                for name, binary in binaries:
                    text, plain, _, _ = generate(binary, path, [], t, a.n_new, weights)
                    rows.setdefault((fmt, t, f"{name} plain"), []).append((plain, 1.0, None, None))
                    for kr in grid:
                        if kr == "auto" and name == "base":
                            continue  # (the build before has no auto)
                        args = ["--speculative", "auto"] if kr == "auto" else ["--speculative", str(kr[0]), "--draft-depth", str(kr[1])]
                        label = "auto" if kr == "auto" else f"K={kr[0]} r={kr[1]}"
                        out, speed, acc, tps = generate(binary, path, args, t, a.n_new, weights)
                        if out != text:
                            sys.exit(f"speculative.py: {name} {label} {fmt} gave another text than plain greedy decoding")
                        rows.setdefault((fmt, t, f"{name} {label}"), []).append((speed, speed / plain, acc, tps))
        print(f"repeat {rep + 1}/{a.repeats} done", file=sys.stderr)
    print(f"| format | threads | run | tokens/s | / plain | accepted | tokens per weight stream |")
    print("|---|---|---|---|---|---|---|")
    for (fmt, t, label), v in rows.items():
        # (auto may draft in some repeats and decode plainly in others: those have no acceptance)
        med = lambda i: statistics.median(x[i] for x in v if x[i] is not None)
        drafted = sum(x[2] is not None for x in v)
        acc = f"{med(2):.0f}%" if drafted else ""
        tps = f"{med(3):.2f}" if drafted else ""
        if label.endswith("auto") and 0 < drafted < len(v):
            acc += f" ({drafted} of {len(v)} drafted)"
        print(f"| {fmt} | {t} | {label} | {med(0):.1f} | {med(1):.2f}x | {acc} | {tps} |")


if __name__ == "__main__":
    main()
