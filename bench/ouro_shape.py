#!/usr/bin/env python3
"""A converted Ouro-1.4B-shaped model, decoded with and without its learned exit gate.

Ouro's weights cannot be downloaded here, so this writes a Hugging Face model directory with
Ouro-1.4B's config (d 2048, 24 blocks looped 4 times, SwiGLU 5632, vocabulary 49,152, untied) and
random bf16 tensors under Ouro's own names (sharded, with model.safetensors.index.json, as the
published checkpoint is), then runs what a user runs on a real download:

    looplm convert --from DIR --out RUN
    looplm quantize --checkpoint RUN --format q4_0 --out Q
    looplm bench --checkpoint Q --decode-only ...            full depth, and the read-rate fraction
    looplm generate --checkpoint Q --exit-rule gate --exit-threshold q --kv-policy last ...

and reports tokens/s (generate: the median of --repeats runs, the rules interleaved) against the
mean loop steps per token. The gate is random, so where it exits says nothing about Ouro; what the
table shows is what an exit saves on this shape (the loop steps a token skips are the bytes it does
not read), and what the gate itself costs.

    python3 bench/ouro_shape.py [--threads 1,2] [--thresholds 0.5,0.75,0.9] [--work DIR] [--repeats 3]

The files (2.9 GB bf16, 5.7 GB fp32, 1.2 GB q4_0 with the fp32 embedding) stay in --work (default /tmp/looplm-ouro-shape)
and are reused; --layers N writes a smaller model of the same width (a quick check of the path).
Results: bench/README.md, "Memory bandwidth".
"""
import argparse
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOPLM = os.path.join(ROOT, "build", "looplm")

A = argparse.ArgumentParser(description=__doc__.split("\n")[0])
A.add_argument("--work", default="/tmp/looplm-ouro-shape")
A.add_argument("--layers", type=int, default=24)
A.add_argument("--threads", default="1,2")
A.add_argument("--thresholds", default="0.5,0.75,0.9")
A.add_argument("--repeats", type=int, default=3)
A.add_argument("--prepare-only", action="store_true", help="write, convert and quantize; time nothing")
A.add_argument("--tokens", type=int, default=24, help="new tokens per timed generation")
A.add_argument("--gate-bias", type=float, default=0.0,
               help="the exit gate's bias (0: lambda near 0.5 at every step, so q spreads the exit steps)")
args = A.parse_args()

D, F, V, H, LOOPS = 2048, 5632, 49152, 16, 4


def bf16_random(n, rnd):
    """n random bf16 values of magnitude in [2^-7, 2^-5) with random signs (about N(0, 1/sqrt(2048))
    in scale), as little-endian bytes: the low byte (exponent bit 0, mantissa) uniform, the high byte
    (sign, exponent bits 7..1) the sign and exponent 60 << 1."""
    out = bytearray(2 * n)
    out[0::2] = rnd(n)
    out[1::2] = rnd(n).translate(bytes((b & 0x80) | 60 for b in range(256)))
    return out


def bf16_const(n, value):
    bits = struct.unpack("<I", struct.pack("<f", value))[0] >> 16
    return struct.pack("<H", bits) * n


def write_tokenizer(path):
    """A byte-level BPE of Ouro's vocabulary size: the fixtures' tokenizer.json (tests/fixtures/hf)
    with its vocabulary and merges replaced by the 256 byte symbols and 48,896 of their pairs, so
    that every id a random model samples decodes."""
    t = json.load(open(os.path.join(ROOT, "tests", "fixtures", "hf", "ouro", "tokenizer.json")))
    by_id = {i: s for s, i in t["model"]["vocab"].items() if i < 256}
    assert len(by_id) == 256, "the fixture's first 256 ids are the byte symbols"
    vocab, merges = {by_id[i]: i for i in range(256)}, []
    for a in range(256):
        for b in range(256):
            if len(vocab) == V:
                break
            merges.append(f"{by_id[a]} {by_id[b]}")
            vocab[by_id[a] + by_id[b]] = len(vocab)
    t["model"]["vocab"], t["model"]["merges"] = vocab, merges
    json.dump(t, open(path, "w"), ensure_ascii=False)


def write_hf(d, layers):
    """config.json, tokenizer.json (write_tokenizer) and random bf16 tensors in one shard per 6
    blocks."""
    os.makedirs(d, exist_ok=True)
    config = dict(architectures=["OuroForCausalLM"], model_type="ouro", hidden_size=D, intermediate_size=F,
                  num_hidden_layers=layers, num_attention_heads=H, num_key_value_heads=H, vocab_size=V,
                  max_position_embeddings=4096, rms_norm_eps=1e-6, hidden_act="silu", rope_theta=1000000.0,
                  tie_word_embeddings=False, total_ut_steps=LOOPS, early_exit_threshold=1.0,
                  layer_types=["full_attention"] * layers, torch_dtype="bfloat16")
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=1)
    write_tokenizer(os.path.join(d, "tokenizer.json"))
    tensors = [("model.embed_tokens.weight", (V, D), "rand")]
    for i in range(layers):
        p = f"model.layers.{i}."
        tensors += [(p + "input_layernorm.weight", (D,), "one"), (p + "input_layernorm_2.weight", (D,), "one"),
                    (p + "self_attn.q_proj.weight", (D, D), "rand"), (p + "self_attn.k_proj.weight", (D, D), "rand"),
                    (p + "self_attn.v_proj.weight", (D, D), "rand"), (p + "self_attn.o_proj.weight", (D, D), "rand"),
                    (p + "post_attention_layernorm.weight", (D,), "one"),
                    (p + "post_attention_layernorm_2.weight", (D,), "one"),
                    (p + "mlp.gate_proj.weight", (F, D), "rand"), (p + "mlp.up_proj.weight", (F, D), "rand"),
                    (p + "mlp.down_proj.weight", (D, F), "rand")]
    tensors += [("model.norm.weight", (D,), "one"), ("lm_head.weight", (V, D), "rand"),
                ("model.early_exit_gate.weight", (1, D), "rand"), ("model.early_exit_gate.bias", (1,), "bias")]
    shards, cur = [], []
    for t in tensors:
        cur.append(t)
        if re.match(r"model\.layers\.\d+\.mlp\.down_proj", t[0]) and int(t[0].split(".")[2]) % 6 == 5:
            shards.append(cur)
            cur = []
    if cur:
        shards.append(cur)
    weight_map = {}
    for k, shard in enumerate(shards):
        name = f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors"
        header, off = {}, 0
        for t, shape, _ in shard:
            n = 2 * math.prod(shape)
            header[t] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [off, off + n]}
            off += n
            weight_map[t] = name
        h = json.dumps(header).encode()
        h += b" " * (-len(h) % 8)
        with open(os.path.join(d, name + ".part"), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h)
            for t, shape, kind in shard:
                n = math.prod(shape)
                f.write(bf16_random(n, os.urandom) if kind == "rand" else
                        bf16_const(n, 1.0 if kind == "one" else args.gate_bias))
        os.replace(os.path.join(d, name + ".part"), os.path.join(d, name))
    json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(d, "model.safetensors.index.json"), "w"))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"ouro_shape: {' '.join(cmd)} failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    return r


def running_others():
    """The timings want the machine to themselves: nothing is paused here, but say what else is
    running (a training job beside them halves the read rate); stopped processes (SIGSTOP) are not."""
    r = subprocess.run(["pgrep", "-af", "looplm (train|serve)"], capture_output=True, text=True)
    out = []
    for line in r.stdout.splitlines():
        try:
            state = open(f"/proc/{line.split()[0]}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "T":
            out.append(line)
    return out


work = os.path.abspath(args.work)
tag = f"L{args.layers}"
hf, rundir, q4 = (os.path.join(work, f"{n}-{tag}") for n in ("hf", "run", "q4_0"))
q4 += ".safetensors"
os.makedirs(work, exist_ok=True)
if not os.path.exists(os.path.join(hf, "model.safetensors.index.json")):
    print(f"writing {hf} ({args.layers} blocks)", flush=True)
    write_hf(hf, args.layers)
if not os.path.exists(os.path.join(rundir, "model.safetensors")):
    print(f"looplm convert --from {hf} --out {rundir}", flush=True)
    shutil.rmtree(rundir, ignore_errors=True)
    run([LOOPLM, "convert", "--from", hf, "--out", rundir])
if not os.path.exists(q4):
    print(f"looplm quantize --checkpoint {rundir} --format q4_0 --out {q4}", flush=True)
    run([LOOPLM, "quantize", "--checkpoint", rundir, "--format", "q4_0", "--out", q4])
if args.prepare_only:
    sys.exit(0)
others = running_others()
if others:
    print("note: other looplm processes are running; the timings below share the machine with them:\n  " +
          "\n  ".join(others), flush=True)

prompt = "In the beginning God created the heaven and the earth."
rows = []
for t in [int(x) for x in args.threads.split(",")]:
    r = run([LOOPLM, "bench", "--checkpoint", q4, "--decode-only", "--weights", "q4_0", "--gen-batch", "1", "-p", "16", "-n", str(args.tokens),
             "-r", str(args.repeats), "-t", str(t), "--json"])
    b = json.loads(r.stdout)
    frac = b.get("decode_q4_0_bandwidth_fraction")
    rows.append((t, "full depth (bench)", LOOPS, b["decode_q4_0_tokens_per_s"], frac, b.get("read_gbps")))
    rules = ["fixed"] + args.thresholds.split(",")
    speeds, steps = {q: [] for q in rules}, {}
    for _ in range(args.repeats):  # the rules interleaved, so that a drift in the machine's rate hits each alike
        for q in rules:
            rule = ["--exit-rule", "gate", "--exit-threshold", q, "--kv-policy", "last"] if q != "fixed" else []
            g = run([LOOPLM, "generate", "--checkpoint", q4, "-p", prompt, "-n", str(args.tokens), "--temperature", "0",
                     "--speculative", "0", "-t", str(t)] + rule)
            m = re.search(r"generation: \d+ tokens in [\d.]+ ms \(([\d.]+) tokens/s\)", g.stderr)
            st = re.search(r"([\d.]+) loop steps per token", g.stderr)
            speeds[q].append(float(m.group(1)))
            steps[q] = float(st.group(1)) if st else LOOPS
    for q in rules:
        rows.append((t, "generate" if q == "fixed" else f"gate q = {q}", steps[q], statistics.median(speeds[q]), None, None))
        print(rows[-1], flush=True)

print("\n| threads | decoding | loop steps per token | tokens/s | fraction of the read rate |")
print("|---|---|---|---|---|")
for t, what, steps, tps, frac, gbps in rows:
    f = f"{frac:.2f} (of {gbps:.1f} GB/s)" if frac is not None else ""
    print(f"| {t} | {what} | {steps:.2f} | {tps:.1f} | {f} |")
