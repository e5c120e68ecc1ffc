#!/usr/bin/env python3
"""What the Python module adds to a batch-1 decode step (bench/README.md, "The Python module").

    PYTHONPATH=build/python python3 bench/python_overhead.py [--preset bench-dense] [--tokens 128] [--reps 5]

One process, one model (the preset's shape, random weights: speed does not depend on the values).
Each repetition decodes `tokens` new tokens greedily from a 64-token prompt, two ways, interleaved
so that drift on a shared machine hits them alike:
  * generate(ids)               one call: argument conversion, GIL release, the result array;
  * generate(ids, on_token=f)   plus a Python callback per token (the GIL taken back each time).
The library times its own prefill and decode (return_stats); what a call takes beyond them is the
module's overhead, reported per token and as a fraction of the library's decode step.
"""
import argparse
import statistics
import time

import numpy as np

import looplm


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="bench-dense")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    looplm.set_threads(a.threads)
    m = looplm.from_config(preset=a.preset, seed=1)
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, m.vocab_size, 64, dtype=np.int32)
    m.generate(prompt, max_tokens=8, temperature=0)  # warm-up: pools, caches, oneDNN's kernels

    def timed(**kw):
        t0 = time.perf_counter()
        _, st = m.generate(prompt, max_tokens=a.tokens, temperature=0, return_stats=True, **kw)
        wall = time.perf_counter() - t0
        inside = st["prompt_seconds"] + st["gen_seconds"]
        return (wall - inside) / st["new_tokens"], st["gen_seconds"] / st["new_tokens"]

    calls = []

    def on_token(t):
        calls.append(t)

    plain, callback, step = [], [], []
    for _ in range(a.reps):
        over, s = timed()
        plain.append(over)
        step.append(s)
        calls.clear()
        over, s = timed(on_token=on_token)
        callback.append(over)
        step.append(s)
        assert len(calls) == a.tokens
    med = statistics.median
    s = med(step)
    print(f"{a.preset}: {m.n_params / 1e6:.1f} M parameters, {a.threads} thread(s), {a.tokens} tokens x {a.reps} reps")
    print(f"library decode step (median): {s * 1e3:.3f} ms ({1 / s:.0f} tokens/s)")
    for name, v in (("generate(ids)", plain), ("generate(ids, on_token=f)", callback)):
        print(f"{name:28s} overhead {med(v) * 1e6:7.2f} us/token = {100 * med(v) / s:.3f}% of a step "
              f"(max over reps {100 * max(v) / s:.3f}%)")


if __name__ == "__main__":
    main()
