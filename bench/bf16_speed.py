#!/usr/bin/env python3
"""Training speed in bf16 against fp32 and against PyTorch's bf16 autocast (docs/numerics.md).

    python3 bench/bf16_speed.py [--looplm build/looplm] [--configs dense,looped] [--threads 2]
                                [--steps 12] [--repeats 3] [--peer] [--python /usr/bin/python3]
                                [--base OTHER_LOOPLM]

For each repeat and config, back to back (the order alternating between repeats):
    looplm train --preset bench-<config> --set precision=fp32|bf16 --set steps=S ...
on the KJV text reduced to the presets' 65-character alphabet, and with --peer
    torch_peer.py --config <config> --threads T --bf16 --gen-tokens 0 --json
Each looplm run's tokens/s is the median of its steps after the first two (metrics.jsonl); the
table gives the medians over the repeats and the ratios bf16 / fp32 and looplm bf16 / PyTorch bf16.
With --base, another looplm binary's bf16 runs in the same interleaving (a kernel change against the
build before it: the ratio bf16 / base bf16).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALPHABET = set("\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")


def looplm_train(looplm, config, precision, threads, steps, text, work):
    out = os.path.join(work, f"{config}_{precision}")
    cmd = [looplm, "train", "--preset", f"bench-{config}", "--set", f"precision={precision}", "--set", f"steps={steps}",
           "--set", f"eval_every={steps + 1}", "--set", "eval_batches=1", "--set", f"data_train={text}",
           "--set", f"data_val={text}", "-t", str(threads), "--out", out, "--overwrite", "--quiet"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rates = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            if d.get("split") == "train" and d["step"] > 2:
                rates.append(d["tokens_per_s"])
    return statistics.median(rates)


def peer_train(python, config, threads):
    cmd = [python, os.path.join(ROOT, "bench", "torch_peer.py"), "--config", config, "--threads", str(threads), "--bf16",
           "--gen-tokens", "0", "--coretype", "keep", "--json"]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(res.stdout.strip().splitlines()[-1])["train_tokens_per_s"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build", "looplm"))
    ap.add_argument("--configs", default="dense,looped")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--peer", action="store_true", help="also PyTorch's bf16 autocast (bench/torch_peer.py --bf16)")
    ap.add_argument("--python", default="/usr/bin/python3", help="python with torch, for the peer")
    ap.add_argument("--base", help="another looplm binary whose bf16 runs beside (before / after a change)")
    a = ap.parse_args()
    configs = a.configs.split(",")
    with tempfile.TemporaryDirectory() as work:
        text = os.path.join(work, "kjv65.txt")
        with open(os.path.join(ROOT, "data", "kjv", "train.txt"), encoding="utf-8") as f:
            src = f.read()
        with open(text, "w", encoding="utf-8") as f:
            f.write("".join(ch for ch in src if ch in ALPHABET))
        runs = {(c, w): [] for c in configs for w in ("fp32", "bf16", "base", "peer")}
        for r in range(a.repeats):
            for c in configs:
                order = ["fp32", "bf16", "base", "peer"] if r % 2 == 0 else ["peer", "base", "bf16", "fp32"]
                for who in order:
                    if who == "peer":
                        if a.peer:
                            runs[(c, who)].append(peer_train(a.python, c, a.threads))
                    elif who == "base":
                        if a.base:
                            runs[(c, who)].append(looplm_train(a.base, c, "bf16", a.threads, a.steps, text, work))
                    else:
                        runs[(c, who)].append(looplm_train(a.looplm, c, who, a.threads, a.steps, text, work))
                print(f"repeat {r + 1}: {c} " + ", ".join(f"{w} {runs[(c, w)][-1]:.0f}" for w in order if runs[(c, w)]),
                      file=sys.stderr)
    print(f"| config | threads | looplm fp32 tok/s | looplm bf16 tok/s | bf16 / fp32 |"
          + (" base bf16 tok/s | bf16 / base bf16 |" if a.base else "")
          + (" PyTorch bf16 tok/s | looplm bf16 / PyTorch bf16 |" if a.peer else ""))
    print("|---|---|---|---|---|" + ("---|---|" if a.base else "") + ("---|---|" if a.peer else ""))
    for c in configs:
        f, b = statistics.median(runs[(c, "fp32")]), statistics.median(runs[(c, "bf16")])
        line = f"| {c} | {a.threads} | {f:,.0f} | {b:,.0f} | {b / f:.2f}x |"
        if a.base:
            o = statistics.median(runs[(c, "base")])
            line += f" {o:,.0f} | {b / o:.2f}x |"
        if a.peer:
            p = statistics.median(runs[(c, "peer")])
            line += f" {p:,.0f} | {b / p:.2f}x |"
        print(line)
    for c in configs:
        print(f"- {c}: " + "; ".join(f"{w} [{', '.join(f'{v:.0f}' for v in runs[(c, w)])}]"
                                     for w in ("fp32", "bf16", "base", "peer") if runs[(c, w)]))


if __name__ == "__main__":
    main()
