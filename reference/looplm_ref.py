"""looplm reference model in PyTorch (the ground truth for tests/fixtures).

Covers pre_norm / parallel / sandwich / energy (NRGPT) / cem (CEM) blocks and four loop rules
(docs/systems.md; parameter names as in docs/format.md):

    tokens -> tok_emb (+ pos_emb) -> prelude -> h_pre
           -> state = init_state(h_pre); for r = 1..R: state = step(state, h_pre, core, r)
           -> h = readout(state) -> coda -> norm_f -> lm_head -> logits

    residual  state = h;  step: h <- core(h)                                     (no parameters)
    gated     state = h;  step: h <- g*h + (1-g)*core(W_proj [h + eps_x, h_pre])  (RecurrentGPT)
    hyper     state = n streams Y [.., n*d];  readout = mean of the streams        (Hyperloop / mHC)
    inject_linear  state s^(0) = 0 or the seeded like_init draw;  step: s <- core(W_proj [s, h_pre])  (Huginn)

Exit r (r = 0, 1, ..., any depth, also beyond the trained R) is readout(state after step r).

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
    n_kv_heads=0, d_head=0, d_ff=0, n_prelude=0, n_coda=0, R=1,
    block="pre_norm", norm="rmsnorm", mlp="gelu", pos="rope", rope_base=10000.0,
    bias=False, tie_embeddings=True, loop_rule="residual", deeploop_p=0.0,
    init_std=0.02, norm_eps=1e-5, emb_scale=1.0, exit_gate=False,
)

# Keys of each loop rule and their defaults. A resolved config holds the keys of its own rule only
# (so a residual config is exactly the DEFAULTS keys); other rules' keys are ignored like lr.
RULE_DEFAULTS = {
    "residual": dict(loop_norm=False),
    "gated": dict(gate_sigma_x=0.1, gate_sigma_g=0.1, gate_tau=1.0, gate_bias_init=4.0),
    "inject_linear": dict(inject_readout_norm=False, inject_state_init="zero", inject_state_seed=0),
    "hyper": dict(hyper_streams=4, hyper_res="diag", sinkhorn_iters=20),
}


# Keys of a block kind and their defaults, like RULE_DEFAULTS: a resolved config holds them only when
# `block` is that kind (one `block` key covers every section: prelude, core and coda).
BLOCK_DEFAULTS = {
    "energy": dict(energy_ff="ff2w", energy_P="matrix", energy_c=0.1, energy_strict=False),
    "cem": dict(cem_T=2, cem_diag=True, cem_precond=False, cem_precond_rank=4),
}


def _integer(cfg, key, lo):
    """An integer config value (an integral float such as 4.0 is accepted), at least lo."""
    v = cfg[key]
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and float(v).is_integer() and v >= lo
    if not ok:
        raise ValueError(f"config key {key!r} must be an integer >= {lo}, got {v!r}")
    cfg[key] = int(v)


def _number(cfg, key, ok, what):
    v = cfg[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not ok(v):
        raise ValueError(f"config key {key!r} must be {what}, got {v!r}")
    cfg[key] = float(v)


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
    assert out["block"] in ("pre_norm", "parallel", "sandwich", "peri_norm", "energy", "cem"), out["block"]
    if out["block"] != "energy":  # energy heads are full d x d matrices: no head dim
        assert out["d_head"] or out["d_model"] % out["n_heads"] == 0
        assert out["n_heads"] % (out["n_kv_heads"] or out["n_heads"]) == 0
    assert out["norm"] in ("rmsnorm", "layernorm") and out["mlp"] in ("gelu", "swiglu")
    assert out["pos"] in ("rope", "learned", "none")
    if out["block"] == "energy":
        out.update({k: cfg.get(k, v) for k, v in BLOCK_DEFAULTS["energy"].items()})
        if out["pos"] == "rope":
            raise ValueError("energy blocks do not use RoPE: set pos to 'learned' or 'none'")
        if out["deeploop_p"] != 0:
            raise ValueError("deeploop_p applies to sandwich blocks, not to energy blocks")
        if out["energy_ff"] not in ("ff1", "ff2w"):
            raise ValueError(f"config key 'energy_ff' must be 'ff1' or 'ff2w', got {out['energy_ff']!r}")
        if out["energy_P"] not in ("matrix", "diag"):
            raise ValueError(f"config key 'energy_P' must be 'matrix' or 'diag', got {out['energy_P']!r}")
        _number(out, "energy_c", lambda v: v > 0, "a number > 0")
        if not isinstance(out["energy_strict"], bool):
            raise ValueError(f"config key 'energy_strict' must be true or false, got {out['energy_strict']!r}")
    if out["block"] == "cem":
        out.update({k: cfg.get(k, v) for k, v in BLOCK_DEFAULTS["cem"].items()})
        if out["deeploop_p"] != 0:
            raise ValueError("deeploop_p applies to sandwich blocks, not to cem blocks")
        _integer(out, "cem_T", 1)
        _integer(out, "cem_precond_rank", 1)
        for k in ("cem_diag", "cem_precond"):
            if not isinstance(out[k], bool):
                raise ValueError(f"config key {k!r} must be true or false, got {out[k]!r}")
    rule = out["loop_rule"]
    if rule not in RULE_DEFAULTS:
        raise NotImplementedError(f"loop_rule {rule!r} is not in this reference")
    out.update({k: cfg.get(k, v) for k, v in RULE_DEFAULTS[rule].items()})
    if rule == "gated":
        _number(out, "gate_sigma_x", lambda v: v >= 0, "a number >= 0")
        _number(out, "gate_sigma_g", lambda v: v >= 0, "a number >= 0")
        _number(out, "gate_tau", lambda v: v > 0, "a number > 0")
        _number(out, "gate_bias_init", lambda v: True, "a finite number")
    elif rule == "inject_linear":
        if not isinstance(out["inject_readout_norm"], bool):
            raise ValueError(f"config key 'inject_readout_norm' must be true or false, got {out['inject_readout_norm']!r}")
        if out["inject_state_init"] not in ("zero", "like_init"):
            raise ValueError(f"config key 'inject_state_init' must be zero or like_init, got {out['inject_state_init']!r}")
        _integer(out, "inject_state_seed", 0)
        if out["inject_state_seed"] > 2**31 - 1:  # the engine's range (0 .. INT32_MAX)
            raise ValueError(f"config key 'inject_state_seed' must be at most 2^31 - 1, got {out['inject_state_seed']}")
    elif rule == "residual":
        if not isinstance(out["loop_norm"], bool):
            raise ValueError(f"config key 'loop_norm' must be true or false, got {out['loop_norm']!r}")
    elif rule == "hyper":
        _integer(out, "hyper_streams", 1)
        _integer(out, "sinkhorn_iters", 1)
        if out["hyper_res"] not in ("diag", "sinkhorn"):
            raise ValueError(f"config key 'hyper_res' must be 'diag' or 'sinkhorn', got {out['hyper_res']!r}")
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
    """Causal attention; n_kv_heads < n_heads is grouped-query attention (query head h reads key/value
    head h // (n_heads / n_kv_heads), as Hugging Face's repeat_kv), d_head the head dimension."""

    def __init__(self, cfg):
        super().__init__()
        d, bias = cfg["d_model"], cfg["bias"]
        self.n_heads = cfg["n_heads"]
        self.n_kv = cfg["n_kv_heads"] or self.n_heads
        self.hd = cfg["d_head"] or d // self.n_heads
        self.use_rope, self.rope_base = cfg["pos"] == "rope", float(cfg["rope_base"])
        self.q = nn.Linear(d, self.n_heads * self.hd, bias=bias)
        self.k = nn.Linear(d, self.n_kv * self.hd, bias=bias)
        self.v = nn.Linear(d, self.n_kv * self.hd, bias=bias)
        self.o = nn.Linear(self.n_heads * self.hd, d, bias=bias)

    def forward(self, x):
        B, T, d = x.shape
        heads = lambda t, n: t.view(B, T, n, self.hd).transpose(1, 2)  # [B, n, T, hd]
        q, k, v = heads(self.q(x), self.n_heads), heads(self.k(x), self.n_kv), heads(self.v(x), self.n_kv)
        if self.use_rope:
            cos, sin = rope_cos_sin(T, self.hd, self.rope_base, x.dtype)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = self.n_heads // self.n_kv
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(self.hd)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        y = scores.softmax(dim=-1) @ v  # [B, H, T, hd]
        return self.o(y.transpose(1, 2).reshape(B, T, self.n_heads * self.hd))


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
    sandwich, peri_norm: n1 = attn_norm, n2 = attn_post_norm, n3 = mlp_norm, n4 = mlp_post_norm."""

    def __init__(self, cfg, alpha):
        super().__init__()
        d, kind, eps = cfg["d_model"], cfg["norm"], cfg["norm_eps"]
        self.kind, self.alpha = cfg["block"], alpha
        self.attn_norm = Norm(d, kind, eps)
        self.attn = Attention(cfg)
        self.mlp_norm = Norm(d, kind, eps)
        self.mlp = MLP(cfg)
        if self.kind in ("sandwich", "peri_norm"):
            self.attn_post_norm = Norm(d, kind, eps)
            self.mlp_post_norm = Norm(d, kind, eps)

    def forward(self, x):
        if self.kind == "pre_norm":
            x = x + self.attn(self.attn_norm(x))
            x = x + self.mlp(self.mlp_norm(x))
        elif self.kind == "parallel":
            x = x + self.attn(self.attn_norm(x)) + self.mlp(self.mlp_norm(x))
        elif self.kind == "peri_norm":  # Ouro: the sub-layer outputs normed, the stream not
            x = x + self.attn_post_norm(self.attn(self.attn_norm(x)))
            x = x + self.mlp_post_norm(self.mlp(self.mlp_norm(x)))
        else:  # sandwich
            a = self.alpha
            x = self.attn_post_norm(a * x + self.attn(self.attn_norm(x)))
            x = self.mlp_post_norm(a * x + self.mlp(self.mlp_norm(x)))
        return x


# ----------------------------------------------------------------------------- energy block (NRGPT)

def gelu_prime(u):
    """d/du GELU(u) for the exact erf GELU: Phi(u) + u * phi(u)."""
    Phi = 0.5 * (1.0 + torch.erf(u / math.sqrt(2.0)))
    phi = torch.exp(-0.5 * u * u) / math.sqrt(2.0 * math.pi)
    return Phi + u * phi


class GainlessLayerNorm(nn.Module):
    """LayerNorm with the gain fixed to 1 and a trainable bias (name: attn_norm.bias)."""

    def __init__(self, d, eps):
        super().__init__()
        self.eps = eps
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:], None, self.bias, self.eps)


class EnergyAttn(nn.Module):
    """attn.H.weight [n_heads*d, d]: head h's matrix H_h = rows h*d .. (h+1)*d - 1."""

    def __init__(self, d, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.H = nn.Linear(d, n_heads * d, bias=False)


class EnergyFF(nn.Module):
    """mlp.up = W (ff1) or W1 (ff2w), always with a bias; mlp.down = W2 with bias b2 (ff2w only)."""

    def __init__(self, d, f, kind):
        super().__init__()
        self.kind = kind
        self.up = nn.Linear(d, f, bias=True)
        if kind == "ff2w":
            self.down = nn.Linear(f, d, bias=True)


class DiagStep(nn.Module):
    """P = c * diag(gamma): step.gamma [d] (init 1), c fixed (config energy_c)."""

    def __init__(self, d, c):
        super().__init__()
        self.c = c
        self.gamma = nn.Parameter(torch.ones(d))

    def forward(self, v):
        return self.c * self.gamma * v


class EnergyBlock(nn.Module):
    """energy (NRGPT, docs/systems.md): one descent step on E = E_AT(g) + E_FF(g), g = LN(x) (no gain, bias b):

        s_ij^h = g_i^T H_h g_j                 (no scaling; keys j <= i, or j < i with energy_strict)
        A_i    = sum_h sum_j softmax_j(s_ij^h) H_h g_j          (= -grad of E_AT w.r.t. the query g_i only;
                                                                  a row with no allowed key gives 0)
        ff1:   E_FF = -|GELU(u)|^2, u = W g + b;   F = 2 W^T (GELU(u) GELU'(u))
        ff2w:  E_FF = -g^T (W2 GELU(u) + b2), u = W1 g + b1;
               F = (W2 GELU(u) + b2) + W1^T (GELU'(u) * (W2^T g))  (= -grad_g E_FF)
        x_new  = x + P (A + s_ff F)            P = step.weight (P v = v @ P^T) or c * diag(gamma)

    A and F are written analytically (autograd back-propagates through them: GELU'' through GELU').
    energy(x) gives the per-token energy E_i = -sum_h logsumexp_{j allowed} s_ij^h + E_FF,i at x."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.strict = cfg["energy_strict"]
        self.attn_norm = GainlessLayerNorm(d, cfg["norm_eps"])
        self.attn = EnergyAttn(d, cfg["n_heads"])
        self.mlp = EnergyFF(d, cfg["d_ff"], cfg["energy_ff"])
        self.ff_scale = nn.Parameter(torch.ones(1))
        if cfg["energy_P"] == "matrix":
            self.step = nn.Linear(d, d, bias=False)
        else:
            self.step = DiagStep(d, cfg["energy_c"])

    def scores(self, g, keys=None):
        """(s [B, nh, T, T] with rows that have no allowed key set to 0, allowed [T, T], has_key [T, 1],
        Hk [B, nh, T, d] = H_h k_j). keys (default g) are the g_j."""
        keys = g if keys is None else keys
        B, T, d = g.shape
        nh = self.attn.n_heads
        Hk = F.linear(keys, self.attn.H.weight).view(B, T, nh, d).transpose(1, 2)  # [B, nh, T, d]
        s = g[:, None] @ Hk.transpose(-1, -2)  # s[b, h, i, j] = g_i . (H_h k_j)
        allowed = torch.ones(T, T, dtype=torch.bool, device=g.device).tril(-1 if self.strict else 0)
        has_key = allowed.any(dim=-1, keepdim=True)  # [T, 1]; False only for row 0 when strict
        s = s.masked_fill(~allowed, float("-inf"))
        s = torch.where(has_key, s, torch.zeros_like(s))  # keyless rows: finite, weighted by 0 below
        return s, allowed, has_key, Hk

    def attn_update(self, g):
        """A [B, T, d] = sum_h sum_j softmax_j(s_ij^h) H_h g_j (0 for a row with no allowed key)."""
        s, _, has_key, Hk = self.scores(g)
        p = s.softmax(dim=-1) * has_key.to(s.dtype)
        return (p @ Hk).sum(dim=1)

    def attn_energy(self, g, keys=None):
        """E_AT,i [B, T] = -sum_h logsumexp_{j allowed} s_ij^h (0 for a row with no allowed key)."""
        s, _, has_key, _ = self.scores(g, keys)
        lse = torch.logsumexp(s, dim=-1) * has_key[:, 0].to(s.dtype)  # [B, nh, T]
        return -lse.sum(dim=1)

    def ff_energy(self, g):
        """E_FF [B, T]."""
        u = self.mlp.up(g)
        if self.mlp.kind == "ff1":
            return -F.gelu(u).pow(2).sum(-1)
        return -(g * self.mlp.down(F.gelu(u))).sum(-1)

    def ff_update(self, g):
        """F [B, T, d] = -grad_g E_FF, analytic."""
        u = self.mlp.up(g)
        if self.mlp.kind == "ff1":
            return 2.0 * (F.gelu(u) * gelu_prime(u)) @ self.mlp.up.weight  # 2 W^T (GELU(u) GELU'(u))
        W2 = self.mlp.down.weight  # [d, f]
        return self.mlp.down(F.gelu(u)) + (gelu_prime(u) * (g @ W2)) @ self.mlp.up.weight

    def energy(self, x):
        """Per-token energy [B, T] at the state x."""
        g = self.attn_norm(x)
        return self.attn_energy(g) + self.ff_energy(g)

    def forward(self, x):
        g = self.attn_norm(x)
        return x + self.step(self.attn_update(g) + self.ff_scale * self.ff_update(g))


# ----------------------------------------------------------------------------- cem block (CEM)

SOFTPLUS_INV_1 = math.log(math.e - 1.0)  # softplus^-1(1) = ln(e - 1) = 0.5413...: the preconditioner's p init


class CemAttn(nn.Module):
    """attn.q.weight = W_Q [d, d], attn.k.weight = W_K [d, d] (head k = rows k*hd .. (k+1)*hd - 1),
    attn.diag = d_shared [d] (init 0; absent with cem_diag false). No biases."""

    def __init__(self, d, n_heads, diag):
        super().__init__()
        self.n_heads, self.hd = n_heads, d // n_heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, d, bias=False)
        if diag:
            self.diag = nn.Parameter(torch.zeros(d))
        else:
            self.register_parameter("diag", None)


class CemMLP(nn.Module):
    """mlp.gate.weight = W_gate [f, d], mlp.up.weight = W_up [f, d] (down = W_up^T, not stored). No biases."""

    def __init__(self, d, f):
        super().__init__()
        self.gate = nn.Linear(d, f, bias=False)
        self.up = nn.Linear(d, f, bias=False)


class LowRankPrecond(nn.Module):
    """P = diag(softplus(p)) + U V^T + V U^T (symmetric), p [d] (init softplus^-1(1): P = I + U V^T + V U^T),
    U, V [d, r]. For a row vector u: P u = softplus(p) * u + (u @ V) @ U^T + (u @ U) @ V^T."""

    def __init__(self, d, r):
        super().__init__()
        self.p = nn.Parameter(torch.full((d,), SOFTPLUS_INV_1))
        self.U = nn.Parameter(torch.zeros(d, r))
        self.V = nn.Parameter(torch.zeros(d, r))

    def forward(self, u):
        return F.softplus(self.p) * u + (u @ self.V) @ self.U.t() + (u @ self.U) @ self.V.t()

    def matrix(self):
        """The explicit [d, d] matrix (for checks)."""
        return torch.diag(F.softplus(self.p)) + self.U @ self.V.t() + self.V @ self.U.t()


class CemBlock(nn.Module):
    """cem (CEM, docs/systems.md): two sub-layers, attention then MLP; each takes T = cem_T steps
    x <- x + P(update(x_hat, c_hat)) from x^(0) = c, where c = the sub-layer's input (fixed context) and
    x_hat = n(x), c_hat = n(c) with the sub-layer's RMSNorm (gain attn_norm / mlp_norm, eps norm_eps,
    always RMSNorm: config `norm` is norm_f's only). P = identity, or LowRankPrecond with cem_precond.

    attention (heads k, hd = d / n_heads; q = x_hat W_Q^T, kk = c_hat W_K^T, split into heads):
        s^k_ij = RoPE_i(q^k_i) . RoPE_j(kk^k_j) / sqrt(hd) + (x_hat_i * d_shared) . c_hat_j / sqrt(hd)   (j <= i)
        a^k_ij = softmax_j s^k_ij
        update_i = sum_k [ W_Q,k^T sum_j a^k_ij W_K,k c_hat_j  +  d_shared * sum_j a^k_ij c_hat_j ]
      (values W_K c_hat_j without RoPE, output map W_Q^T; RoPE only with pos = rope; the diagonal term is
      never rotated and is dropped with cem_diag false.)
    MLP:  update = W_up^T ( SiLU(W_gate c_hat) * (W_up x_hat) )
    The block output is the MLP sub-layer's final x. No biases anywhere (config `bias` and `mlp` do not
    apply). `T` (cem_T) can be overridden per call for checks."""

    def __init__(self, cfg):
        super().__init__()
        d, eps = cfg["d_model"], cfg["norm_eps"]
        self.T = cfg["cem_T"]
        self.use_rope, self.rope_base = cfg["pos"] == "rope", float(cfg["rope_base"])
        precond, r = cfg["cem_precond"], cfg["cem_precond_rank"]
        self.attn_norm = Norm(d, "rmsnorm", eps)
        self.attn = CemAttn(d, cfg["n_heads"], cfg["cem_diag"])
        if precond:
            self.attn_precond = LowRankPrecond(d, r)
        self.mlp_norm = Norm(d, "rmsnorm", eps)
        self.mlp = CemMLP(d, cfg["d_ff"])
        if precond:
            self.mlp_precond = LowRankPrecond(d, r)
        self.precond = precond

    # --- attention sub-layer
    def _heads(self, t):
        B, T, d = t.shape
        return t.view(B, T, self.attn.n_heads, self.attn.hd).transpose(1, 2)  # [B, H, T, hd]

    def attn_context(self, c_hat):
        """Keys (RoPE'd when pos = rope) and values (never rotated), both from W_K c_hat: [B, H, T, hd]."""
        kk = self._heads(F.linear(c_hat, self.attn.k.weight))
        keys = kk
        if self.use_rope:
            cos, sin = rope_cos_sin(c_hat.shape[1], self.attn.hd, self.rope_base, c_hat.dtype)
            keys = apply_rope(kk, cos, sin)
        return keys, kk

    def attn_probs(self, x_hat, c_hat, keys):
        """a [B, H, T, T] (causal softmax over the context positions j <= i)."""
        T = x_hat.shape[1]
        q = self._heads(F.linear(x_hat, self.attn.q.weight))
        if self.use_rope:
            cos, sin = rope_cos_sin(T, self.attn.hd, self.rope_base, x_hat.dtype)
            q = apply_rope(q, cos, sin)
        s = q @ keys.transpose(-1, -2)
        if self.attn.diag is not None:
            s = s + ((x_hat * self.attn.diag) @ c_hat.transpose(-1, -2))[:, None]  # same for every head
        s = s / math.sqrt(self.attn.hd)
        causal = torch.ones(T, T, dtype=torch.bool, device=x_hat.device).tril()
        return s.masked_fill(~causal, float("-inf")).softmax(dim=-1)

    def attn_update(self, x_hat, c_hat, ctx=None):
        """update [B, T, d] = sum_k W_Q,k^T (a^k W_K,k c_hat) (+ d_shared * sum_k a^k c_hat)."""
        keys, vals = self.attn_context(c_hat) if ctx is None else ctx
        a = self.attn_probs(x_hat, c_hat, keys)
        B, T, d = x_hat.shape
        o = (a @ vals).transpose(1, 2).reshape(B, T, d)  # head k's o^k in columns k*hd ..
        upd = o @ self.attn.q.weight  # sum_k o^k @ W_Q[k*hd:(k+1)*hd, :]
        if self.attn.diag is not None:
            upd = upd + self.attn.diag * (a.sum(dim=1) @ c_hat)
        return upd

    def attn_sublayer(self, c, T=None):
        c_hat = self.attn_norm(c)
        ctx = self.attn_context(c_hat)  # fixed for all T steps
        x = c
        for _ in range(self.T if T is None else T):
            u = self.attn_update(self.attn_norm(x), c_hat, ctx)
            x = x + (self.attn_precond(u) if self.precond else u)
        return x

    # --- MLP sub-layer
    def mlp_update(self, x_hat, c_hat):
        """update [B, T, d] = (silu(c_hat W_gate^T) * (x_hat W_up^T)) @ W_up."""
        return (F.silu(F.linear(c_hat, self.mlp.gate.weight)) * F.linear(x_hat, self.mlp.up.weight)) @ self.mlp.up.weight

    def mlp_sublayer(self, c, T=None):
        c_hat = self.mlp_norm(c)
        x = c
        for _ in range(self.T if T is None else T):
            u = self.mlp_update(self.mlp_norm(x), c_hat)
            x = x + (self.mlp_precond(u) if self.precond else u)
        return x

    # --- energies (checks only): update = -sqrt(hd) grad_{x_hat_i} E_attn without RoPE; = -grad E_mlp
    def attn_energy(self, x_hat, c_hat):
        """E_i [B, T] = -sum_k logsumexp_{j <= i} s^k_ij (the scores above, RoPE included when on)."""
        T = x_hat.shape[1]
        keys, _ = self.attn_context(c_hat)
        q = self._heads(F.linear(x_hat, self.attn.q.weight))
        if self.use_rope:
            cos, sin = rope_cos_sin(T, self.attn.hd, self.rope_base, x_hat.dtype)
            q = apply_rope(q, cos, sin)
        s = q @ keys.transpose(-1, -2)
        if self.attn.diag is not None:
            s = s + ((x_hat * self.attn.diag) @ c_hat.transpose(-1, -2))[:, None]
        s = s / math.sqrt(self.attn.hd)
        causal = torch.ones(T, T, dtype=torch.bool, device=x_hat.device).tril()
        return -torch.logsumexp(s.masked_fill(~causal, float("-inf")), dim=-1).sum(dim=1)

    def mlp_energy(self, x_hat, c_hat):
        """E_i [B, T] = -1/2 sum_f silu(W_gate c_hat)_f (W_up x_hat)_f^2."""
        return -0.5 * (F.silu(F.linear(c_hat, self.mlp.gate.weight)) * F.linear(x_hat, self.mlp.up.weight).pow(2)).sum(-1)

    def forward(self, h, T=None):
        return self.mlp_sublayer(self.attn_sublayer(h, T), T)


def make_block(cfg, alpha):
    if cfg["block"] == "energy":
        return EnergyBlock(cfg)
    if cfg["block"] == "cem":
        return CemBlock(cfg)
    return Block(cfg, alpha)


# ----------------------------------------------------------------------------- loop rules
# A loop rule holds the loop's own parameters (under "loop.") and defines
#     init_state(h_pre) -> state,   step(state, h_pre, core, r) -> state,   readout(state) -> h
# where core(x) applies all n_core blocks once and r = 1, 2, ... counts the loop steps.

class ResidualLoop(nn.Module):
    """residual (docs/systems.md, Status): h^(r) = core(h^(r-1)); no parameters. With loop_norm the
    model's final norm (its own weights) also stands between steps: h^(r) = core(norm_f(h^(r-1)))
    for r >= 2 (Nanbeige4.2, Ouro). final_norm is set by the model (a function, not a submodule:
    the weights stay norm_f's)."""

    def __init__(self, cfg):
        super().__init__()
        self.loop_norm = bool(cfg.get("loop_norm", False))
        self.final_norm = None

    def init_state(self, h_pre):
        return h_pre

    def readout(self, h):
        return h

    def step(self, h, h_pre, core, r):
        return core(self.final_norm(h) if self.loop_norm and r > 1 else h)

    def reset_parameters(self, cfg):
        pass


# The like_init state of inject_linear (docs/systems.md, Huginn's linear injection), written from
# that description: looplm's counter-based generator Rng(seed, stream, step) (splitmix64 on 64-bit
# integers; here Python ints masked to 64 bits), its uniform and Box-Muller normal in float64.
MASK64 = (1 << 64) - 1
STREAM_STATE = 6  # the generator's stream of the like_init state (kStreamState)


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


class CounterRng:
    """Rng(seed, stream, step): key = sm(sm(seed ^ 0x6a09e667f3bcc909) ^ stream) ^ sm(step + 0x3c6ef372fe94f82b);
    draw k (k = 0, 1, ...) is sm(key ^ sm(k)) (sm = splitmix64). uniform = (u >> 11) * 2^-53 in [0, 1);
    normal = Box-Muller on two uniforms u1, u2 (u1 floored at 1e-300): sqrt(-2 ln u1) cos(2 pi u2)."""

    def __init__(self, seed, stream, step):
        self.key = (splitmix64(splitmix64((seed ^ 0x6A09E667F3BCC909) & MASK64) ^ stream)
                    ^ splitmix64((step + 0x3C6EF372FE94F82B) & MASK64))
        self.counter = 0

    def next_u64(self):
        u = splitmix64(self.key ^ splitmix64(self.counter))
        self.counter += 1
        return u

    def uniform(self):
        return (self.next_u64() >> 11) * 2.0 ** -53

    def normal(self):
        u1 = self.uniform()
        u2 = self.uniform()
        u1 = max(u1, 1e-300)
        return math.sqrt(-2.0 * math.log(u1)) * math.cos(6.283185307179586 * u2)


def like_init_row(seed, position, d, sigma):
    """The like_init state of one position: d standard normals of CounterRng(seed, STREAM_STATE, position)
    in order, each outside [-3, 3] drawn again (the truncation), times sigma; float64 products rounded to
    float32 as the engine stores them."""
    rng = CounterRng(seed, STREAM_STATE, position & 0xFFFFFFFF)
    row = []
    for _ in range(d):
        z = rng.normal()
        while abs(z) > 3.0:
            z = rng.normal()
        row.append(sigma * z)
    return torch.tensor(row, dtype=torch.float64).float()


def like_init_state(seed, T, d, emb_scale, start=0):
    """[T, d] float32: rows for positions start .. start+T-1, sigma = emb_scale * sqrt(2 / (5 d))."""
    sigma = math.sqrt(2.0 / (5.0 * d)) * emb_scale
    return torch.stack([like_init_row(seed, start + t, d, sigma) for t in range(T)])


class InjectLinearLoop(nn.Module):
    """inject_linear (docs/systems.md, Huginn): s^(r) = core(W_proj [s^(r-1), h_pre]) (+ b_proj with
    biases); s^(0) = 0 (inject_state_init zero) or Huginn's like-init (like_init): per token position
    p the seeded truncated normal like_init_state (std emb_scale * sqrt(2/(5d)), cut at +-3 std), the
    same for every batch row and a constant (no gradient); with inject_readout_norm the exit reads
    norm_f(s) (norm_f's weights, set by the model as final_norm: a bound method, not a submodule)."""

    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.proj = nn.Linear(2 * d, d, bias=cfg["bias"])
        self.readout_norm = bool(cfg.get("inject_readout_norm", False))
        self.like_init = cfg.get("inject_state_init", "zero") == "like_init"
        self.seed = int(cfg.get("inject_state_seed", 0))
        self.emb_scale = float(cfg.get("emb_scale", 1.0))
        self._drawn = {}  # T -> the [T, d] float32 like_init state (a pure function of seed and T)
        self.final_norm = None

    def init_state(self, h_pre):
        if not self.like_init:
            return torch.zeros_like(h_pre)
        T, d = h_pre.shape[-2], h_pre.shape[-1]
        if T not in self._drawn:
            self._drawn[T] = like_init_state(self.seed, T, d, self.emb_scale)
        return self._drawn[T].to(dtype=h_pre.dtype, device=h_pre.device).expand_as(h_pre).clone()

    def readout(self, s):
        return self.final_norm(s) if self.readout_norm else s

    def step(self, s, h_pre, core, r):
        return core(self.proj(torch.cat([s, h_pre], dim=-1)))

    def reset_parameters(self, cfg):
        with torch.no_grad():
            self.proj.weight.normal_(0.0, cfg["init_std"])
            if self.proj.bias is not None:
                self.proj.bias.zero_()


class GateMLP(nn.Module):
    """f_g: Linear(2d -> d) -> SiLU -> Linear(d -> d), both with bias."""

    def __init__(self, d):
        super().__init__()
        self.fc1 = nn.Linear(2 * d, d)
        self.fc2 = nn.Linear(d, d)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x)))


class GatedLoop(nn.Module):
    """gated (RecurrentGPT, docs/systems.md). State h, h^(0) = h_pre; step r:

        h~      = W_proj [h + eps_x, h_pre]                 (+ b_proj when config bias = true)
        o       = core(h~)
        g       = sigmoid( f_g([LN_a(h), LN_b(h_pre)]) / tau + eps_g )
        h_new   = g * h + (1 - g) * o

    eps_x ~ N(0, sigma_x^2), eps_g ~ N(0, sigma_g^2) per element per step, in training mode only
    (module.training; none drawn when the sigma is 0). h is the clean previous state everywhere
    except inside W_proj."""

    def __init__(self, cfg):
        super().__init__()
        d, kind, eps = cfg["d_model"], cfg["norm"], cfg["norm_eps"]
        self.sigma_x, self.sigma_g, self.tau = cfg["gate_sigma_x"], cfg["gate_sigma_g"], cfg["gate_tau"]
        self.proj = nn.Linear(2 * d, d, bias=cfg["bias"])
        self.norm_a = Norm(d, kind, eps)  # on h^(r-1)
        self.norm_b = Norm(d, kind, eps)  # on h_pre
        self.gate = GateMLP(d)

    def init_state(self, h_pre):
        return h_pre

    def readout(self, h):
        return h

    def noise(self, like, sigma):
        if self.training and sigma > 0:
            return sigma * torch.randn_like(like)
        return torch.zeros_like(like)

    def gate_values(self, h, h_pre):
        """g = sigmoid(f_g([LN_a(h), LN_b(h_pre)]) / tau + eps_g)."""
        a = self.gate(torch.cat([self.norm_a(h), self.norm_b(h_pre)], dim=-1)) / self.tau
        return torch.sigmoid(a + self.noise(a, self.sigma_g))

    def step(self, h, h_pre, core, r):
        h_tilde = self.proj(torch.cat([h + self.noise(h, self.sigma_x), h_pre], dim=-1))
        o = core(h_tilde)
        g = self.gate_values(h, h_pre)
        return g * h + (1 - g) * o

    @torch.no_grad()
    def reset_parameters(self, cfg):
        """W_proj, fc1, fc2 weights N(0, init_std); proj and fc1 biases 0, fc2 bias gate_bias_init;
        norms weight 1, bias 0."""
        std = cfg["init_std"]
        for lin in (self.proj, self.gate.fc1, self.gate.fc2):
            lin.weight.normal_(0.0, std)
            if lin.bias is not None:
                lin.bias.zero_()
        self.gate.fc2.bias.fill_(cfg["gate_bias_init"])
        for norm in (self.norm_a, self.norm_b):
            norm.weight.fill_(1.0)
            if norm.kind == "layernorm":
                norm.bias.zero_()


class StreamMap(nn.Module):
    """One hyper-connection map: alpha * (W z) + b, W [m, n*d] (no bias of its own), alpha [1],
    b of shape bias_shape (flattened row-major to m values)."""

    def __init__(self, m, nd, bias_shape):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(m, nd))
        self.alpha = nn.Parameter(torch.empty(1))
        self.bias = nn.Parameter(torch.empty(bias_shape))

    def forward(self, z):
        return self.alpha * F.linear(z, self.weight) + self.bias.reshape(-1)


class HyperMaps(nn.Module):
    """The maps of one loop l: pre, res, post (names loop.{l}.pre.* etc.)."""

    def __init__(self, n, d, sinkhorn):
        super().__init__()
        self.pre = StreamMap(n, n * d, (n,))
        self.res = StreamMap(n * n, n * d, (n, n)) if sinkhorn else StreamMap(n, n * d, (n,))
        self.post = StreamMap(n, n * d, (n,))


def sinkhorn(L, iters):
    """Sinkhorn-Knopp on [.., n, n] logits: M = exp(L - max L); iters x (rows to sum 1, then columns).
    The max is a constant shift (the result does not depend on it), so it carries no gradient."""
    M = torch.exp(L - L.amax(dim=(-2, -1), keepdim=True).detach())
    for _ in range(iters):
        M = M / M.sum(dim=-1, keepdim=True)  # every row sums to 1
        M = M / M.sum(dim=-2, keepdim=True)  # every column sums to 1
    return M


class HyperLoop(nn.Module):
    """hyper (Hyperloop, docs/systems.md; mHC with hyper_res = sinkhorn). State Y: n streams stored as
    [.., n*d] (stream s = features s*d .. (s+1)*d - 1); Y^(0) = n copies of h_pre; readout = mean
    of the streams. Step r uses the maps and embedding of loop l = min(r, R) - 1:

        z      = Y / sqrt(mean(Y^2) + 1e-20)                          (over all n*d features)
        H_pre  = sigmoid(alpha_pre (W_pre z) + b_pre)                  [n]
        x      = core(sum_s H_pre[s] Y_s) + loop_emb[l]
        H_post = 2 sigmoid(alpha_post (W_post z) + b_post)             [n]
        diag:      H_res = sigmoid(alpha_res (W_res z) + b_res)  [n];   Y_s <- H_res[s] Y_s + H_post[s] x
        sinkhorn:  H_res = Sinkhorn(alpha_res (W_res z) + b_res as n x n, row-major);
                   Y_s <- sum_t H_res[s, t] Y_t + H_post[s] x
    """

    def __init__(self, cfg):
        super().__init__()
        self.n, self.d, self.R = cfg["hyper_streams"], cfg["d_model"], cfg["R"]
        self.use_sinkhorn, self.iters = cfg["hyper_res"] == "sinkhorn", cfg["sinkhorn_iters"]
        for l in range(self.R):
            self.add_module(str(l), HyperMaps(self.n, self.d, self.use_sinkhorn))
        self.emb = nn.Embedding(self.R, self.d)

    def maps(self, l):
        return self._modules[str(l)]

    def loop_index(self, r):
        return min(r, self.R) - 1

    def streams(self, Y):
        return Y.reshape(*Y.shape[:-1], self.n, self.d)  # [.., n, d]

    def init_state(self, h_pre):
        return torch.cat([h_pre] * self.n, dim=-1)

    def readout(self, Y):
        return self.streams(Y).mean(dim=-2)

    def coefficients(self, Y, l):
        """H_pre [.., n], H_res ([.., n] or [.., n, n]), H_post [.., n] of loop l from the state Y."""
        maps = self.maps(l)
        z = Y / torch.sqrt(Y.pow(2).mean(dim=-1, keepdim=True) + 1e-20)
        H_pre = torch.sigmoid(maps.pre(z))
        H_post = 2 * torch.sigmoid(maps.post(z))
        if self.use_sinkhorn:
            L = maps.res(z).reshape(*z.shape[:-1], self.n, self.n)  # L[s, t] = element s*n + t
            H_res = sinkhorn(L, self.iters)
        else:
            H_res = torch.sigmoid(maps.res(z))
        return H_pre, H_res, H_post

    def step(self, Y, h_pre, core, r):
        l = self.loop_index(r)
        H_pre, H_res, H_post = self.coefficients(Y, l)
        Ys = self.streams(Y)
        x = core((H_pre[..., None] * Ys).sum(dim=-2))
        x = x + self.emb.weight[l]
        if self.use_sinkhorn:
            mixed = H_res @ Ys  # [.., n, n] @ [.., n, d]: sum_t H_res[s, t] Y_t
        else:
            mixed = H_res[..., None] * Ys
        Y_new = mixed + H_post[..., None] * x[..., None, :]
        return Y_new.reshape(Y.shape)

    @torch.no_grad()
    def reset_parameters(self, cfg):
        """Every W ~ U(+-1/sqrt(n*d)) (PyTorch's default Linear bound); every alpha 0.01;
        b_pre 1/n; b_res 1 (diag) or the identity (sinkhorn); b_post 0; loop_emb N(0, init_std)."""
        n, bound = self.n, 1.0 / math.sqrt(self.n * self.d)
        for l in range(self.R):
            maps = self.maps(l)
            for m in (maps.pre, maps.res, maps.post):
                m.weight.uniform_(-bound, bound)
                m.alpha.fill_(0.01)
            maps.pre.bias.fill_(1.0 / n)
            if self.use_sinkhorn:
                maps.res.bias.copy_(torch.eye(n, dtype=maps.res.bias.dtype))
            else:
                maps.res.bias.fill_(1.0)
            maps.post.bias.zero_()
        self.emb.weight.normal_(0.0, cfg["init_std"])


LOOP_RULES = {"residual": ResidualLoop, "gated": GatedLoop, "hyper": HyperLoop, "inject_linear": InjectLinearLoop}


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
        self.prelude = nn.ModuleList(make_block(cfg, alpha) for _ in range(cfg["n_prelude"]))
        self.core = nn.ModuleList(make_block(cfg, alpha) for _ in range(cfg["n_core"]))
        self.coda = nn.ModuleList(make_block(cfg, alpha) for _ in range(cfg["n_coda"]))
        self.loop = LOOP_RULES[cfg["loop_rule"]](cfg)  # parameters "loop.*" (none for residual)
        if cfg["exit_gate"]:  # the learned exit gate (any rule): lambda_r = sigmoid(w . x_r + b), "loop.exit_gate.*"
            self.loop.exit_gate = nn.Linear(d, 1)
        self.norm_f = Norm(d, cfg["norm"], cfg["norm_eps"])
        if isinstance(self.loop, (ResidualLoop, InjectLinearLoop)):
            # a bound method, not a closure: copy.deepcopy (and .double()) then rebind it to the copy's norm_f
            self.loop.final_norm = self.norm_f.__call__
        if not cfg["tie_embeddings"]:
            self.lm_head = nn.Linear(d, V, bias=cfg["bias"])
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self):
        """N(0, init_std) for matrices/embeddings; attn.o and mlp.down (and the energy block's
        step.weight) scaled by 1/sqrt(2N); 1-D non-bias params (norm weights, energy ff_scale and
        step.gamma) 1; biases 0 (the energy block's attn_norm.bias and mlp biases too);
        with deeploop_p > 0 instead attn.v, attn.o and every MLP matrix scaled by beta = (8N)^(-p).
        cem blocks: attn.q/k, mlp.gate/up and the preconditioners' U, V N(0, init_std) (no output
        scaling: W_Q and W_up are also the output maps), attn.diag 0, *_precond.p softplus^-1(1).
        The loop rule's own parameters ("loop.*") are drawn afterwards by the rule."""
        cfg = self.cfg
        N, p, std = unrolled_depth(cfg), cfg["deeploop_p"], cfg["init_std"]
        for name, w in self.named_parameters():
            if name.startswith("loop."):
                continue
            if name.endswith((".bias", ".attn.diag")):  # cem: d_shared starts at 0
                w.zero_()
            elif name.endswith("_precond.p"):  # cem: softplus(p) = 1
                w.fill_(SOFTPLUS_INV_1)
            elif w.ndim == 1:  # norm weights
                w.fill_(1.0)
            else:
                w.normal_(0.0, std)
                if p > 0:
                    if any(s in name for s in (".attn.v.", ".attn.o.", ".mlp.")):
                        w.mul_((8 * N) ** (-p))
                elif any(s in name for s in (".attn.o.", ".mlp.down.", ".step.weight")):
                    w.mul_(1.0 / math.sqrt(2 * N))
        self.loop.reset_parameters(cfg)
        if cfg["exit_gate"]:  # w ~ N(0, init_std), b = 0: lambda near 1/2 at every exit
            self.loop.exit_gate.weight.normal_(0.0, std)
            self.loop.exit_gate.bias.zero_()

    # --- pieces
    def embed(self, tokens):
        h = self.tok_emb(tokens)
        if self.cfg["pos"] == "learned":
            h = h + self.pos_emb.weight[: tokens.shape[1]]
        if self.cfg["emb_scale"] != 1.0:  # Huginn: sqrt(d)
            h = h * self.cfg["emb_scale"]
        for blk in self.prelude:
            h = blk(h)
        return h  # h_pre = h^(0)

    def apply_core(self, x):
        """One application of the core: all n_core blocks in order."""
        for blk in self.core:
            x = blk(x)
        return x

    def loop_step(self, state, h_pre, r):
        """Loop step r = 1, 2, ... of the configured rule (state -> state)."""
        return self.loop.step(state, h_pre, self.apply_core, r)

    def final_hidden(self, h):
        """Loop state -> coda -> norm_f: what the lm_head (and an exit gate) reads."""
        for blk in self.coda:
            h = blk(h)
        return self.norm_f(h)

    def exit_logits(self, h):
        """Loop state -> coda -> norm_f -> lm_head."""
        h = self.final_hidden(h)
        if self.cfg["tie_embeddings"]:
            return h @ self.tok_emb.weight.t()
        return self.lm_head(h)

    def gate(self, final_hidden):
        """The exit gate's lambda [..., 1] from the hidden state the lm_head reads (Ouro's early_exit_gate)."""
        return torch.sigmoid(self.loop.exit_gate(final_hidden))

    def exit_gates(self, tokens, R=None):
        """The learned exit gate's lambda [B, T] at every exit r = 1..R (exit_gate)."""
        return [self.gate(self.final_hidden(h)).squeeze(-1) for h in self.loop_states(tokens, R)[1:]]

    # --- the exit gate's training objectives (docs/systems.md, Learned exit gate)
    def head_of(self, final_hidden):
        if self.cfg["tie_embeddings"]:
            return final_hidden @ self.tok_emb.weight.t()
        return self.lm_head(final_hidden)

    def exit_terms(self, tokens, targets, grad_steps=None):
        """Per exit r = 0..R: (per-token loss [B*T], lambda [B*T], final hidden state). Under
        truncated back-propagation the state of a step without gradients is detached (loop_states),
        and its exit's coda, head and gate still get their gradients (the engine's rule)."""
        out = []
        for h in self.loop_states(tokens, self.cfg["R"], grad_steps):
            fh = self.final_hidden(h)
            z = self.head_of(fh)
            loss = F.cross_entropy(z.reshape(-1, z.shape[-1]), targets.reshape(-1), reduction="none")
            out.append((loss, self.gate(fh).reshape(-1), fh))
        return out

    @staticmethod
    def exit_distribution(lams):
        """p_r = lambda_r prod_{j<r} (1 - lambda_j) for r < R, the last exit taking what is left."""
        left, p = torch.ones_like(lams[0]), []
        for lam in lams[:-1]:
            p.append(lam * left)
            left = left * (1 - lam)
        return p + [left]

    def exit_objective(self, tokens, targets, prior="token", beta=0.05, grad_steps=None):
        """Stage I: mean_n sum_r p_r L_r - beta H, H the mean entropy of each token's p (token) or
        the entropy of the mean p (batch)."""
        terms = self.exit_terms(tokens, targets, grad_steps)[1:]
        p = torch.stack(self.exit_distribution([lam for _, lam, _ in terms]))  # [R, N]
        L = torch.stack([loss for loss, _, _ in terms])
        expected = (p * L).sum(0).mean()
        if prior == "token":
            H = -(p * torch.log(p)).sum(0).mean()
        else:
            pbar = p.mean(1)
            H = -(pbar * torch.log(pbar)).sum()
        return expected - beta * H

    def exit_gate_alone(self, tokens, targets, k=50.0, gamma=0.005):
        """Stage II: the model frozen; BCE of 1 - lambda_r against w_r = sigmoid(k (max(0, L_(r-1) -
        L_r) - gamma)), r = 1..R (L_0: exit 0), mean over tokens and exits."""
        with torch.no_grad():
            terms = self.exit_terms(tokens, targets)
        total = 0.0
        for r in range(1, len(terms)):
            w = torch.sigmoid(k * (torch.clamp(terms[r - 1][0] - terms[r][0], min=0) - gamma))
            zlogit = self.loop.exit_gate(terms[r][2]).reshape(-1)
            total = total + (w * F.softplus(zlogit) + (1 - w) * F.softplus(-zlogit)).mean()
        return total / (len(terms) - 1)

    def loop_states(self, tokens, R=None, grad_steps=None):
        """[h^(0), h^(1), ..., h^(R)], h^(r) = readout(state after step r) (h^(0) = h_pre).
        grad_steps = k: truncated back-propagation, only the last k loop steps keep gradients (the
        earlier ones run under no_grad, their output detached; h_pre keeps its gradient in the
        steps that read it)."""
        R = self.cfg["R"] if R is None else R
        h_pre = self.embed(tokens)
        state = self.loop.init_state(h_pre)
        states = [self.loop.readout(state)]
        for r in range(1, R + 1):
            if grad_steps is not None and r <= R - grad_steps:
                with torch.no_grad():
                    state = self.loop_step(state, h_pre, r).detach()
            else:
                state = self.loop_step(state, h_pre, r)
            states.append(self.loop.readout(state))
        return states

    # --- public API
    def forward(self, tokens, R=None, grad_steps=None):
        """Logits [B, T, V] at depth R (default: the configured R); grad_steps as in loop_states."""
        return self.exit_logits(self.loop_states(tokens, R, grad_steps)[-1])

    @staticmethod
    def loss(logits, targets):
        """Mean token cross-entropy."""
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))

    def energies(self, tokens, R=None):
        """Energy block diagnostics: [E(h^(0)), ..., E(h^(R))], each [B, T] = the per-token energy of
        the first core block (an energy block) at the loop state, i.e. E of step r's input for
        r = 1..R and of the final state last (docs/systems.md, NRGPT)."""
        assert self.cfg["block"] == "energy", "energies() needs energy blocks"
        return [self.core[0].energy(h) for h in self.loop_states(tokens, R)]

    def loss_by_depth(self, tokens, targets, R=None):
        """Loss at every exit r = 1..R (tensor [R])."""
        states = self.loop_states(tokens, R)
        return torch.stack([self.loss(self.exit_logits(h), targets) for h in states[1:]])


def param_groups(model, weight_decay):
    """AdamW groups: weight decay only on params with ndim >= 2."""
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    return [dict(params=decay, weight_decay=weight_decay), dict(params=no_decay, weight_decay=0.0)]
