#!/usr/bin/env python3
"""looplm vs PyTorch on the bench presets: interleaved, repeated runs, medians, a markdown table.

    python3 bench/compare.py [--looplm build/looplm] [--threads 2] [--configs tiny,dense,looped]
                             [--repeats 3] [--bf16]

For each repeat and each config it runs, back to back,
    LOOPLM bench --preset bench-<config> --threads N --json
    /usr/bin/python3 bench/torch_peer.py --config <config> --threads N --json
(the order alternates between repeats), takes the last JSON object each prints, and reports the
median of each metric over the repeats. Ratios are looplm / PyTorch: above 1 means looplm is faster
(tokens/s) or uses more memory (peak RSS). The machine is shared: compare ratios measured in one
run, not absolute numbers across runs. Only the standard library is needed here; the peer needs
Debian's PyTorch (/usr/bin/python3, torch 1.13.1), see --python.

A missing looplm binary is reported and the PyTorch side is still measured (its columns only).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
METRICS = ("train_tokens_per_s", "generate_tokens_per_s", "generate_bf16_tokens_per_s", "peak_rss_mib", "gflops",
           "peak_fraction", "gemm_peak_gflops")


def last_json(text):
    for line in reversed(text.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def run_one(cmd, timeout):
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout} s: {' '.join(cmd)}"
    except OSError as e:
        return None, f"could not run {' '.join(cmd)}: {e}"
    d = last_json(p.stdout)
    if p.returncode != 0 or d is None:
        tail = (p.stderr or p.stdout).strip().splitlines()[-5:]
        return None, f"exit {p.returncode} from {' '.join(cmd)}:\n    " + "\n    ".join(tail)
    d["_wall_s"] = time.perf_counter() - t0
    if "gflops" not in d and "train_gflops" in d:  # looplm names it train_gflops
        d["gflops"] = d["train_gflops"]
    return d, None


def median(runs, key):
    vals = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def fmt(v, digits=0):
    if v is None:
        return "—"
    return f"{v:,.{digits}f}"


def ratio(a, b):
    return f"{a / b:.2f}×" if a is not None and b else "—"


def main():
    ap = argparse.ArgumentParser(description="looplm vs PyTorch benchmark (markdown table)")
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build", "looplm"),
                    help="looplm binary (default: build/looplm)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default="tiny,dense,looped")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bf16", action="store_true", help="pass --bf16 to the PyTorch peer")
    ap.add_argument("--python", default="/usr/bin/python3", help="python with torch, for the peer")
    ap.add_argument("--peer-args", default="", help="extra arguments for torch_peer.py")
    ap.add_argument("--looplm-args", default="", help="extra arguments for looplm bench")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per single run")
    ap.add_argument("--verbose", action="store_true", help="print every run as it finishes")
    a = ap.parse_args()

    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    looplm = os.path.abspath(a.looplm)
    have_looplm = os.path.isfile(looplm) and os.access(looplm, os.X_OK)
    if not have_looplm:
        print(f"compare.py: looplm binary not found (or not executable) at {looplm}.\n"
              f"  Build it first:  cmake -S . -B build && cmake --build build -j\n"
              f"  or pass --looplm PATH. Measuring the PyTorch peer only.", file=sys.stderr)
    peer = os.path.join(HERE, "torch_peer.py")

    runs = {c: {"looplm": [], "torch": []} for c in configs}
    errors = []
    for rep in range(a.repeats):
        for c in configs:
            cmds = []
            if have_looplm:
                cmds.append(("looplm", [looplm, "bench", "--preset", f"bench-{c}", "--threads",
                                        str(a.threads), "--json"] + a.looplm_args.split()))
            cmds.append(("torch", [a.python, peer, "--config", c, "--threads", str(a.threads),
                                   "--json"] + (["--bf16"] if a.bf16 else []) + a.peer_args.split()))
            if rep % 2 == 1:
                cmds.reverse()  # alternate who goes first
            for who, cmd in cmds:
                d, err = run_one(cmd, a.timeout)
                if err:
                    errors.append(err)
                    print(f"[{c} {who} #{rep + 1}] {err}", file=sys.stderr)
                    continue
                runs[c][who].append(d)
                if a.verbose:
                    print(f"[{c} {who} #{rep + 1}] train {fmt(d.get('train_tokens_per_s'))} tok/s, "
                          f"gen {fmt(d.get('generate_tokens_per_s'))} tok/s, "
                          f"RSS {fmt(d.get('peak_rss_mib'))} MiB ({d['_wall_s']:.1f} s)",
                          file=sys.stderr)

    prec = "bf16 autocast" if a.bf16 else "fp32"
    print(f"\n{a.threads} thread(s), PyTorch {prec}, medians of {a.repeats} interleaved runs\n")
    # Generation: looplm with fp32 weights (exact) and from its bf16 weight copy, both against the
    # peer's generation (fp32, or bf16 autocast under --bf16).
    print("| config | looplm train tok/s | PyTorch train tok/s | ratio | looplm gen tok/s fp32 | "
          "looplm gen tok/s bf16 | PyTorch gen tok/s | ratio fp32 | ratio bf16 | looplm peak RSS | "
          "PyTorch peak RSS | ratio |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in configs:
        L = {k: median(runs[c]["looplm"], k) for k in METRICS}
        T = {k: median(runs[c]["torch"], k) for k in METRICS}
        mib = lambda v: "—" if v is None else f"{v:,.0f} MiB"
        print(f"| {c} | {fmt(L['train_tokens_per_s'])} | {fmt(T['train_tokens_per_s'])} | "
              f"{ratio(L['train_tokens_per_s'], T['train_tokens_per_s'])} | "
              f"{fmt(L['generate_tokens_per_s'])} | {fmt(L['generate_bf16_tokens_per_s'])} | "
              f"{fmt(T['generate_tokens_per_s'])} | "
              f"{ratio(L['generate_tokens_per_s'], T['generate_tokens_per_s'])} | "
              f"{ratio(L['generate_bf16_tokens_per_s'], T['generate_tokens_per_s'])} | "
              f"{mib(L['peak_rss_mib'])} | {mib(T['peak_rss_mib'])} | "
              f"{ratio(L['peak_rss_mib'], T['peak_rss_mib'])} |")

    # The spread, and looplm's own GFLOP/s and peak fraction, below the table.
    print()
    for c in configs:
        for who in ("looplm", "torch"):
            rs = runs[c][who]
            if not rs:
                continue
            tr = ", ".join(fmt(r.get("train_tokens_per_s")) for r in rs)
            ge = ", ".join(fmt(r.get("generate_tokens_per_s")) for r in rs)
            if who == "looplm":
                ge += "; bf16 " + ", ".join(fmt(r.get("generate_bf16_tokens_per_s")) for r in rs)
            extra = ""
            if who == "looplm":
                g, pf = median(rs, "gflops"), median(rs, "peak_fraction")
                gp = median(rs, "gemm_peak_gflops")
                extra = f"; train {fmt(g, 1)} GFLOP/s = {fmt(pf, 3)} of peak"
                if gp is not None:
                    extra += f" (measured GEMM peak {fmt(gp, 1)} GFLOP/s)"
            print(f"- {c} {who}: train [{tr}], gen [{ge}]{extra}")
    if errors:
        print(f"\n{len(errors)} run(s) failed; see stderr.")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
