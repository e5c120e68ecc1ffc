#!/usr/bin/python3
"""Synthetic Hugging Face checkpoints and their expected outputs, for `looplm convert --from DIR`
(tests/test_hf_import.cpp, docs/interchange.md).

Real weights cannot be downloaded here, so each fixture is a model directory with the real file
layout at a reduced size: config.json with the family's keys, tokenizer.json (a small byte-level
BPE), and bf16 tensors under the family's own names in model.safetensors or in shards with a
model.safetensors.index.json. The expected outputs come from an independent port of each
family's forward written here on the Hugging Face tensor names (not from looplm_ref.py):

    llama_gqa   LlamaForCausalLM, 4 query / 2 key-value heads (grouped-query), untied, 2 shards
    qwen2       Qwen2ForCausalLM, q/k/v biases, tied embeddings, 2 key-value heads
    nanbeige    NanbeigeForCausalLM, the whole stack looped 3 times, model.norm between loops
    ouro        OuroForCausalLM, sandwich-less "peri" norms, 4 loops with model.norm after each,
                the learned early-exit gate (Ouro's CDF exit rule at q = 0.5)
    huginn      RavenForCausalLM (Huginn-0125): prelude 1, core 2 looped 3 times with the linear
                adapter on [state, embedding] from a zero state, coda 1; sandwich blocks, fused
                Wqkv and mlp.fc, q/k biases, adjacent-pair RoPE, the embedding scaled by sqrt(d),
                ln_f before and after the coda, a tied head, a freqs_cis buffer

tests/fixtures/hf/<name>/expected.safetensors holds (float32, computed in float64):
    input.ids [T] I32         token ids
    out.logits [T, V]         logits at the full depth
    ouro only: gate.{t} [T] the gate's lambda after loop t (1-based); exit.step [T] I32 the exit
               step of Ouro's rule at q = 0.5; exit.logits [T, V] the logits at those exits

Run with Debian's Python (torch 1.13): /usr/bin/python3 reference/export_hf_fixtures.py
"""
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_io import save_file  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "hf")
T = 20


# ----------------------------------------------------------------------------- tokenizer.json

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def tokenizer_json():
    """A GPT-2-style byte-level BPE: the 256 byte symbols, then a few merges of English."""
    sym = bytes_to_unicode()
    vocab = {sym[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("a", "n"), ("Ġ", "a"), ("n", "d"), ("Ġa", "nd"),
              ("Ġ", "s"), ("e", "r")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False, "use_regex": True},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [f"{a} {b}" for a, b in merges]},
    }


# ----------------------------------------------------------------------------- the forward passes

def rms(x, w, eps):
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):
    """Hugging Face's rotate_half RoPE on [heads, T, hd]."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
    return x * cos + torch.cat([-x2, x1], -1) * sin


def attention(W, p, x, cfg):
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    d = cfg["hidden_size"]
    hd = cfg.get("head_dim", d // H)  # Nanbeige4.2 / Qwen3: the heads need not split hidden_size
    Tn = x.shape[0]

    def proj(name):
        y = x @ W[p + f"self_attn.{name}_proj.weight"].t()
        b = p + f"self_attn.{name}_proj.bias"
        return y + W[b] if b in W else y

    q = proj("q").reshape(Tn, H, hd).transpose(0, 1)
    k = proj("k").reshape(Tn, KV, hd).transpose(0, 1)
    v = proj("v").reshape(Tn, KV, hd).transpose(0, 1)
    q, k = rope(q, cfg["rope_theta"]), rope(k, cfg["rope_theta"])
    k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)  # repeat_kv
    s = q @ k.transpose(1, 2) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1), float("-inf"))
    o = (s.softmax(-1) @ v).transpose(0, 1).reshape(Tn, H * hd)
    return o @ W[p + "self_attn.o_proj.weight"].t()


def mlp(W, p, x):
    g = x @ W[p + "mlp.gate_proj.weight"].t()
    u = x @ W[p + "mlp.up_proj.weight"].t()
    return (torch.nn.functional.silu(g) * u) @ W[p + "mlp.down_proj.weight"].t()


def llama_layer(W, i, x, cfg):
    p, eps = f"model.layers.{i}.", cfg["rms_norm_eps"]
    x = x + attention(W, p, rms(x, W[p + "input_layernorm.weight"], eps), cfg)
    return x + mlp(W, p, rms(x, W[p + "post_attention_layernorm.weight"], eps))


def ouro_layer(W, i, x, cfg):
    p, eps = f"model.layers.{i}.", cfg["rms_norm_eps"]
    a = attention(W, p, rms(x, W[p + "input_layernorm.weight"], eps), cfg)
    x = x + rms(a, W[p + "input_layernorm_2.weight"], eps)
    m = mlp(W, p, rms(x, W[p + "post_attention_layernorm.weight"], eps))
    return x + rms(m, W[p + "post_attention_layernorm_2.weight"], eps)


def rope_pairs(x, theta):
    """Huginn's "complex-like" RoPE on [heads, T, hd]: channels (2i, 2i+1) rotate together."""
    hd = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    ang = torch.arange(x.shape[1], dtype=torch.float64)[:, None] * inv[None, :]
    c, s = ang.cos(), ang.sin()
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def huginn_block(W, p, x, cfg):
    """SandwichBlock: x = norm_2(attn(norm_1 x) + x); x = norm_4(mlp(norm_3 x) + x)."""
    d, H, eps = cfg["n_embd"], cfg["n_heads"], cfg["norm_eps"]
    hd, Tn = d // H, x.shape[0]
    y = rms(x, W[p + "norm_1.weight"], eps)
    q, k, v = (y @ W[p + "attn.Wqkv.weight"].t()).split(d, dim=-1)
    q, k, v = (z.reshape(Tn, H, hd) for z in (q, k, v))
    q = q + W[p + "attn.qk_bias"][0, 0]
    k = k + W[p + "attn.qk_bias"][1, 0]
    q, k, v = (z.transpose(0, 1) for z in (q, k, v))
    q, k = rope_pairs(q, cfg["rope_base"]), rope_pairs(k, cfg["rope_base"])
    s = q @ k.transpose(1, 2) / math.sqrt(hd)
    s = s.masked_fill(torch.triu(torch.ones(Tn, Tn, dtype=torch.bool), 1), float("-inf"))
    a = (s.softmax(-1) @ v).transpose(0, 1).reshape(Tn, d) @ W[p + "attn.proj.weight"].t()
    x = rms(a + x, W[p + "norm_2.weight"], eps)
    g, u = (rms(x, W[p + "norm_3.weight"], eps) @ W[p + "mlp.fc.weight"].t()).chunk(2, dim=-1)
    m = (torch.nn.functional.silu(g) * u) @ W[p + "mlp.proj.weight"].t()
    return rms(m + x, W[p + "norm_4.weight"], eps)


def huginn_forward(W, cfg, ids):
    x = W["transformer.wte.weight"][ids] * cfg["init_values"]["embed_scale"]
    for i in range(cfg["n_layers_in_prelude"]):
        x = huginn_block(W, f"transformer.prelude.{i}.", x, cfg)
    e, s = x, torch.zeros_like(x)  # the state from zero (Huginn's init_scale = 0)
    for _ in range(cfg["mean_recurrence"]):
        s = torch.cat([s, e], -1) @ W["transformer.adapter.weight"].t()
        for i in range(cfg["n_layers_in_recurrent_block"]):
            s = huginn_block(W, f"transformer.core_block.{i}.", s, cfg)
    x = rms(s, W["transformer.ln_f.weight"], cfg["norm_eps"])
    for i in range(cfg["n_layers_in_coda"]):
        x = huginn_block(W, f"transformer.coda.{i}.", x, cfg)
    x = rms(x, W["transformer.ln_f.weight"], cfg["norm_eps"])
    return x @ W["transformer.wte.weight"].t()


def head(W, x, cfg):
    return x @ (W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]).t()


def forward(W, cfg, ids):
    """Logits [T, V] (and for Ouro the per-loop normed states and gates)."""
    if cfg["architectures"][0] == "RavenForCausalLM":
        return huginn_forward(W, cfg, ids), None, None
    x = W["model.embed_tokens.weight"][ids]
    L, eps = cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    arch = cfg["architectures"][0]
    if arch == "OuroForCausalLM":
        states, gates = [], []
        for _ in range(cfg["total_ut_steps"]):
            for i in range(L):
                x = ouro_layer(W, i, x, cfg)
            x = rms(x, W["model.norm.weight"], eps)  # after every loop; the next one reads it
            states.append(x)
            gates.append(torch.sigmoid(x @ W["model.early_exit_gate.weight"].t() + W["model.early_exit_gate.bias"]).squeeze(-1))
        return head(W, x, cfg), states, gates
    loops = cfg.get("num_loops", 1)
    for j in range(loops):
        for i in range(L):
            x = llama_layer(W, i, x, cfg)
        if j < loops - 1 and not cfg.get("skip_loop_final_norm", False):
            x = rms(x, W["model.norm.weight"], eps)  # Nanbeige: the final norm at each loop boundary
    return head(W, rms(x, W["model.norm.weight"], eps), cfg), None, None


def ouro_exits(states, gates, q, W, cfg):
    """Ouro's exit_threshold rule: pdf p_t = lambda_t prod_{j<t}(1 - lambda_j), the last step taking
    what remains; exit at the first t whose cumulative sum reaches q."""
    steps = len(gates)
    remaining = torch.ones_like(gates[0])
    pdf = []
    for t, lam in enumerate(gates):
        if t < steps - 1:
            pdf.append(lam * remaining)
            remaining = remaining * (1 - lam)
        else:
            pdf.append(remaining)
    cdf = torch.stack(pdf, -1).cumsum(-1)
    hit = cdf >= q
    step = torch.where(hit.any(-1), hit.float().argmax(-1), torch.full_like(hit[..., 0], steps - 1, dtype=torch.long))
    chosen = torch.stack(states, 1)[torch.arange(step.shape[0]), step]
    return step + 1, head(W, chosen, cfg)


# ----------------------------------------------------------------------------- the checkpoints

def huginn_weights(cfg, gen):
    d, f, V = cfg["n_embd"], cfg["intermediate_size"], cfg["padded_vocab_size"]
    H = cfg["n_heads"]
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    W = {"transformer.wte.weight": rnd(V, d) / d ** 0.5}  # x sqrt(d) at the input: O(1)
    sections = [("prelude", cfg["n_layers_in_prelude"]), ("core_block", cfg["n_layers_in_recurrent_block"]),
                ("coda", cfg["n_layers_in_coda"])]
    for sec, n in sections:
        for i in range(n):
            p = f"transformer.{sec}.{i}."
            for k in ("norm_1", "norm_2", "norm_3", "norm_4"):
                W[p + k + ".weight"] = 1 + 0.1 * rnd(d)
            W[p + "attn.Wqkv.weight"] = rnd(3 * d, d) / d ** 0.5
            W[p + "attn.qk_bias"] = 0.3 * rnd(2, 1, H, d // H)
            W[p + "attn.proj.weight"] = rnd(d, d) / d ** 0.5
            W[p + "mlp.fc.weight"] = rnd(2 * f, d) / d ** 0.5
            W[p + "mlp.proj.weight"] = rnd(d, f) / f ** 0.5
    W["transformer.adapter.weight"] = rnd(d, 2 * d) / (2 * d) ** 0.5
    W["transformer.ln_f.weight"] = 1 + 0.1 * rnd(d)
    W = {k: v.to(torch.bfloat16).to(torch.float64) for k, v in W.items()}
    hd = d // H  # a float32 RoPE table the model keeps as a buffer: dropped on import
    ang = torch.arange(cfg["block_size"], dtype=torch.float64)[:, None] / cfg["rope_base"] ** (torch.arange(0, hd, 2) / hd)
    W["freqs_cis"] = torch.stack([ang.cos(), ang.sin()], -1)
    return W


def weights(cfg, gen):
    """Random weights under the family's names: matrices N(0, 1/in) (activations O(1) through the
    layers), norm gains 1 + N(0, 0.1), biases N(0, 0.1), the embedding N(0, 1)."""
    if cfg["architectures"][0] == "RavenForCausalLM":
        return huginn_weights(cfg, gen)
    d, f, V, L = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"], cfg["num_hidden_layers"]
    H, KV = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim", d // H)
    qd, kvd = H * hd, KV * hd
    arch = cfg["architectures"][0]
    rnd = lambda *s: torch.randn(*s, generator=gen, dtype=torch.float64)
    W = {"model.embed_tokens.weight": rnd(V, d)}
    for i in range(L):
        p = f"model.layers.{i}."
        W[p + "input_layernorm.weight"] = 1 + 0.1 * rnd(d)
        W[p + "self_attn.q_proj.weight"] = rnd(qd, d) / d ** 0.5
        W[p + "self_attn.k_proj.weight"] = rnd(kvd, d) / d ** 0.5
        W[p + "self_attn.v_proj.weight"] = rnd(kvd, d) / d ** 0.5
        if arch == "Qwen2ForCausalLM":
            W[p + "self_attn.q_proj.bias"] = 0.1 * rnd(qd)
            W[p + "self_attn.k_proj.bias"] = 0.1 * rnd(kvd)
            W[p + "self_attn.v_proj.bias"] = 0.1 * rnd(kvd)
        W[p + "self_attn.o_proj.weight"] = rnd(d, qd) / qd ** 0.5 / 2
        W[p + "post_attention_layernorm.weight"] = 1 + 0.1 * rnd(d)
        W[p + "mlp.gate_proj.weight"] = rnd(f, d) / d ** 0.5
        W[p + "mlp.up_proj.weight"] = rnd(f, d) / d ** 0.5
        W[p + "mlp.down_proj.weight"] = rnd(d, f) / f ** 0.5 / 2
        if arch == "OuroForCausalLM":
            W[p + "input_layernorm_2.weight"] = 1 + 0.1 * rnd(d)
            W[p + "post_attention_layernorm_2.weight"] = 1 + 0.1 * rnd(d)
    W["model.norm.weight"] = 1 + 0.1 * rnd(d)
    if not cfg.get("tie_word_embeddings"):
        W["lm_head.weight"] = rnd(V, d) / d ** 0.5
    if arch == "OuroForCausalLM":
        W["model.early_exit_gate.weight"] = rnd(1, d) / d ** 0.5
        W["model.early_exit_gate.bias"] = 0.3 * rnd(1)
    # What the file holds is bf16: the reference computes from exactly those values.
    return {k: v.to(torch.bfloat16).to(torch.float64) for k, v in W.items()}


COMMON = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, vocab_size=272,
              max_position_embeddings=64, rms_norm_eps=1e-6, hidden_act="silu", torch_dtype="bfloat16")
FIXTURES = {
    "llama_gqa": dict(COMMON, architectures=["LlamaForCausalLM"], model_type="llama", num_key_value_heads=2,
                      rope_theta=10000.0, tie_word_embeddings=False, attention_bias=False, rope_scaling=None),
    "qwen2": dict(COMMON, architectures=["Qwen2ForCausalLM"], model_type="qwen2", num_key_value_heads=2,
                  rope_theta=1000000.0, tie_word_embeddings=True, use_sliding_window=False),
    # Nanbeige4.2-3B's attention shape: 4 query heads of 12 (48 columns on hidden 32), 2 key/value heads
    "nanbeige": dict(COMMON, architectures=["NanbeigeForCausalLM"], model_type="nanbeige", num_key_value_heads=2,
                     head_dim=12, rope_theta=70000000.0, tie_word_embeddings=False, num_loops=3, skip_loop_final_norm=False),
    "ouro": dict(COMMON, architectures=["OuroForCausalLM"], model_type="ouro", num_key_value_heads=4,
                 rope_theta=1000000.0, tie_word_embeddings=False, total_ut_steps=4, early_exit_threshold=1.0,
                 layer_types=["full_attention", "full_attention"]),
    "huginn": dict(architectures=["RavenForCausalLM"], model_type="huginn_raven", n_embd=32, n_heads=4, n_layers=4,
                   n_layers_in_prelude=1, n_layers_in_recurrent_block=2, n_layers_in_coda=1, intermediate_size=64,
                   vocab_size=272, padded_vocab_size=272, block_size=64, rope_base=50000.0, norm_eps=1e-6, qk_bias=True,
                   bias=False, tie_embeddings=True, injection_type="linear", state_init="like-init", mean_recurrence=3,
                   mean_backprop_depth=2, init_values={"embed_scale": 32 ** 0.5}, norm_class_name="RMSNorm_llama",
                   mlp_class_name="GatedMLP", nonlin_name="SiLU", block_class_name="SandwichBlock", torch_dtype="bfloat16"),
}
SHARDED = {"llama_gqa"}


def make(name, seed):
    cfg = FIXTURES[name]
    gen = torch.Generator().manual_seed(seed)
    W = weights(cfg, gen)
    ids = torch.randint(0, 266, (T,), generator=gen)  # within the tokenizer's ids (vocab_size pads it)
    logits, states, gates = forward(W, cfg, ids)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):
        os.remove(os.path.join(d, f))
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    tok = tokenizer_json()
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f, ensure_ascii=False)
    bf = {k: v.to(torch.float32 if k == "freqs_cis" else torch.bfloat16) for k, v in W.items()}
    if name in SHARDED:  # two shards and the index, as large checkpoints come
        names = list(bf)
        half = len(names) // 2
        shards = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
        for fname, keys in shards.items():
            save_file({k: bf[k] for k in keys}, os.path.join(d, fname), {"format": "pt"})
        index = {"metadata": {"total_size": sum(v.numel() * v.element_size() for v in bf.values())},
                 "weight_map": {k: fname for fname, keys in shards.items() for k in keys}}
        with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f, indent=2)
    else:
        save_file(bf, os.path.join(d, "model.safetensors"), {"format": "pt"})
    exp = {"input.ids": ids.int(), "out.logits": logits.float()}
    if gates is not None:
        for t, g in enumerate(gates, start=1):
            exp[f"gate.{t}"] = g.float()
        step, ex_logits = ouro_exits(states, gates, 0.5, W, cfg)
        exp["exit.step"] = step.int()
        exp["exit.logits"] = ex_logits.float()
        hist = [int((step == s).sum()) for s in range(1, len(gates) + 1)]
        print(f"  ouro: exits at q = 0.5 by step {hist}; lambda range {min(g.min() for g in gates):.2f}..{max(g.max() for g in gates):.2f}")
    save_file(exp, os.path.join(d, "expected.safetensors"), {"format": "pt"})
    print(f"{d}: {len(bf)} tensors, logits std {logits.std():.3f}")


if __name__ == "__main__":
    for i, name in enumerate(FIXTURES):
        make(name, 1000 + i)
