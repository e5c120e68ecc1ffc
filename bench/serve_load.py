#!/usr/bin/env python3
"""Load test of `looplm serve` (bench/README.md, "Serving"): concurrent streaming clients against the
batched CLI on the same prompts, in one run.

    python3 bench/serve_load.py --checkpoint runs/looped [--clients 16] [--requests 63] [--max-tokens 64]
                                [--speculative auto|K:r]

1. `looplm generate --prompts P --batch CLIENTS -n MAX --temperature 0` on CLIENTS prompts: the
   batched decoder's tokens per second (its own prefill + decode time), the peer.
2. `looplm serve --parallel CLIENTS`, then CLIENTS threads each sending REQUESTS streaming
   completions one after another (the same prompts, greedy, MAX tokens): failed requests, total
   tokens per second over the wall time, time to first token p50 / p99, and the server's resident
   memory after the first CLIENTS x 4 requests and at the end.
--speculative: loop-as-draft in both (`generate --speculative`, the request's "speculative"); with
one client the server should match the CLI's speed-up, with many it decodes in the batch.
Standard library only (http.client, threads); the server listens on 127.0.0.1.
"""
import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

SRC = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def percentile(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--bin", default=os.path.join(SRC, "build", "looplm"))
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--requests", type=int, default=63, help="per client (16 x 63 = 1,008 requests)")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--speculative", help="auto, or K:r (drafts and their depth)")
    a = ap.parse_args()
    spec_cli, spec_req = [], {}
    if a.speculative == "auto":
        spec_cli, spec_req = ["--speculative", "auto"], {"speculative": "auto"}
    elif a.speculative:
        k, r = (int(x) for x in a.speculative.split(":"))
        spec_cli, spec_req = ["--speculative", str(k), "--draft-depth", str(r)], {"speculative": k, "draft_depth": r}

    val = os.path.join(SRC, "data", "kjv", "val.txt")
    lines = [l.strip() for l in open(val, encoding="utf-8")] if os.path.exists(val) else []
    lines = [l for l in lines if len(l) > 40] or ["In the beginning God created the heaven and the earth."]
    prompts = [lines[(i * 97) % len(lines)][:48] for i in range(a.clients)]

    # 1. the batched CLI
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write("\n".join(prompts) + "\n")
        pfile = f.name
    r = subprocess.run([a.bin, "generate", "--checkpoint", a.checkpoint, "--prompts", pfile, "--batch", str(a.clients),
                        "-n", str(a.max_tokens), "--temperature", "0", "--ignore-eos", "-t", str(a.threads)] + (spec_cli or ["--speculative", "0"]), capture_output=True, text=True,
                       errors="replace")
    os.unlink(pfile)
    m = re.search(r"prompt: (\d+) tokens in ([\d.]+) ms .* generation: (\d+) tokens in ([\d.]+) ms", r.stderr)
    if r.returncode != 0 or not m:
        sys.exit("generate failed: " + r.stderr)
    cli_tps = int(m.group(3)) / ((float(m.group(2)) + float(m.group(4))) / 1e3)

    # 2. the server under load
    srv = subprocess.Popen([a.bin, "serve", "--checkpoint", a.checkpoint, "--port", "0", "--parallel", str(a.clients),
                            "-t", str(a.threads)], stderr=subprocess.PIPE, text=True)
    port = None
    for line in srv.stderr:
        mm = re.search(r"on http://127\.0\.0\.1:(\d+)/", line)
        if mm:
            port = int(mm.group(1))
            break
    if port is None:
        sys.exit("the server did not start")
    threading.Thread(target=lambda: [None for _ in srv.stderr], daemon=True).start()

    ttft, failures, tokens = [], [], [0]
    done = [0]
    lock = threading.Lock()
    rss_early = [0]

    def one(prompt):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
        body = json.dumps({"prompt": prompt, "max_tokens": a.max_tokens, "temperature": 0, "stream": True, "ignore_eos": True, **spec_req})
        t0 = time.perf_counter()
        conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
        resp = conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"HTTP {resp.status}: {resp.read()[:200]}")
        first, n, buf = None, 0, b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                if not ev.startswith(b"data: ") or ev == b"data: [DONE]":
                    continue
                j = json.loads(ev[6:])
                if j.get("usage"):
                    n = j["usage"]["completion_tokens"]
                if first is None and any(c.get("text") for c in j["choices"]):
                    first = time.perf_counter() - t0
        conn.close()
        if n != a.max_tokens:
            raise RuntimeError(f"{n} tokens, not {a.max_tokens}")
        return first, n

    def client(i):
        for k in range(a.requests):
            try:
                first, n = one(prompts[(i + k) % len(prompts)])
                with lock:
                    ttft.append(first)
                    tokens[0] += n
                    done[0] += 1
                    if done[0] == a.clients * 4:
                        rss_early[0] = rss_kib(srv.pid)
            except Exception as e:  # noqa: BLE001 (every failure is counted and shown)
                with lock:
                    failures.append(str(e))

    t0 = time.perf_counter()
    th = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in th:
        t.start()
    for t in th:
        t.join()
    wall = time.perf_counter() - t0
    rss_end = rss_kib(srv.pid)
    srv.terminate()
    srv.wait(timeout=60)

    total = a.clients * a.requests
    serve_tps = tokens[0] / wall
    print(f"{a.checkpoint}: {a.clients} streaming clients x {a.requests} requests, {a.max_tokens} tokens each, threads {a.threads or 'adaptive'}"
          + (f", speculative {a.speculative}" if a.speculative else ""))
    print("| what | value |\n|---|---|")
    print(f"| requests | {total} ({len(failures)} failed) |")
    print(f"| looplm generate --prompts ({a.clients} prompts) --batch {a.clients} | {cli_tps:.0f} tokens/s |")
    print(f"| looplm serve, {a.clients} clients | {serve_tps:.0f} tokens/s ({serve_tps / cli_tps:.2f}x the CLI) |")
    if ttft:
        print(f"| time to first token p50 / p99 | {1e3 * statistics.median(ttft):.1f} / {1e3 * percentile(ttft, 0.99):.1f} ms |")
    print(f"| server RSS after {a.clients * 4} requests / at the end | {rss_early[0] / 1024:.1f} / {rss_end / 1024:.1f} MiB "
          f"({100 * (rss_end - rss_early[0]) / max(rss_early[0], 1):+.1f}%) |")
    for f in failures[:5]:
        print("failure:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
