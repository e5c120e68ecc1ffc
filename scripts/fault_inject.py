#!/usr/bin/env python3
"""Fault injection against the looplm binary, as a hostile user and a flaky machine would try it.

Each case runs a command and is classified by what the process did:
  ok           exit 0 (the input was acceptable, e.g. a mutation of an unused metadata key)
  clean error  exit 1 or 2 with a "looplm <cmd>: error: ..." line, no library exception prefix
               ("[json.exception"), no sanitizer report, a message under 4 KB
  crash        killed by a signal, any other exit code, a sanitizer report, or an unclean message
  hang         still running after the timeout
  divergence   (kills, full disks) a resumed run whose final weights differ from a straight run's,
               or a resume that was neither exact nor refused

Areas: mutated checkpoints (fp32 and quantized) through eval, generate, info and quantize;
mutated configs through info and train --print-config; odd data files through eval; SIGKILL at
random moments of training, then --resume; full disks (a small tmpfs in a private mount
namespace, where the machine allows it) then --resume on a larger one; checkpoints overwritten,
read-only or deleted under a run.

  scripts/fault_inject.py [--bin build/looplm] [--cases N] [--seed S] [--json]
  (use the ASan + UBSan build, build-sanitize/looplm, to catch memory errors that do not crash)

Prints a markdown table: area, cases, ok, clean errors, crashes, hangs, divergences; and the
first few crashing or diverging cases in full. Exit status 1 if any case crashed, hung or diverged.
"""
import argparse
import json
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Runner:
    def __init__(self, binary, timeout):
        self.bin = binary
        self.timeout = timeout
        self.stats = {}  # area -> {kind: count}
        self.bad = []  # (area, kind, description, output)

    def classify(self, proc_rc, out, timed_out):
        if timed_out:
            return "hang"
        if "ERROR: AddressSanitizer" in out or "runtime error:" in out or "ERROR: LeakSanitizer" in out:
            return "crash"
        if proc_rc == 0:
            return "ok"
        if proc_rc in (1, 2):
            long_line = max((len(line) for line in out.split("\n")), default=0) > 2000
            if "[json.exception" in out or long_line or " error: " not in out:
                return "crash"  # an unclean message counts against us
            return "clean error"
        return "crash"

    def run(self, args, env=None, timeout=None, stdin=None):
        e = dict(os.environ)
        e.setdefault("ASAN_OPTIONS", "detect_leaks=0")
        e.update(env or {})
        try:
            p = subprocess.run([self.bin] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e,
                               timeout=timeout or self.timeout, stdin=stdin or subprocess.DEVNULL)
            return p.returncode, p.stdout.decode("utf-8", "replace"), False
        except subprocess.TimeoutExpired as x:
            return None, (x.output or b"").decode("utf-8", "replace"), True

    def record(self, area, kind, what, out=""):
        self.stats.setdefault(area, {}).setdefault(kind, 0)
        self.stats[area][kind] += 1
        if kind in ("crash", "hang", "divergence"):
            self.bad.append((area, kind, what, out[-3000:]))

    def case(self, area, args, what, **kw):
        rc, out, timed_out = self.run(args, **kw)
        kind = self.classify(rc, out, timed_out)
        self.record(area, kind, what + f" (exit {rc})", out)
        return rc, out


# ------------------------------------------------------------------------------------------- files

def read_st(path):
    b = open(path, "rb").read()
    (n,) = struct.unpack("<Q", b[:8])
    return b[8:8 + n].decode("utf-8"), b[8 + n:]


def write_st(path, header_text, data):
    h = header_text.encode("utf-8", "surrogatepass") if isinstance(header_text, str) else header_text
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + data)


def write(path, data):
    with open(path, "wb" if isinstance(data, bytes) else "w") as f:
        f.write(data)


NASTY_VALUES = [None, True, -1, 0, 1, 2**31, 2**63 - 1, 2**64 - 1, -(2**63), 1e308, -1e308, 0.5, "", "x" * 5000,
                "F32", "BF16", "bf16", "q4_0", "q8_0", "q4_k", "tiles16", "rows4", [], {}, [1, 2], [[1]],
                [-1], [2**62, 2**62], {"a": 1}, "\u0000", "\udcff"]


def mutate_json_value(rng, v, depth=0):
    """A random mutation somewhere inside a JSON value."""
    if isinstance(v, dict) and v and rng.random() < 0.8:
        k = rng.choice(list(v))
        r = rng.random()
        if r < 0.15:
            del v[k]
        elif r < 0.25:
            v[k + "_x"] = rng.choice(NASTY_VALUES)
        else:
            v[k] = mutate_json_value(rng, v[k], depth + 1)
        return v
    if isinstance(v, list) and v and rng.random() < 0.8:
        i = rng.randrange(len(v))
        r = rng.random()
        if r < 0.2:
            v.pop(i)
        elif r < 0.3:
            v.append(rng.choice(NASTY_VALUES))
        else:
            v[i] = mutate_json_value(rng, v[i], depth + 1)
        return v
    if isinstance(v, str) and rng.random() < 0.5:
        try:  # a string holding JSON (the metadata's config and packed list): mutate inside it
            inner = json.loads(v)
            return json.dumps(mutate_json_value(rng, inner, depth + 1))
        except (ValueError, RecursionError):
            pass
    if isinstance(v, int) and not isinstance(v, bool) and rng.random() < 0.5:
        return rng.choice([v + 1, v - 1, -v, v * 2, v * 1000003, 2**63 - 1 - v])
    return rng.choice(NASTY_VALUES)


def mutate_checkpoint(rng, header, data):
    """Returns (header bytes, data bytes, what) for one random mutation."""
    kind = rng.random()
    hb = header.encode()
    if kind < 0.25:  # bytes flipped in the header text
        b = bytearray(hb)
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(b))
            b[i] = rng.choice([ord(c) for c in '{}[]",:0123456789-e.'] + [rng.randrange(256)])
        return bytes(b), data, "header bytes flipped"
    if kind < 0.55:  # a value inside the parsed header changed
        j = json.loads(header)
        j = mutate_json_value(rng, j)
        return json.dumps(j).encode("utf-8", "surrogatepass"), data, "header value mutated"
    if kind < 0.65:  # truncated anywhere
        whole = struct.pack("<Q", len(hb)) + hb + data
        cut = rng.randrange(len(whole))
        return None, whole[:cut], f"truncated at {cut}"
    if kind < 0.75:  # data bytes flipped (NaN, Inf, garbage codes)
        d = bytearray(data)
        for _ in range(rng.randint(1, 16)):
            i = rng.randrange(len(d))
            d[i] = rng.randrange(256)
        return hb, bytes(d), "data bytes flipped"
    if kind < 0.82:  # deep nesting or a key twice
        if rng.random() < 0.5:
            deep = "[" * 100000 + "]" * 100000
            return (header[:-1] + ',"deep":' + deep + "}").encode(), data, "deep nesting"
        at = header.index("{") + 1
        first_key = header[at:header.index(":", at)]
        return (header[:at] + first_key + ':{},' + header[at:]).encode(), data, "duplicate key"
    if kind < 0.9:  # the header length field lies
        whole = struct.pack("<Q", rng.choice([0, 1, len(hb) - 1, len(hb) + 1, 2**63, 2**64 - 1, 100_000_001])) + hb + data
        return None, whole, "header length lies"
    # appended or inserted garbage
    extra = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return hb, data + extra, "garbage appended"


# ------------------------------------------------------------------------------------------- areas

def area_checkpoints(R, tmp, rng, n):
    base = os.path.join(tmp, "base")
    files = {"fp32": os.path.join(base, "model.safetensors")}
    for fmt in ("q8_0", "q4_k"):
        q = os.path.join(tmp, f"model.{fmt}.safetensors")
        R.run(["quantize", "--checkpoint", files["fp32"], "--format", fmt, "--out", q])
        files[fmt] = q
    val = os.path.join(tmp, "val.txt")
    cmds = [
        lambda f: ["eval", "--checkpoint", f, "--data", val],
        lambda f: ["generate", "--checkpoint", f, "-p", "And God", "-n", "8"],
        lambda f: ["info", "--checkpoint", f, "--no-measure"],
        lambda f: ["quantize", "--checkpoint", f, "--format", "q4_0", "--out", os.path.join(tmp, "q.out.safetensors")],
    ]
    for i in range(n):
        name = rng.choice(list(files))
        header, data = read_st(files[name])
        h, d, what = mutate_checkpoint(rng, header, data)
        path = os.path.join(tmp, "mut.safetensors")
        if h is None:
            write(path, d)
        else:
            write_st(path, h, d)
        cmd = cmds[i % len(cmds)]
        R.case("checkpoints (eval, generate, info, quantize)", cmd(path), f"{name}: {what}, {cmd(path)[0]}")


def area_configs(R, tmp, rng, n):
    presets = sorted(f[:-5] for f in os.listdir(os.path.join(ROOT, "configs")) if f.endswith(".json"))
    for i in range(n):
        j = json.load(open(os.path.join(ROOT, "configs", rng.choice(presets) + ".json")))
        what = "mutated"
        r = rng.random()
        if r < 0.1:
            text = '{"R": ' + "[" * 80000 + "]" * 80000 + "}"
            what = "deep"
        elif r < 0.15:
            text = json.dumps(j)[:-1] + ', "R": 3}'
            what = "duplicate key"
        elif r < 0.2:
            text = json.dumps(j)[: rng.randrange(1, len(json.dumps(j)))]
            what = "truncated"
        else:
            for _ in range(rng.randint(1, 3)):
                j = mutate_json_value(rng, j)
            text = json.dumps(j)
        path = os.path.join(tmp, "cfg.json")
        write(path, text)
        if i % 3 == 0:
            R.case("configs (info, train --print-config, --set)", ["info", "--config", path, "--no-measure"], what)
        elif i % 3 == 1:
            R.case("configs (info, train --print-config, --set)", ["train", "--config", path, "--print-config"], what)
        else:
            key = rng.choice(["R", "d_model", "n_heads", "lr", "steps", "block", "loop_rule", "tokenizer_chars", "vocab_size",
                              "context", "x" * 300, "", "=", "bptt", "hyper_n"])
            val = rng.choice(["0", "-1", "1e400", "nan", "inf", "[1]", "{}", "\"s\"", "x" * 10000, "9" * 40, "2.5",
                              "[" * 50000, "true", "null"])
            R.case("configs (info, train --print-config, --set)", ["info", "--set", f"{key}={val}", "--no-measure"],
                   f"--set {key[:20]}={val[:20]}")


def area_flags(R, tmp, rng, n):
    ck = os.path.join(tmp, "base")
    val = os.path.join(tmp, "val.txt")
    odd = ["", "-1", "0", "1e999", "nan", "x" * 20000, "\x01\x02", "--", "-", "9" * 30, "2147483648", "0x10", " 3",
           "/dev/null", "/nonexistent/file", tmp, "é" * 3000]
    flag_sets = {
        "eval": ["--depth", "--weights", "--exit-rule", "--exit-threshold", "--kv-policy", "--kv-cache", "--data",
                 "--threads", "--progress", "--batch"],
        "generate": ["-n", "--temperature", "--top-k", "--top-p", "--seed", "--depth", "--speculative", "--draft-depth",
                     "--weights", "--kv-cache", "--batch", "--num-samples", "--prompts", "--prompt-file", "--exit-threshold"],
        "info": ["--preset", "--config", "--checkpoint", "--set"],
        "quantize": ["--format", "--method", "--calib", "--calib-tokens", "--calib-steps", "--out"],
        "train": ["--steps", "--stop-after", "--sample-len", "--preset", "--config", "--init-from", "--out"],
        "data": ["--input", "--tokenizer", "--out", "--alphabet"],
        "bench": ["--preset", "-t", "-r", "-p", "-n", "--gen-batch", "--weights", "--kv-cache", "--checkpoint"],
    }
    base = {"eval": ["--checkpoint", ck, "--data", val], "generate": ["--checkpoint", ck, "-p", "hi", "-n", "2"],
            "info": ["--no-measure"], "quantize": ["--checkpoint", ck, "--format", "q8_0", "--out", os.path.join(tmp, "fq.safetensors")],
            "train": ["--preset", "looped", "--print-config"], "data": ["--input", val, "--out", os.path.join(tmp, "fd.bin")],
            "bench": ["--preset", "bench-tiny", "-r", "1", "-p", "4", "-n", "4", "--json"]}
    for i in range(n):
        cmd = rng.choice(sorted(flag_sets))
        args = list(base[cmd])
        for _ in range(rng.randint(1, 2)):
            args += [rng.choice(flag_sets[cmd]), rng.choice(odd)]
        if rng.random() < 0.1:
            args.append(rng.choice(["--unknown", "-zz", "x" * 5000]))
        args = [a.replace("\x00", "") for a in args]
        R.case("flags (every command)", [cmd] + args, " ".join(a[:20] for a in [cmd] + args)[:200], timeout=120)


def area_data(R, tmp, rng, n):
    ck = os.path.join(tmp, "base")
    good = open(os.path.join(tmp, "val.txt"), "rb").read()
    for i in range(n):
        r = rng.random()
        ext = rng.choice([".txt", ".jsonl", ".bin"])
        path = os.path.join(tmp, "data" + ext)
        if os.path.lexists(path):
            os.remove(path)
        env = None
        if r < 0.1:
            write(path, b"")
            what = "empty"
        elif r < 0.25:
            write(path, bytes(rng.randrange(256) for _ in range(rng.randint(1, 5000))))
            what = "random bytes"
        elif r < 0.4:  # an llm.c shard header that lies
            hdr = [20240520, rng.choice([1, 2, 3, -1]), rng.choice([0, 5, 10**9, -5, 2**31 - 1])] + [0] * 253
            body = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
            write(path, struct.pack("<256i", *hdr) + body)
            what = "lying shard header"
        elif r < 0.55:
            lines = [rng.choice(['{"text": "hi"}', '{"text": 1}', "[]", '{"txt": "x"}', "{", '{"text": "a", "text": "b"}',
                                 '{"text": ' + "[" * 70000 + "]" * 70000 + "}", '"\\ud800"', "null"])
                     for _ in range(rng.randint(1, 4))]
            write(path, "\n".join(lines))
            what = "odd JSONL"
        elif r < 0.65:
            os.mkdir(path)
            what = "a directory"
        elif r < 0.75:
            os.symlink("/dev/zero", path)
            env = {"LOOPLM_MEMORY_LIMIT": "64M"}
            what = "/dev/zero"
        elif r < 0.85:
            os.mkfifo(path)
            subprocess.Popen(f"cat {os.path.join(tmp, 'val.txt')} > {path}", shell=True)
            what = "a FIFO"
        else:
            b = bytearray(good)
            for _ in range(rng.randint(1, 20)):
                b[rng.randrange(len(b))] = rng.randrange(256)
            write(path, bytes(b))
            what = "text with invalid UTF-8"
        R.case("data files (eval)", ["eval", "--checkpoint", ck, "--data", path], f"{what} as {ext}", env=env)
        if os.path.isdir(path) and not os.path.islink(path):
            os.rmdir(path)


def train_args(tmp, out, steps):
    return ["train", "--preset", "looped", "--set", "d_model=32", "--set", "n_heads=2", "--set", "context=16",
            "--set", "batch_size=4", "--set", "depth_sampler=uniform", "--set", f"data_train={tmp}/train.txt",
            "--set", f"data_val={tmp}/val.txt", "--set", "eval_every=2", "--set", "eval_batches=1",
            "--sample-len", "0", "--quiet", "-t", "1", "--out", out, "--steps", str(steps)]


def final_weights(out):
    try:
        return open(os.path.join(out, "model.safetensors"), "rb").read()
    except OSError:
        return None


def resume_and_compare(R, tmp, area, out, steps, ref, what, prelude=""):
    rc, o, to = R.run(train_args(tmp, out, steps) + ["--resume"])
    kind = R.classify(rc, o, to)
    if kind == "ok" and final_weights(out) != ref:
        kind = "divergence"
    elif kind == "clean error":
        kind = "divergence"  # a resume after a kill or a full disk must succeed: the last checkpoint is whole
    R.record(area, kind, what + f" (resume exit {rc})", prelude + o)


def area_kills(R, tmp, rng, n):
    steps = 8
    ref_dir = os.path.join(tmp, "ref")
    R.run(train_args(tmp, ref_dir, steps))
    ref = final_weights(ref_dir)
    # How long a straight run takes, to spread the kills over it.
    t0 = time.time()
    R.run(train_args(tmp, os.path.join(tmp, "timing"), steps))
    dur = time.time() - t0
    for i in range(n):
        out = os.path.join(tmp, f"kill{i}")
        e = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        p = subprocess.Popen([R.bin] + train_args(tmp, out, steps), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=e)
        at = rng.uniform(0.05, 1.0) * dur
        time.sleep(at)
        p.send_signal(signal.SIGKILL)
        first, _ = p.communicate()
        resume_and_compare(R, tmp, "SIGKILL during training, then --resume", out, steps, ref,
                           f"killed at {at:.2f} s of {dur:.2f}", first.decode("utf-8", "replace"))
        shutil.rmtree(out, ignore_errors=True)


def can_mount(tmp):
    d = os.path.join(tmp, "mnt_probe")
    os.makedirs(d, exist_ok=True)
    return subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs -o size=64k tmpfs {d} && umount {d}"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0


def area_full_disk(R, tmp, rng, n):
    if not can_mount(tmp):
        print("full disk: skipped (cannot mount a tmpfs in a private mount namespace here)", file=sys.stderr)
        return
    steps = 8
    ref = final_weights(os.path.join(tmp, "ref"))
    size = len(ref)
    for i in range(n):
        out = os.path.join(tmp, f"full{i}")
        os.makedirs(out, exist_ok=True)
        room = rng.randint(8 * 1024, 10 * size)
        args = " ".join(train_args(tmp, out, steps))
        script = (f"mount -t tmpfs -o size={room} tmpfs {out} || exit 99\n{R.bin} {args}; echo \"FIRST $?\"\n"
                  f"mount -o remount,size=256m {out}\n{R.bin} {args} --resume; echo \"RESUMED $?\"\n"
                  f"cp {out}/model.safetensors {tmp}/full_final 2>/dev/null\n")
        try:
            p = subprocess.run(["unshare", "-m", "sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               timeout=4 * R.timeout, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
            o = p.stdout.decode("utf-8", "replace")
        except subprocess.TimeoutExpired:
            R.record("full disk (small tmpfs), then --resume on a larger one", "hang", f"{room} bytes")
            continue
        first = o[o.find("FIRST ") + 6:].split("\n")[0] if "FIRST " in o else "?"
        resumed = o[o.find("RESUMED ") + 8:].split("\n")[0] if "RESUMED " in o else "?"
        bad_msg = "[json.exception" in o or "AddressSanitizer" in o or "runtime error:" in o
        if first not in ("0", "1") or resumed != "0" or bad_msg:
            kind = "crash" if first not in ("0", "1") or bad_msg else "divergence"
        else:
            got = open(os.path.join(tmp, "full_final"), "rb").read() if os.path.exists(os.path.join(tmp, "full_final")) else None
            kind = "divergence" if got != ref else ("ok" if first == "0" else "clean error")
        R.record("full disk (small tmpfs), then --resume on a larger one", kind,
                 f"{room} bytes: first exit {first}, resume exit {resumed}", o)
        if os.path.exists(os.path.join(tmp, "full_final")):
            os.remove(os.path.join(tmp, "full_final"))
        shutil.rmtree(out, ignore_errors=True)


def area_run_files(R, tmp, rng, n):
    """Files of a run deleted, overwritten or made unreadable, then --resume: exact or refused."""
    steps = 8
    ref = final_weights(os.path.join(tmp, "ref"))
    for i in range(n):
        out = os.path.join(tmp, f"files{i}")
        R.run(train_args(tmp, out, steps) + ["--stop-after", "4"])
        files = []
        for root, _, names in os.walk(out):
            files += [os.path.join(root, f) for f in names if f != "train.lock"]
        victim = rng.choice(files)
        r = rng.random()
        if r < 0.3:
            os.remove(victim)
            what = "deleted " + os.path.relpath(victim, out)
        elif r < 0.6:
            b = bytearray(open(victim, "rb").read())
            if b:
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
            open(victim, "r+b").write(bytes(b))  # in place (a hard link's other names see it too)
            what = "a bit flipped in " + os.path.relpath(victim, out)
        elif r < 0.8:
            other = rng.choice(files)
            shutil.copyfile(other, victim + ".x")
            os.replace(victim + ".x", victim)
            what = f"{os.path.relpath(victim, out)} replaced by {os.path.relpath(other, out)}"
        else:
            open(victim, "r+b").truncate(rng.randrange(max(1, os.path.getsize(victim))))
            what = "truncated " + os.path.relpath(victim, out)
        rc, o, to = R.run(train_args(tmp, out, steps) + ["--resume"])
        kind = R.classify(rc, o, to)
        if kind == "ok" and final_weights(out) != ref:
            # metrics.jsonl / config.json / model.best are not part of the resumed state: a change to
            # them may be accepted; the weights must still be exact
            kind = "divergence"
        R.record("run files deleted / flipped / replaced, then --resume", kind, what + f" (exit {rc})", o)
        shutil.rmtree(out, ignore_errors=True)


# ------------------------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.environ.get("LOOPLM_BIN") or os.path.join(ROOT, "build", "looplm"))
    ap.add_argument("--cases", type=int, default=400, help="cases per area (kills, disks and run files: a quarter)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    R = Runner(os.path.abspath(a.bin), a.timeout)
    rng = random.Random(a.seed)
    tmp = tempfile.mkdtemp(prefix="looplm_fault_")
    try:
        text = "".join(f"In the beginning God created the heaven and the earth. {i % 7}\n" for i in range(300))
        write(os.path.join(tmp, "train.txt"), text)
        write(os.path.join(tmp, "val.txt"), "And God said, Let there be light: and there was light.\n" * 20)
        rc, o, _ = R.run(train_args(tmp, os.path.join(tmp, "base"), 2))
        if rc != 0:
            sys.exit("cannot train the base model:\n" + o)
        t0 = time.time()
        area_checkpoints(R, tmp, rng, a.cases)
        area_configs(R, tmp, rng, a.cases)
        area_data(R, tmp, rng, a.cases // 2)
        area_flags(R, tmp, rng, a.cases // 2)
        area_kills(R, tmp, rng, max(1, a.cases // 4))
        area_full_disk(R, tmp, rng, max(1, a.cases // 8))
        area_run_files(R, tmp, rng, max(1, a.cases // 4))
        elapsed = time.time() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kinds = ["ok", "clean error", "crash", "hang", "divergence"]
    if a.json:
        print(json.dumps({"stats": R.stats, "bad": R.bad, "seconds": elapsed}))
    else:
        print(f"fault injection: {a.bin}, seed {a.seed}, {elapsed:.0f} s\n")
        print("| area | cases | ok | clean errors | crashes | hangs | divergences |")
        print("|---|---|---|---|---|---|---|")
        tot = {k: 0 for k in kinds}
        for area, st in R.stats.items():
            n = sum(st.values())
            print(f"| {area} | {n} | " + " | ".join(str(st.get(k, 0)) for k in kinds) + " |")
            for k in kinds:
                tot[k] += st.get(k, 0)
        print(f"| **all** | {sum(tot.values())} | " + " | ".join(str(tot[k]) for k in kinds) + " |")
        for area, kind, what, out in R.bad[:10]:
            print(f"\n### {kind}: {area}: {what}\n```\n{out}\n```")
    sys.exit(1 if R.bad else 0)


if __name__ == "__main__":
    main()
