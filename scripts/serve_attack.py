#!/usr/bin/env python3
"""An attack on `looplm serve`, as a hostile client on the network would try it (docs/testing.md).

Starts the server on 127.0.0.1 (only) with a tiny random model and runs groups of cases over raw
sockets, each bounded in count and time:
  fields      request fields of completions and chat: wrong types, out of range, huge, negative,
              NaN / Infinity / 1e400 written into the raw JSON, odd messages
  bodies      sizes around --max-body, chunked bodies (within, past the limit, one-byte chunks,
              malformed framing), gzip bombs, bad Content-Length; the server's peak memory
  encodings   Content-Encoding and Transfer-Encoding variants, multipart and form bodies
  slow        connections sending one byte a second, and idle ones: /health from another
              address must answer at once; a slow request is cut at its deadline; connections
              past the per-client cap are refused at once
  pipelining  several requests in one write: every answer, in order
  disconnects a client that leaves a whole request, a stream, its own headers or body: the
              request is cancelled (looplm_requests_cancelled_total) and the server goes on
  padding     a model whose vocabulary is padded past its tokenizer's: ids without text
A case fails on a 5xx for a client's error, another status than the case allows, no answer
within its bound, the server's exit, or /health not answering within 2 s after a group.

  scripts/serve_attack.py [--bin build/looplm] [--quick] [--seed S] [--json]

--quick (CI, under a minute): fewer field cases and slow connections. Prints a markdown table
(group, cases, passed, failed) and the first failures; exit status 1 if any case failed.
Options the binary does not have (an older build) are left out, so it runs against any build.
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOST = "127.0.0.1"
OTHER = "127.0.0.2"  # another client address (loopback): the per-client cap is not its


# ---------------------------------------------------------------- raw HTTP
def connect(port, source=None, timeout=10):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if source:
        s.bind((source, 0))
    s.settimeout(timeout)
    s.connect((HOST, port))
    return s


def parse_response(buf):
    """One whole response at the start of buf: (status, headers, body, bytes used), or None."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].decode("latin-1").split("\r\n")
    m = re.match(r"HTTP/1\.[01] (\d{3})", head[0])
    if not m:
        return (-1, {}, buf, len(buf))  # not HTTP
    headers = {}
    for line in head[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    at = end + 4
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = b""
        while True:
            nl = buf.find(b"\r\n", at)
            if nl < 0:
                return None
            size = int(buf[at:nl].split(b";")[0] or b"0", 16)
            if len(buf) < nl + 2 + size + 2:
                return None
            body += buf[nl + 2:nl + 2 + size]
            at = nl + 2 + size + 2
            if size == 0:
                return (int(m.group(1)), headers, body, at)
    n = int(headers.get("content-length", "0"))
    if len(buf) < at + n:
        return None
    return (int(m.group(1)), headers, buf[at:at + n], at + n)


class Exchange:
    """What came back for one request: status (0: none), body, seconds, the connection closed."""

    def __init__(self, status=0, headers=None, body=b"", seconds=0.0, closed=False, error=""):
        self.status, self.headers, self.body, self.seconds, self.closed, self.error = status, headers or {}, body, seconds, closed, error


def exchange(port, data, timeout=5.0, responses=1, source=None, wait_close=0.0):
    """Sends data in one write and reads `responses` answers (or until the server closes or timeout)."""
    t0 = time.time()
    got = []
    try:
        s = connect(port, source)
    except OSError as e:
        return [Exchange(error=f"connect: {e}")]
    buf = b""
    closed = False
    try:
        s.sendall(data)
    except OSError:
        pass  # the server may answer and close before reading it all
    try:
        while len(got) < responses and time.time() - t0 < timeout:
            s.settimeout(max(0.01, timeout - (time.time() - t0)))
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            except ConnectionResetError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            buf += chunk
            while len(got) < responses:
                r = parse_response(buf)
                if not r:
                    break
                got.append(Exchange(r[0], r[1], r[2], time.time() - t0))
                buf = buf[r[3]:]
        if not closed and wait_close > 0:
            s.settimeout(wait_close)
            try:
                closed = s.recv(65536) == b""
            except (socket.timeout, ConnectionResetError) as e:
                closed = isinstance(e, ConnectionResetError)
    finally:
        s.close()
    for g in got:
        g.closed = closed
    if not got:
        got.append(Exchange(0, seconds=time.time() - t0, closed=closed, error="no answer"))
    return got


def request(method, path, body=b"", headers=None, length=True):
    h = {"Host": "x", "Content-Type": "application/json"}
    h.update(headers or {})
    if length and body is not None and "Transfer-Encoding" not in h and "Content-Length" not in h:
        h["Content-Length"] = str(len(body))
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    return head.encode() + (body or b"")


def chunked(body, piece):
    out = b""
    for at in range(0, len(body), piece):
        part = body[at:at + piece]
        out += b"%x\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


# ---------------------------------------------------------------- the server
class Server:
    def __init__(self, binary, ckpt, extra, log_path):
        self.log_path = log_path
        self.log = open(log_path, "wb")
        self.proc = subprocess.Popen([binary, "serve", "--checkpoint", ckpt, "--port", "0", "-t", "1"] + extra,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = 0
        for _ in range(500):
            time.sleep(0.02)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)/", open(log_path, errors="replace").read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
        if not self.port:
            raise RuntimeError("looplm serve did not start:\n" + open(log_path, errors="replace").read()[-2000:])

    def alive(self):
        return self.proc.poll() is None

    def peak_rss_mb(self):
        try:
            for line in open(f"/proc/{self.proc.pid}/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return -1

    def health(self, timeout=2.0, source=OTHER):
        r = exchange(self.port, request("GET", "/health", None), timeout, source=source)[0]
        return r.status == 200

    def metric(self, name):
        r = exchange(self.port, request("GET", "/metrics", None), 5, source=OTHER)[0]
        m = re.search(r"\n" + name + r" ([0-9.]+)", r.body.decode(errors="replace"))
        return float(m.group(1)) if m else -1

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


class Attack:
    def __init__(self):
        self.stats = {}  # group -> [cases, passed, failed]
        self.failures = []  # (group, case, why)

    def record(self, group, case, why=None):
        st = self.stats.setdefault(group, [0, 0, 0])
        st[0] += 1
        if why:
            st[2] += 1
            self.failures.append((group, case, why))
        else:
            st[1] += 1

    def check(self, group, case, srv, r, allowed, bound):
        """A request's answer: its status among `allowed` (a set, or "4xx" / "2xx4xx"), within `bound` s."""
        why = None
        if not srv.alive():
            why = f"the server exited ({srv.proc.returncode})"
        elif r.status == 0:
            why = f"no answer within {bound:.0f} s" + (" (closed)" if r.closed else "")
        elif r.status >= 500 and r.status not in (allowed if isinstance(allowed, set) else set()):
            why = f"{r.status} for a client's error: {r.body[:200]!r}"
        elif allowed == "4xx" and not 400 <= r.status < 500:
            why = f"status {r.status}, not a 4xx: {r.body[:200]!r}"
        elif allowed == "2xx4xx" and not (200 <= r.status < 300 or 400 <= r.status < 500):
            why = f"status {r.status}: {r.body[:200]!r}"
        elif isinstance(allowed, set) and r.status not in allowed:
            why = f"status {r.status}, not {sorted(allowed)}: {r.body[:200]!r}"
        elif r.seconds > bound:
            why = f"answered after {r.seconds:.1f} s (bound {bound} s)"
        self.record(group, case, why)

    def health_after(self, group, srv):
        ok = srv.alive() and srv.health(2.0)
        self.record(group, "/health after the group", None if ok else ("the server exited" if not srv.alive() else "/health did not answer in 2 s"))


# ---------------------------------------------------------------- groups
def raw_json(fields):
    """A JSON object text with values given as raw JSON text (NaN and the like stay as written)."""
    return ("{" + ", ".join(f'"{k}": {v}' for k, v in fields.items()) + "}").encode()


def group_fields(A, srv, rng, quick):
    g = "fields"
    weird = ['"x"', "[]", "{}", "true", "null", "-1", "0", "1.5", "-1e15", "1e300", "-1e300", "18446744073709551616",
             "9223372036854775807", "-9223372036854775808", "NaN", "Infinity", "-Infinity", "1e400", '"\\ud800"', '"' + "a" * 5000 + '"',
             "[" + ",".join(["1"] * 2000) + "]", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]", "-0", "2", "20", "21", "100000"]
    completion_fields = ["max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed", "logprobs", "echo",
                         "stream", "stop", "logit_bias", "depth", "exit_rule", "exit_threshold", "kv_policy", "prompt", "model", "ignore_eos"]
    chat_fields = ["messages", "top_logprobs", "logprobs", "tools", "chat_template_kwargs", "add_generation_prompt", "max_tokens", "n", "stream"]
    cases = [("/v1/completions", f, v) for f in completion_fields for v in weird] + [("/v1/chat/completions", f, v) for f in chat_fields for v in weird]
    rng.shuffle(cases)
    if quick:
        cases = cases[:160]
    for path, field, value in cases:
        base = {"prompt": '"In"', "max_tokens": "2", "temperature": "0"} if path == "/v1/completions" else \
               {"messages": '[{"role": "user", "content": "Hi"}]', "max_tokens": "2", "temperature": "0"}
        base[field] = value
        r = exchange(srv.port, request("POST", path, raw_json(base)), 10)[0]
        A.check(g, f"{path} {field}={value[:40]}", srv, r, "2xx4xx", 10)
    # messages and logit_bias shapes, typed wrongly inside
    odd = ['[{"role": 5, "content": "x"}]', '[{"role": "user"}]', '[{"role": "user", "content": [{"type": 5}]}]',
           '[{"role": "user", "content": [{"type": "text", "text": 7}]}]', '[{"role": "user", "content": [{"type": "image_url"}]}]',
           '[{"role": "user", "content": null, "tool_calls": 5}]', '[{"role": "system", "content": "a"}, {"role": "system", "content": "b"}]',
           '["x"]', '[[]]', '[{"role": "user", "content": {"a": 1}}]']
    for m in odd:
        r = exchange(srv.port, request("POST", "/v1/chat/completions", raw_json({"messages": m, "max_tokens": "1"})), 10)[0]
        A.check(g, f"chat messages={m[:50]}", srv, r, "2xx4xx", 10)
    for lb in ['{"-1": 1}', '{"99999999999999999999": 1}', '{"1": NaN}', '{"1": 1e400}', '{"1": "x"}', '{"a": 1}', '{"1 ": 1}', '{"+1": 1}', "[1]"]:
        r = exchange(srv.port, request("POST", "/v1/completions", raw_json({"prompt": '"x"', "max_tokens": "1", "logit_bias": lb})), 10)[0]
        A.check(g, f"logit_bias={lb}", srv, r, "2xx4xx", 10)
    # negative log-probability counts (wrapped into a 500 once), and many prompts (as many jobs once)
    for body in [b'{"prompt": "x", "logprobs": -1}', b'{"prompt": "x", "logprobs": -1000000000000000}',
                 b'{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": -5}',
                 b'{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": -1000000000000}']:
        path = "/v1/chat/completions" if b"messages" in body else "/v1/completions"
        r = exchange(srv.port, request("POST", path, body), 10)[0]
        A.check(g, f"{body[:70]!r}", srv, r, {400}, 10)
    many = b'{"prompt": [' + b",".join([b'"a"'] * 100000) + b'], "max_tokens": 1}'
    r = exchange(srv.port, request("POST", "/v1/completions", many), 20)[0]
    A.check(g, "100,000 prompts in one request", srv, r, "4xx", 20)
    for path, body in [("/tokenize", b'{"prompt": 5}'), ("/tokenize", b'{"prompt": "x", "with_pieces": "yes"}'), ("/detokenize", b'{"tokens": [-1]}'),
                       ("/detokenize", b'{"tokens": "x"}'), ("/detokenize", b'{"tokens": [1e300]}'), ("/apply-template", b'{"messages": 5}'),
                       ("/v1/completions", b"[1, 2]"), ("/v1/completions", b"{"), ("/v1/completions", b"\xff\xfe"), ("/v1/completions", b'{"prompt": "\xff"}')]:
        r = exchange(srv.port, request("POST", path, body), 10)[0]
        A.check(g, f"{path} {body[:40]!r}", srv, r, "2xx4xx", 10)
    A.health_after(g, srv)


def group_bodies(A, srv, max_body, quick, timeout_s):
    g = "bodies"
    ok_body = json.dumps({"prompt": "a" * (max_body - 40)}).encode()
    for n, allowed in [(0, "4xx"), (max_body - 1, "2xx4xx"), (max_body, "2xx4xx"), (max_body + 1, {413}), (10 * max_body, {413})]:
        body = (b'{"prompt": "' + b"a" * max(0, n - 14) + b'"}')[:n] if n else b""
        r = exchange(srv.port, request("POST", "/tokenize", body), 10)[0]
        A.check(g, f"Content-Length body of {n} bytes", srv, r, allowed, 10)
    for piece, allowed, what in [(100, {200}, "chunked within the limit"), (1, {200}, "chunked one byte a chunk, within the limit")]:
        r = exchange(srv.port, request("POST", "/tokenize", chunked(ok_body, piece), {"Transfer-Encoding": "chunked"}), 20)[0]
        A.check(g, what, srv, r, allowed, 20)
    big = json.dumps({"prompt": "a" * (8 * max_body)}).encode()
    for piece in (1000, 65536):
        r = exchange(srv.port, request("POST", "/tokenize", chunked(big, piece), {"Transfer-Encoding": "chunked"}), 10)[0]
        A.check(g, f"chunked {len(big)} bytes past the limit, chunks of {piece}", srv, r, {413}, 10)
    # a chunked body that never ends (sent for 3 s): refused as it passes the limit
    s = connect(srv.port)
    s.sendall(request("POST", "/tokenize", b"", {"Transfer-Encoding": "chunked"}))
    t0, status, got = time.time(), 0, b""
    try:  # (the answer may come in several pieces: its head, then its body)
        while time.time() - t0 < 3 and not status:
            s.sendall(b"10000\r\n" + b"a" * 65536 + b"\r\n")
            s.settimeout(0.001)
            try:
                d = s.recv(4096)
                got += d
                status = parse_response(got)[0] if parse_response(got) else (-1 if not d else 0)
            except socket.timeout:
                pass
    except OSError:
        pass
    while not status:
        s.settimeout(2)
        try:
            d = s.recv(4096)
        except OSError:
            break
        if not d:
            break
        got += d
        status = parse_response(got)[0] if parse_response(got) else 0
    s.close()
    A.check(g, "an endless chunked body", srv, Exchange(status, seconds=time.time() - t0), {413}, 5)
    for frame, what in [(b"zz\r\nabc\r\n0\r\n\r\n", "chunk size not hex"), (b"-5\r\nabc\r\n0\r\n\r\n", "negative chunk size"),
                        (b"ffffffffffffffff\r\nabc", "chunk size 2^64-1"), (b"3\r\nabcXX0\r\n\r\n", "chunk without its CRLF"),
                        (b"3;" + b"e" * 100000 + b"\r\nabc\r\n0\r\n\r\n", "a 100 KB chunk extension")]:
        r = exchange(srv.port, request("POST", "/tokenize", frame, {"Transfer-Encoding": "chunked"}), 5)[0]
        # a malformed frame: any 4xx, or the connection closed at once (nothing more to say)
        if r.status == 0 and r.closed and r.seconds < 5:
            A.record(g, what)
        else:
            A.check(g, what, srv, r, "4xx", 5)
    # gzip bombs: a few hundred KB that inflate to far more than --max-body
    bomb_mb = 100 if quick else 1000
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = b"".join(z.compress(b"\0" * (1 << 20)) for _ in range(bomb_mb)) + z.flush()
    for ce in ("gzip", "deflate", "br"):
        r = exchange(srv.port, request("POST", "/tokenize", bomb, {"Content-Encoding": ce}), 15)[0]
        A.check(g, f"a {ce} bomb ({len(bomb) // 1024} KB, {bomb_mb} MB inflated)", srv, r, {413, 415}, 15)
    r = exchange(srv.port, request("POST", "/tokenize", chunked(bomb, 4096), {"Content-Encoding": "gzip", "Transfer-Encoding": "chunked"}), 15)[0]
    A.check(g, "a gzip bomb, chunked", srv, r, {413, 415}, 15)
    # Content-Lengths that cannot be right: answered at once
    for cl, allowed in [("-1", {400}), ("abc", {400}), ("1e3", {400}), ("0x10", {400}), ("99999999999", {413}),
                        ("99999999999999999999999999999999", {413}), ("18446744073709551616", {413}), (str(max_body + 1), {413})]:
        r = exchange(srv.port, request("POST", "/tokenize", b"{}", {"Content-Length": cl}), 10)[0]
        A.check(g, f"Content-Length: {cl}", srv, r, allowed, 2)
    r = exchange(srv.port, request("POST", "/tokenize", b"{}", {"Content-Length": "2\r\nContent-Length: 5"}), 5)[0]
    A.check(g, "two Content-Lengths that differ", srv, r, {400}, 2)
    r = exchange(srv.port, request("POST", "/tokenize", b"{}", {"Content-Length": "2", "Transfer-Encoding": "chunked"}), 5)[0]
    A.check(g, "Content-Length and chunked", srv, r, {400}, 2)
    r = exchange(srv.port, request("POST", "/tokenize", None, length=False), 5)[0]
    A.check(g, "a POST without a length", srv, r, {411}, 2)
    r = exchange(srv.port, request("POST", "/tokenize", b'{"prompt": "x"}', {"Content-Length": "100"}), timeout_s + 5)[0]
    A.check(g, "a body shorter than its Content-Length (answered at the deadline)", srv, r, "4xx", timeout_s + 2)
    flood = "GET /health HTTP/1.1\r\n" + "".join(f"X-Pad-{i}: {'p' * 100}\r\n" for i in range(3000)) + "\r\n"
    r = exchange(srv.port, flood.encode(), 5)[0]
    A.check(g, "300 KB of headers", srv, r, {431}, 5)
    r = exchange(srv.port, b"GET /" + b"a" * 200000 + b" HTTP/1.1\r\n\r\n", 5)[0]
    if r.status == 0 and r.closed:
        A.record(g, "a 200 KB request line")
    else:
        A.check(g, "a 200 KB request line", srv, r, "4xx", 5)
    rss = srv.peak_rss_mb()
    A.record(g, f"peak memory {rss:.0f} MB", None if 0 < rss < 512 else f"the server's peak memory is {rss:.0f} MB (bound 512)")
    A.health_after(g, srv)


def group_encodings(A, srv):
    g = "encodings"
    body = b'{"prompt": "abc"}'
    for ce, allowed in [("gzip", {415}), ("x-gzip", {415}), ("deflate", {415}), ("br", {415}), ("compress", {415}), ("zstd", {415}),
                        ("GZIP", {415}), ("gzip, gzip", {415}), ("identity", {200}), ("", "2xx4xx")]:
        r = exchange(srv.port, request("POST", "/tokenize", body, {"Content-Encoding": ce}), 5)[0]
        A.check(g, f"Content-Encoding: {ce!r}", srv, r, allowed, 2)
    for te, allowed in [("gzip", {400, 501}), ("gzip, chunked", {400, 501}), ("chunked, gzip", {400, 501}), ("identity", {400, 501}),
                        ("Chunked", {200}), ("xchunked", {400, 501})]:
        r = exchange(srv.port, request("POST", "/tokenize", chunked(body, 5), {"Transfer-Encoding": te}), 5)[0]
        A.check(g, f"Transfer-Encoding: {te}", srv, r, allowed, 2)
    for ct, payload, allowed in [("multipart/form-data; boundary=xx", b"--xx\r\n", "4xx"), ("multipart/form-data", b"--xx\r\n", "4xx"),
                                 ("application/x-www-form-urlencoded", body, {200}), ("text/plain", body, {200}),
                                 ("application/x-www-form-urlencoded", json.dumps({"prompt": "a" * 20000}).encode(), {200})]:
        r = exchange(srv.port, request("POST", "/tokenize", payload, {"Content-Type": ct}), 5)[0]
        A.check(g, f"Content-Type: {ct} ({len(payload)} bytes)", srv, r, allowed, 2)
    r = exchange(srv.port, request("GET", "/health", chunked(b"x" * 100000, 1000), {"Transfer-Encoding": "chunked"}), 5)[0]
    A.check(g, "a chunked body on GET", srv, r, "4xx", 2)
    r = exchange(srv.port, request("POST", "/nope", chunked(b"x" * 100000, 1000), {"Transfer-Encoding": "chunked"}), 5)[0]
    A.check(g, "a chunked body to an unknown route", srv, r, {404}, 2)
    r = exchange(srv.port, request("POST", "/tokenize", body, {"Expect": "100-continue", "Content-Encoding": "gzip"}), 5)[0]
    A.check(g, "Expect: 100-continue with gzip", srv, r, {415}, 2)
    A.health_after(g, srv)


def group_slow(A, srv, slow_n, idle_n, timeout_s, cap):
    g = "slow"
    req = request("POST", "/tokenize", b'{"prompt": "abcdef"}')
    conns, stop = [], threading.Event()
    for _ in range(slow_n):
        try:
            conns.append(connect(srv.port))
        except OSError:
            break
    idle = []
    for _ in range(idle_n):
        try:
            idle.append(connect(srv.port))
        except OSError:
            break
    t0 = time.time()
    closed_at = [None] * len(conns)
    status = [0] * len(conns)
    got = [b""] * len(conns)

    def drip():  # one byte a second on each slow connection
        for k in range(len(req)):
            for i, s in enumerate(conns):
                if closed_at[i] is not None:
                    continue
                try:
                    s.send(req[k:k + 1])
                except OSError:
                    closed_at[i] = time.time() - t0
            for _ in range(50):
                if stop.is_set():
                    return
                time.sleep(0.02)
                for i, s in enumerate(conns):
                    if closed_at[i] is not None:
                        continue
                    s.settimeout(0.0)
                    try:
                        d = s.recv(65536)
                        if not d:
                            closed_at[i] = time.time() - t0
                        got[i] += d
                    except (BlockingIOError, socket.timeout):
                        pass
                    except OSError:
                        closed_at[i] = time.time() - t0

    th = threading.Thread(target=drip, daemon=True)
    th.start()
    time.sleep(1.5)
    t1 = time.time()
    ok = srv.health(2.0, source=OTHER)
    A.record(g, f"/health from another address beside {len(conns)} slow and {len(idle)} idle connections",
             None if ok else f"/health did not answer in 2 s ({time.time() - t1:.1f} s)")
    bound = timeout_s + 2.5
    while time.time() - t0 < bound and any(c is None for c in closed_at):
        time.sleep(0.1)
    stop.set()
    th.join()
    for i in range(len(conns)):
        r = parse_response(got[i])
        status[i] = r[0] if r else 0
    refused = sum(1 for st in status if st == 429)
    for i in range(len(conns)):
        if status[i] == 429:
            continue
        why = None
        if closed_at[i] is None:
            why = f"still open after {bound:.1f} s: a slow request is not cut at its deadline ({timeout_s} s)"
        A.record(g, f"slow connection {i}: cut at {closed_at[i] if closed_at[i] is None else round(closed_at[i], 1)} s, status {status[i]}", why)
    if cap and slow_n > cap:
        A.record(g, f"connections past the cap of {cap} from one address refused ({refused})",
                 None if refused == len(conns) - cap else f"{refused} refused, not {len(conns) - cap}")
    for s in conns + idle:
        s.close()
    # a slow body: the head at once, then a byte a second
    s = connect(srv.port)
    s.sendall(request("POST", "/tokenize", None, {"Content-Length": "40"}))
    t0, r = time.time(), None
    buf = b""
    while time.time() - t0 < timeout_s + 3 and r is None:
        try:
            s.send(b"a")
        except OSError:
            break
        s.settimeout(1.0)
        try:
            d = s.recv(65536)
            if not d:
                break
            buf += d
            r = parse_response(buf)
        except socket.timeout:
            pass
        except OSError:
            break
    took = time.time() - t0
    s.close()
    A.record(g, f"a body a byte a second: answered {r[0] if r else 'nothing'} at {took:.1f} s",
             None if took < timeout_s + 2.5 else f"not cut by its deadline ({timeout_s} s)")
    A.health_after(g, srv)


def group_pipelining(A, srv):
    g = "pipelining"
    body = b'{"prompt": "abc"}'
    sets = [
        ("two GETs", request("GET", "/health", None) + request("GET", "/v1/models", None), [b'"ok"', b'"list"']),
        ("GET, POST, GET", request("GET", "/health", None) + request("POST", "/tokenize", body) + request("GET", "/v1/models", None),
         [b'"ok"', b'"tokens"', b'"list"']),
        ("three POSTs", request("POST", "/tokenize", body) * 3, [b'"tokens"'] * 3),
        ("a completion, then /health", request("POST", "/v1/completions", b'{"prompt": "In", "max_tokens": 3, "temperature": 0}') +
         request("GET", "/health", None), [b'"choices"', b'"ok"']),
    ]
    for what, data, want in sets:
        rs = exchange(srv.port, data, 10, responses=len(want))
        ok = len(rs) == len(want) and all(r.status == 200 and w in r.body for r, w in zip(rs, want))
        A.record(g, what, None if ok else f"answers: {[(r.status, r.body[:60]) for r in rs]}")
    # after a refused body the connection closes: what was pipelined behind it is not read as a request
    rs = exchange(srv.port, request("POST", "/tokenize", b"x", {"Content-Encoding": "gzip"}) + request("GET", "/health", None), 5, responses=2)
    A.record(g, "a refused body, then a request", None if rs[0].status == 415 and len(rs) == 1 and rs[0].closed else
             f"answers: {[(r.status, r.closed) for r in rs]}")
    A.health_after(g, srv)


def group_disconnects(A, srv):
    g = "disconnects"
    before = srv.metric("looplm_requests_cancelled_total")
    long_req = b'{"prompt": "In", "max_tokens": 250, "depth": 256, "temperature": 0}'  # seconds of work for one slot
    for what, body in [("a whole request", long_req), ("a stream", long_req[:-1] + b', "stream": true}')]:
        s = connect(srv.port)
        s.sendall(request("POST", "/v1/completions", body))
        t0 = time.time()
        while time.time() - t0 < 3 and srv.metric("looplm_requests_running") < 1:
            time.sleep(0.01)
        time.sleep(0.1)
        s.close()
        t0 = time.time()
        while time.time() - t0 < 3 and srv.metric("looplm_requests_cancelled_total") <= before:
            time.sleep(0.05)
        now = srv.metric("looplm_requests_cancelled_total")
        A.record(g, f"{what} whose client leaves is cancelled ({time.time() - t0:.1f} s)",
                 None if now > before else "not cancelled within 3 s (its slot stays busy until its last token)")
        before = now
    for what, data in [("mid-headers", b"POST /tokenize HTTP/1.1\r\nContent-Le"), ("mid-body", request("POST", "/tokenize", None, {"Content-Length": "100"}) + b'{"pro'),
                       ("mid-chunk", request("POST", "/tokenize", b"", {"Transfer-Encoding": "chunked"}) + b"100\r\nabc")]:
        for rst in (False, True):
            s = connect(srv.port)
            s.sendall(data)
            if rst:  # a reset rather than a close
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            A.record(g, f"a client that leaves {what}" + (" (reset)" if rst else ""), None if srv.alive() else "the server exited")
    A.health_after(g, srv)


def group_padding(A, srv, pad_id, real_id):
    g = "padding"
    cases = [("/detokenize", {"tokens": [real_id, pad_id]}, {400}), ("/detokenize", {"tokens": [pad_id]}, {400}),
             ("/v1/completions", {"prompt": [real_id, pad_id], "max_tokens": 0, "echo": True, "logprobs": 1}, {400}),
             ("/v1/completions", {"prompt": [real_id, pad_id], "max_tokens": 0, "echo": True}, {400}),
             ("/v1/completions", {"prompt": "a", "max_tokens": 1, "logit_bias": {str(pad_id): 100}}, {400}),
             ("/v1/completions", {"prompt": "a", "max_tokens": 1, "temperature": 0, "logit_bias": {str(pad_id): -100}}, "2xx4xx"),
             ("/v1/completions", {"prompt": [real_id, pad_id], "max_tokens": 0}, {400}),
             # sampling at a high temperature from a model whose padding rows are as likely as
             # any other: a padding id must never be chosen (it has no text to answer with)
             ("/v1/completions", {"prompt": "a", "max_tokens": 64, "temperature": 2, "seed": 3}, {200}),
             ("/v1/completions", {"prompt": "a", "max_tokens": 64, "temperature": 2, "seed": 4, "stream": True}, {200}),
             ("/detokenize", {"tokens": [real_id]}, {200}), ("/tokenize", {"prompt": "abc", "with_pieces": True}, {200})]
    for path, body, allowed in cases:
        r = exchange(srv.port, request("POST", path, json.dumps(body).encode()), 10)[0]
        A.check(g, f"{path} {json.dumps(body)[:70]}", srv, r, allowed, 10)
    A.health_after(g, srv)


# ---------------------------------------------------------------- setup
def tiny_model(binary, tmp):
    text = "".join(f"In the beginning God created the heaven and the earth. {i % 7}\n" for i in range(200))
    with open(os.path.join(tmp, "text.txt"), "w") as f:
        f.write(text + "".join(chr(c) for c in range(32, 127)) + "\n")
    out = os.path.join(tmp, "run")
    p = subprocess.run([binary, "train", "--preset", "looped", "--set", "steps=0", "--set", "d_model=48", "--set", "n_heads=4",
                        "--set", "context=256", "--set", "init_std=0.2", "--set", "tokenizer=char", "--data", os.path.join(tmp, "text.txt"),
                        "--out", out, "--quiet", "-t", "1"], capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit("cannot make the model:\n" + p.stdout + p.stderr)
    return out


def padded_model(run, tmp, extra=40):
    """The model's file with its vocabulary padded past its tokenizer's: zero rows appended."""
    path = os.path.join(run, "model.safetensors")
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__")
    config = json.loads(meta["config"])
    V = config["vocab_size"]
    dims = {config.get("d_model"), config.get("context"), config.get("d_ff"), config.get("n_heads")}
    if V in dims:
        sys.exit(f"padded model: vocab_size {V} equals another dimension")
    config["vocab_size"] = V + extra
    meta["config"] = json.dumps(config)
    body, new_header, at = b"", {"__metadata__": meta}, 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        raw = data[8 + n + t["data_offsets"][0]:8 + n + t["data_offsets"][1]]
        shape = list(t["shape"])
        if shape and shape[0] == V:
            raw += b"\0" * (len(raw) // V * extra)
            shape[0] = V + extra
        new_header[name] = {"dtype": t["dtype"], "shape": shape, "data_offsets": [at, at + len(raw)]}
        body += raw
        at += len(raw)
    h = json.dumps(new_header).encode()
    h += b" " * (-len(h) % 8)
    out = os.path.join(tmp, "padded")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + body)
    return out, V


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("LOOPLM_BIN") or os.path.join(ROOT, "build", "looplm"))
    ap.add_argument("--quick", action="store_true", help="CI: under a minute")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    binary = os.path.abspath(a.bin)
    helptext = subprocess.run([binary, "serve", "--help"], capture_output=True, text=True).stdout
    has = lambda opt: opt in helptext  # noqa: E731 (an older build lacks the newer options)
    timeout_s, cap, max_body = 3, 4, 65536
    A = Attack()
    tmp = tempfile.mkdtemp(prefix="looplm_attack_")
    t0 = time.time()
    try:
        run = tiny_model(binary, tmp)
        extra = ["--max-body", str(max_body)] + (["--request-timeout", str(timeout_s)] if has("--request-timeout") else [])
        srv = Server(binary, run, extra, os.path.join(tmp, "serve.log"))
        try:
            group_fields(A, srv, rng, a.quick)
            group_bodies(A, srv, max_body, a.quick, timeout_s)
            group_encodings(A, srv)
            group_pipelining(A, srv)
            group_disconnects(A, srv)
        finally:
            srv.stop()
        # slow connections against a small pool (--parallel 1 --queue 0: 8 connection threads)
        extra = ["--parallel", "1", "--queue", "0"]
        extra += ["--request-timeout", str(timeout_s)] if has("--request-timeout") else []
        extra += ["--max-conns-per-client", str(cap)] if has("--max-conns-per-client") else []
        srv = Server(binary, run, extra, os.path.join(tmp, "serve_slow.log"))
        try:
            group_slow(A, srv, 12 if a.quick else 80, 4 if a.quick else 20, timeout_s, cap if has("--max-conns-per-client") else 0)
        finally:
            srv.stop()
        padded, V = padded_model(run, tmp)
        srv = Server(binary, padded, [], os.path.join(tmp, "serve_padded.log"))
        try:
            group_padding(A, srv, V + 5, 40)
        finally:
            srv.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    elapsed = time.time() - t0
    if a.json:
        print(json.dumps({"stats": A.stats, "failures": A.failures, "seconds": elapsed}))
    else:
        print(f"serve attack: {a.bin}{' --quick' if a.quick else ''}, seed {a.seed}, {elapsed:.0f} s\n")
        print("| group | cases | passed | failed |")
        print("|---|---|---|---|")
        tot = [0, 0, 0]
        for group, st in A.stats.items():
            print(f"| {group} | {st[0]} | {st[1]} | {st[2]} |")
            tot = [x + y for x, y in zip(tot, st)]
        print(f"| **all** | {tot[0]} | {tot[1]} | {tot[2]} |")
        if A.failures:
            print("\nfailures (the first 25):")
            for group, case, why in A.failures[:25]:
                print(f"  {group}: {case}: {why}")
    sys.exit(1 if A.failures else 0)


if __name__ == "__main__":
    main()
