#!/usr/bin/env python3
"""looplm vs PyTorch on the bench presets: interleaved, repeated runs, medians, a markdown table.

    python3 bench/compare.py [--looplm build/looplm] [--threads 2] [--configs tiny,dense,looped,...]
                             [--repeats 3] [--bf16] [--llamacpp]

Configs (default: all nine): tiny, dense, looped, the looped systems on bench-looped's shape
(1 + 2x4 + 1, d 384): recurrent_gpt (gated loop rule), deeploop (sandwich blocks, RMSNorm, α =
√(2N)), hyperloop (hyper rule, 4 streams, diagonal H_res), mhc (hyper rule, Sinkhorn H_res), and
the energy-based blocks at d 384: nrgpt (one NRGPT energy block applied R = 6 times, ff2w, P matrix)
and cem (6 CEM layers, T = 2 inner steps, the diagonal term).

For each repeat and each config it runs, back to back,
    LOOPLM bench --preset bench-<config> --threads N --json
    /usr/bin/python3 bench/torch_peer.py --config <config> --threads N --json
(the order alternates between repeats), takes the last JSON object each prints, and reports the
median of each metric over the repeats. A looplm binary built before a preset existed does not know
it ("unknown preset"): then the run is repeated with --config configs/bench-<config>.json (the same
file the preset is built from) and the table says so. Before the runs, the peer's OpenBLAS core-type probe runs
once per set of GEMM shapes (`torch_peer.py --probe-only`: every d-384 config shares dense's) and every
peer run gets the winner as --coretype NAME, instead of probing again; --peer-args with --coretype,
--keep-coretype or --out-of-the-box skips the probe. Under the table: both sides' measured fp32
GEMM rate on the training shapes (`gemm_peak_gflops`) and the peer's core type, so a starved
OpenBLAS shows at a glance. Ratios are looplm / PyTorch: above 1 means looplm is faster
(tokens/s) or uses more memory (peak RSS). The machine is shared: compare ratios measured in one
run, not absolute numbers across runs. With looped in the run, the looplm training overhead of each
looped system over plain looping, 1 − (its train tok/s) / (looped's train tok/s), is printed
under the tables (from the same run's medians, with the per-repeat range), and the peer's beside it. Only the standard library is needed here; the peer needs
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
# torch_peer.py's configs; looplm's preset for each is bench-<name>.
CONFIGS = ("tiny", "dense", "looped", "recurrent_gpt", "deeploop", "hyperloop", "mhc", "nrgpt", "cem")
# Looped systems on bench-looped's shape whose training overhead over plain looping is reported.
OVERHEAD_OF = ("hyperloop", "mhc", "recurrent_gpt", "deeploop")
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


def print_overheads(configs, runs, repeats):
    """Training overhead of each looped system over plain looping (bench-looped), looplm's from the
    same run's medians, 1 − system / looped train tok/s, with the range over the repeats (repeat i
    of the system against repeat i of looped); the peer's the same way, for comparison."""
    shown = [c for c in OVERHEAD_OF if c in configs]
    if not shown:
        return
    if "looped" not in configs:
        print(f"\n(Training overhead over plain looping: needs looped in --configs, beside "
              f"{', '.join(shown)}.)")
        return
    print("\nTraining overhead over plain looping (bench-looped), 1 − (system train tok/s) / (looped "
          "train tok/s), from this run:\n")
    print("| system | looplm overhead | looplm per repeat | PyTorch overhead | PyTorch per repeat |")
    print("|---|---:|---|---:|---|")
    for c in shown:
        cells = []
        for who in ("looplm", "torch"):
            base, sys_ = median(runs["looped"][who], "train_tokens_per_s"), median(runs[c][who], "train_tokens_per_s")
            med = f"{100 * (1 - sys_ / base):.1f}%" if base and sys_ else "—"
            pairs = [1 - s_["train_tokens_per_s"] / b["train_tokens_per_s"]
                     for s_, b in zip(runs[c][who], runs["looped"][who])
                     if s_.get("train_tokens_per_s") and b.get("train_tokens_per_s")]
            per = ", ".join(f"{100 * v:.1f}%" for v in pairs) if pairs else "—"
            cells += [med, f"[{per}]"]
        print(f"| {c} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
    print("\n(Negative: faster than plain looping. Each value compares medians (or single runs) taken "
          "minutes apart on a shared machine; the per-repeat spread shows how far to trust it.)")


def main():
    ap = argparse.ArgumentParser(description="looplm vs PyTorch benchmark (markdown table)")
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build", "looplm"),
                    help="looplm binary (default: build/looplm)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS),
                    help="comma-separated, from " + ", ".join(CONFIGS) + " (default: all); e.g. "
                         "looped,hyperloop,mhc for a short run with the overhead lines")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bf16", action="store_true", help="pass --bf16 to the PyTorch peer")
    ap.add_argument("--python", default="/usr/bin/python3", help="python with torch, for the peer")
    ap.add_argument("--peer-args", default="", help="extra arguments for torch_peer.py")
    ap.add_argument("--looplm-args", default="", help="extra arguments for looplm bench")
    ap.add_argument("--timeout", type=int, default=300, help="seconds per single run")
    ap.add_argument("--verbose", action="store_true", help="print every run as it finishes")
    ap.add_argument("--llamacpp", action="store_true",
                    help="also compare batch-1 decoding with llama.cpp at every precision (bench/llamacpp.py; "
                         "skipped with a note when npm is unreachable)")
    a = ap.parse_args()

    configs = [c.strip() for c in a.configs.split(",") if c.strip()]
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown or not configs:
        ap.error(f"--configs: unknown {', '.join(unknown) or '(none given)'}; choose from "
                 + ", ".join(CONFIGS))
    looplm = os.path.abspath(a.looplm)
    have_looplm = os.path.isfile(looplm) and os.access(looplm, os.X_OK)
    if not have_looplm:
        print(f"compare.py: looplm binary not found (or not executable) at {looplm}.\n"
              f"  Build it first:  cmake -S . -B build && cmake --build build -j\n"
              f"  or pass --looplm PATH. Measuring the PyTorch peer only.", file=sys.stderr)
    peer = os.path.join(HERE, "torch_peer.py")

    # The OpenBLAS core type for the peer: probed once per set of GEMM shapes, passed down.
    peer_extra = a.peer_args.split()
    coretype, probes = {}, {}
    if not any(x.split("=")[0] in ("--coretype", "--keep-coretype", "--out-of-the-box")
               for x in peer_extra):
        for c in configs:
            if c in coretype:
                continue
            cmd = [a.python, peer, "--config", c, "--threads", str(a.threads), "--probe-only",
                   "--json"] + peer_extra
            d, err = run_one(cmd, a.timeout)
            if err:
                print(f"[{c} probe] {err}\n  (the peer will probe by itself)", file=sys.stderr)
                continue
            for k in d.get("applies_to") or [c]:
                coretype[k], probes[k] = d["coretype"], d
            if a.verbose:
                print(f"[{c} probe] OpenBLAS core type {d['coretype']} ({d['_wall_s']:.1f} s)",
                      file=sys.stderr)

    runs = {c: {"looplm": [], "torch": []} for c in configs}
    errors = []
    # How looplm is told the config: its preset, or the preset's file when the binary predates it.
    looplm_cfg = {c: ["--preset", f"bench-{c}"] for c in configs}
    cfg_file = {c: os.path.join(ROOT, "configs", f"bench-{c}.json") for c in configs}
    for rep in range(a.repeats):
        for c in configs:
            cmds = []
            if have_looplm:
                cmds.append(("looplm", lambda c=c: [looplm, "bench"] + looplm_cfg[c] + [
                    "--repetitions", "1", "--threads", str(a.threads), "--json"] + a.looplm_args.split()))
            cmds.append(("torch", lambda c=c: [a.python, peer, "--config", c, "--threads", str(a.threads),
                                               "--json"] + (["--bf16"] if a.bf16 else [])
                         + (["--coretype", coretype[c]] if c in coretype else []) + peer_extra))
            if rep % 2 == 1:
                cmds.reverse()  # alternate who goes first
            for who, make_cmd in cmds:
                d, err = run_one(make_cmd(), a.timeout)
                if (who == "looplm" and err and "unknown preset" in err and looplm_cfg[c][0] == "--preset"
                        and os.path.isfile(cfg_file[c])):
                    looplm_cfg[c] = ["--config", cfg_file[c]]  # binary older than the preset
                    print(f"[{c} looplm] this looplm has no preset bench-{c}; using --config "
                          f"{os.path.relpath(cfg_file[c], ROOT)}", file=sys.stderr)
                    d, err = run_one(make_cmd(), a.timeout)
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

    # Each side's measured fp32 GEMM rate on the training shapes: a starved BLAS shows here.
    print("\n| config | looplm GEMM GFLOP/s | PyTorch GEMM GFLOP/s | ratio | PyTorch OpenBLAS core |")
    print("|---|---:|---:|---:|---|")
    for c in configs:
        lg = median(runs[c]["looplm"], "gemm_peak_gflops")
        tg = median(runs[c]["torch"], "gemm_peak_gflops")
        cores = sorted({str(r.get("openblas_core")) for r in runs[c]["torch"]})
        src = (["probe"] if c in probes
               else sorted({str(r.get("coretype_source")) for r in runs[c]["torch"]}))
        core = f"{'/'.join(cores)} ({'/'.join(src)})" if cores else "—"
        print(f"| {c} | {fmt(lg, 1)} | {fmt(tg, 1)} | {ratio(lg, tg)} | {core} |")
    print("\n(GEMM GFLOP/s: fp32 x @ W^T on the shapes {M,3d,d}, {M,4d,d}, {M,d,4d}, M = batch x "
          "context, the best shape's median, measured by each program in its own process.)")
    shown = set()
    for c in configs:
        d = probes.get(c)
        if d is None or id(d) in shown:
            continue
        shown.add(id(d))
        rows = ", ".join(
            r["coretype"] + (f" [{r['core']}]" if r["coretype"] == "autodetect" else "") + " "
            + (f"{r['gflops']:.1f}" if r.get("gflops") else "—")
            + (f" ({r['note']})" if r.get("note") else "")
            for r in d.get("coretype_probe") or [])
        print(f"- OpenBLAS core-type probe, {', '.join(d.get('applies_to') or [c])}: "
              f"**{d['coretype']}**; GEMM GFLOP/s {rows}")

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
            if who == "torch":
                gp = median(rs, "gemm_peak_gflops")
                if gp is not None:
                    extra = f"; measured GEMM peak {fmt(gp, 1)} GFLOP/s"
            print(f"- {c} {who}: train [{tr}], gen [{ge}]{extra}")
    print_overheads(configs, runs, a.repeats)
    via_file = [c for c in configs if looplm_cfg[c][0] == "--config"]
    if via_file:
        print(f"\n(looplm ran {', '.join(via_file)} from configs/bench-<config>.json: this binary has "
              "no such preset yet.)")
    if a.llamacpp:  # the llama.cpp column: batch-1 decoding at each precision, the same weights
        import llamacpp
        print()
        llamacpp.main(["--looplm", a.looplm, "--threads", f"1,{a.threads}" if a.threads != 1 else "1",
                       "--repeats", str(a.repeats)])
    if errors:
        print(f"\n{len(errors)} run(s) failed; see stderr.")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
