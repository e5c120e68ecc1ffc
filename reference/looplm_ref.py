"""looplm reference model in PyTorch (the ground truth for tests/fixtures).

Covers the `residual` loop rule with pre_norm / parallel / sandwich blocks (SPEC §1, §2.2, §6):

    tokens -> tok_emb (+ pos_emb) -> prelude -> h^(0) = h_pre
           -> for r = 1..R: h^(r) = core(h^(r-1))        (all n_core blocks in order)
           -> coda -> norm_f -> lm_head -> logits

Parameter names match the C++ engine's checkpoints exactly, so `model.load_state_dict(tensors)` works
on a looplm `model.safetensors` (see load_checkpoint.py).
"""
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# Model keys and their defaults. Any other key in a config (lr, batch_size, ...) is ignored here.
DEFAULTS = dict(
    vocab_size=None, d_model=None, n_heads=None, context=None, n_core=None,
    d_ff=0, n_prelude=0, n_coda=0, R=1,
    block="pre_norm", norm="rmsnorm", mlp="gelu", pos="rope", rope_base=10000.0,
    bias=False, tie_embeddings=True, loop_rule="residual", deeploop_p=0.0,
    init_std=0.02, norm_eps=1e-5,
)


def resolve_config(cfg):
    """Flat dict (or JSON string) -> dict with every model key set; d_ff 0 means 4*d_model."""
    if isinstance(cfg, str):
        cfg = json.loads(cfg)
    out = {k: cfg.get(k, v) for k, v in DEFAULTS.items()}
    missing = [k for k, v in out.items() if v is None]
    if missing:
        raise ValueError(f"config lacks {missing}")
    if not out["d_ff"]:
        out["d_ff"] = 4 * out["d_model"]
    assert out["d_model"] % out["n_heads"] == 0
    assert out["block"] in ("pre_norm", "parallel", "sandwich"), out["block"]
    assert out["norm"] in ("rmsnorm", "layernorm") and out["mlp"] in ("gelu", "swiglu")
    assert out["pos"] in ("rope", "learned", "none")
    if out["loop_rule"] != "residual":
        raise NotImplementedError(f"loop_rule {out['loop_rule']!r} is not in this reference")
    return out


def unrolled_depth(cfg):
    """N = number of block applications at the configured R."""
    return cfg["n_prelude"] + cfg["n_core"] * cfg["R"] + cfg["n_coda"]


# ----------------------------------------------------------------------------- building blocks

class Norm(nn.Module):
    """rmsnorm: x / sqrt(mean(x^2) + eps) * w.   layernorm: standard, with weight and bias."""

    def __init__(self, d, kind, eps):
        super().__init__()
        self.kind, self.eps = kind, eps
        self.weight = nn.Parameter(torch.ones(d))
        if kind == "layernorm":
            self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        if self.kind == "rmsnorm":
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight
        return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


def rope_cos_sin(T, hd, base, dtype):
    """cos/sin [T, hd] for rotate-half RoPE: channel i pairs with i + hd/2, theta_i = base^(-2i/hd)."""
    i = torch.arange(hd // 2, dtype=torch.float64)
    theta = base ** (-2.0 * i / hd)
    ang = torch.arange(T, dtype=torch.float64)[:, None] * theta[None, :]  # [T, hd/2]
    ang = torch.cat([ang, ang], dim=-1)
    return ang.cos().to(dtype), ang.sin().to(dtype)


def apply_rope(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return x * cos + rotated * sin


class Attention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, bias = cfg["d_model"], cfg["bias"]
        self.n_heads, self.hd = cfg["n_heads"], d // cfg["n_heads"]
        self.use_rope, self.rope_base = cfg["pos"] == "rope", float(cfg["rope_base"])
        self.q = nn.Linear(d, d, bias=bias)
        self.k = nn.Linear(d, d, bias=bias)
        self.v = nn.Linear(d, d, bias=bias)
        self.o = nn.Linear(d, d, bias=bias)

    def forward(self, x):
        B, T, d = x.shape
        heads = lambda t: t.view(B, T, self.n_heads, self.hd).transpose(1, 2)  # [B, H, T, hd]
        q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
        if self.use_rope:
            cos, sin = rope_cos_sin(T, self.hd, self.rope_base, x.dtype)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = scores.softmax(dim=-1) @ v  # [B, H, T, hd]
        return self.o(y.transpose(1, 2).reshape(B, T, d))


class MLP(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, f, bias = cfg["d_model"], cfg["d_ff"], cfg["bias"]
        self.kind = cfg["mlp"]
        if self.kind == "swiglu":
            self.gate = nn.Linear(d, f, bias=bias)
        self.up = nn.Linear(d, f, bias=bias)
        self.down = nn.Linear(f, d, bias=bias)

    def forward(self, x):
        if self.kind == "swiglu":
            return self.down(F.silu(self.gate(x)) * self.up(x))
        return self.down(F.gelu(self.up(x)))  # exact erf GELU


class Block(nn.Module):
    """n1 = attn_norm, n2 = mlp_norm (pre_norm / parallel);
    sandwich: n1 = attn_norm, n2 = attn_post_norm, n3 = mlp_norm, n4 = mlp_post_norm."""

    def __init__(self, cfg, alpha):
        super().__init__()
        d, kind, eps = cfg["d_model"], cfg["norm"], cfg["norm_eps"]
        self.kind, self.alpha = cfg["block"], alpha
        self.attn_norm = Norm(d, kind, eps)
        self.attn = Attention(cfg)
        self.mlp_norm = Norm(d, kind, eps)
        self.mlp = MLP(cfg)
        if self.kind == "sandwich":
            self.attn_post_norm = Norm(d, kind, eps)
            self.mlp_post_norm = Norm(d, kind, eps)

    def forward(self, x):
        if self.kind == "pre_norm":
            x = x + self.attn(self.attn_norm(x))
            x = x + self.mlp(self.mlp_norm(x))
        elif self.kind == "parallel":
            x = x + self.attn(self.attn_norm(x)) + self.mlp(self.mlp_norm(x))
        else:  # sandwich
            a = self.alpha
            x = self.attn_post_norm(a * x + self.attn(self.attn_norm(x)))
            x = self.mlp_post_norm(a * x + self.mlp(self.mlp_norm(x)))
        return x


# ----------------------------------------------------------------------------- the model

class LoopLM(nn.Module):
    def __init__(self, config):
        super().__init__()
        cfg = self.cfg = resolve_config(config)
        d, V = cfg["d_model"], cfg["vocab_size"]
        N, p = unrolled_depth(cfg), cfg["deeploop_p"]
        alpha = (2 * N) ** p if p != 0 else 1.0  # DeepLoop: skip-path scale, from the trained R
        self.tok_emb = nn.Embedding(V, d)
        if cfg["pos"] == "learned":
            self.pos_emb = nn.Embedding(cfg["context"], d)
        self.prelude = nn.ModuleList(Block(cfg, alpha) for _ in range(cfg["n_prelude"]))
        self.core = nn.ModuleList(Block(cfg, alpha) for _ in range(cfg["n_core"]))
        self.coda = nn.ModuleList(Block(cfg, alpha) for _ in range(cfg["n_coda"]))
        self.norm_f = Norm(d, cfg["norm"], cfg["norm_eps"])
        if not cfg["tie_embeddings"]:
            self.lm_head = nn.Linear(d, V, bias=cfg["bias"])
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """N(0, init_std) for matrices/embeddings; attn.o and mlp.down scaled by 1/sqrt(2N);
        with deeploop_p > 0 instead attn.v, attn.o and every MLP matrix scaled by beta = (8N)^(-p)."""
        cfg = self.cfg
        N, p, std = unrolled_depth(cfg), cfg["deeploop_p"], cfg["init_std"]
        for name, w in self.named_parameters():
            if name.endswith(".bias"):
                w.zero_()
            elif w.ndim == 1:  # norm weights
                w.fill_(1.0)
            else:
                w.normal_(0.0, std)
                if p > 0:
                    if any(s in name for s in (".attn.v.", ".attn.o.", ".mlp.")):
                        w.mul_((8 * N) ** (-p))
                elif any(s in name for s in (".attn.o.", ".mlp.down.")):
                    w.mul_(1.0 / math.sqrt(2 * N))

    # --- pieces
    def embed(self, tokens):
        h = self.tok_emb(tokens)
        if self.cfg["pos"] == "learned":
            h = h + self.pos_emb.weight[: tokens.shape[1]]
        for blk in self.prelude:
            h = blk(h)
        return h  # h_pre = h^(0)

    def loop_step(self, h, h_pre, r):
        """residual rule: h^(r) = core(h^(r-1)); h_pre and r are unused."""
        for blk in self.core:
            h = blk(h)
        return h

    def exit_logits(self, h):
        """Loop state -> coda -> norm_f -> lm_head."""
        for blk in self.coda:
            h = blk(h)
        h = self.norm_f(h)
        if self.cfg["tie_embeddings"]:
            return h @ self.tok_emb.weight.t()
        return self.lm_head(h)

    def loop_states(self, tokens, R=None, grad_steps=None):
        """[h^(0), h^(1), ..., h^(R)]. grad_steps = k: truncated back-propagation, only the last k
        loop steps keep gradients (the earlier ones run under no_grad, their output detached)."""
        R = self.cfg["R"] if R is None else R
        h_pre = h = self.embed(tokens)
        states = [h]
        for r in range(1, R + 1):
            if grad_steps is not None and r <= R - grad_steps:
                with torch.no_grad():
                    h = self.loop_step(h, h_pre, r).detach()
            else:
                h = self.loop_step(h, h_pre, r)
            states.append(h)
        return states

    # --- public API
    def forward(self, tokens, R=None):
        """Logits [B, T, V] at depth R (default: the configured R)."""
        return self.exit_logits(self.loop_states(tokens, R)[-1])

    @staticmethod
    def loss(logits, targets):
        """Mean token cross-entropy."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def loss_by_depth(self, tokens, targets, R=None):
        """Loss at every exit r = 1..R (tensor [R])."""
        states = self.loop_states(tokens, R)
        return torch.stack([self.loss(self.exit_logits(h), targets) for h in states[1:]])


def param_groups(model, weight_decay):
    """AdamW groups: weight decay only on params with ndim >= 2."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
