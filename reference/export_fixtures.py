"""Write tests/fixtures/{dense,looped,sandwich,parallel,gated,hyper,mhc,energy,energy_ff1,cem,cem_precond,
cem_nodiag,loop_norm,ouro,huginn,gqa,huginn_like_init,exit_gate}.safetensors
(and the init statistics tests/fixtures/init/*.safetensors) from the PyTorch reference.

    /usr/bin/python3 reference/export_fixtures.py [--out tests/fixtures] [NAME ...]

NAME (a fixture such as energy, or an init set such as init_energy) writes only those files.

Every fixture is computed in float64 from float32 weights (the stored ones), so the stored outputs
are exact up to their float32 rounding. Tensors (F32 unless noted):
    <param name>            initial weights (norm weights/biases and linear biases perturbed,
                            attn.q/k and mlp.gate/up redrawn N(0, 1/d), loop-rule params
                            perturbed per rule, energy blocks per perturb_energy(), cem blocks per
                            perturb_cem(); see perturb())
    input.tokens [B,T] I32, input.targets [B,T] I32
    out.logits [B,T,V]      at depth R
    out.loss [1]            mean CE at depth R;  out.loss_by_depth [R+2]: loss at exits r = 1..R+2
                            (two exits beyond the trained R)
    state.{r} [B,T,d]       exit state h^(r) = readout(loop state after step r), r = 0..R+2
                            (state.0 = h_pre; hyper: the mean of the streams)
    grad.{param}            d out.loss / d param
    bptt.grad.{param}       (R > 1 only) the same with truncated back-propagation: only the last
                            bptt_k (metadata) loop steps keep gradients; zeros where none arrives
    train.loss [K]          loss before each of K AdamW steps (same batch, depth R)
    train.grad_norm [K]     total grad L2 norm before clipping, per step
    after.{param}           params after K steps
    energy.{r} [B*T]        (energy blocks only) per-token energy of step r's input state h^(r-1),
                            r = 1..R+3 (every dumped state: energy.{R+1} is the trained depth's
                            final state, energy.{R+3} that of state.{R+2}); LoopLM.energies
    gate.{r} [B*T]          (exit_gate only) the learned exit gate's lambda at exit r = 1..R+2
    exit.{token,batch}.loss [1], exit.{token,batch}.grad.{param}
                            (exit_gate only) stage I at depth R (beta EXIT_BETA) and its gradients;
    exit.token_bptt.*       the same under truncated back-propagation (bptt_k steps keep gradients)
    exit.stage2.loss [1], exit.stage2.grad.loop.exit_gate.{weight,bias}
                            stage II (k EXIT_K, gamma EXIT_GAMMA) and the gate's gradients
"""
import argparse
import copy
import json
import os
import sys

try:
    import torch
except ImportError:
    sys.exit(f"{__file__}: needs PyTorch. Install Debian's build (apt-get install python3-torch) and run "
             "this script with /usr/bin/python3.")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from looplm_ref import SOFTPLUS_INV_1, LoopLM, param_groups, resolve_config  # noqa: E402
from safetensors_io import save_file  # noqa: E402

FIXTURE_VERSION = "2"
BEYOND = 2   # exits checked beyond the trained R
BPTT_K = 1   # loop steps that keep gradients in the bptt.grad.* tensors
B, T, K = 2, 11, 3
EXIT_BETA, EXIT_K, EXIT_GAMMA = 0.3, 5.0, 0.01  # k small enough that w_r is not 0/1 on random weights
TRAIN = dict(lr=0.01, weight_decay=0.1, beta1=0.9, beta2=0.95, adam_eps=1e-8, grad_clip=1.0)
COMMON = dict(vocab_size=37, d_model=18, n_heads=3, context=11)

FIXTURES = {
    "dense": dict(n_core=3, R=1, d_ff=28, block="pre_norm", norm="rmsnorm", mlp="swiglu",
                  pos="rope", bias=False, tie_embeddings=True),
    "looped": dict(n_prelude=1, n_core=2, R=3, n_coda=1, d_ff=20, block="pre_norm",
                   norm="layernorm", mlp="gelu", pos="learned", bias=True, tie_embeddings=False),
    "sandwich": dict(n_core=2, R=3, d_ff=0, block="sandwich", norm="rmsnorm", mlp="gelu",
                     pos="rope", bias=False, tie_embeddings=True, deeploop_p=0.5),
    "parallel": dict(n_core=2, R=2, d_ff=0, block="parallel", norm="layernorm", mlp="gelu",
                     pos="none", bias=True, tie_embeddings=True),
    # noise off: the engine's and torch's RNGs can never match, so fixtures are noise-free
    "gated": dict(n_prelude=1, n_core=1, R=3, n_coda=1, d_ff=20, block="pre_norm", norm="layernorm",
                  mlp="gelu", pos="learned", bias=True, tie_embeddings=False, loop_rule="gated",
                  gate_tau=0.7, gate_sigma_x=0.0, gate_sigma_g=0.0),
    "hyper": dict(n_prelude=1, n_core=2, R=2, n_coda=1, d_ff=28, block="pre_norm", norm="rmsnorm",
                  mlp="swiglu", pos="rope", bias=False, tie_embeddings=True, loop_rule="hyper",
                  hyper_streams=3, hyper_res="diag"),
    "mhc": dict(n_prelude=1, n_core=1, R=3, n_coda=1, d_ff=28, block="pre_norm", norm="rmsnorm",
                mlp="swiglu", pos="rope", bias=False, tie_embeddings=True, loop_rule="hyper",
                hyper_streams=4, hyper_res="sinkhorn", sinkhorn_iters=20),
    # NRGPT (one `block` key covers every section, so no pre_norm prelude here). d 16, 2 heads:
    # attn.H.weight is [2*16, 16]. `bias` and `mlp` do not apply to energy blocks (their mlp
    # biases always exist); `norm` is norm_f's only. energy_ff1 uses rmsnorm for norm_f (so an
    # energy block that followed `norm` instead of its own gainless LayerNorm shows), bias false
    # (the block's biases must exist anyway), an untied head without bias and d_ff 40 (not 4d).
    "energy": dict(d_model=16, n_heads=2, n_core=1, R=3, d_ff=0, block="energy", energy_ff="ff2w",
                   energy_P="matrix", energy_strict=False, norm="layernorm", pos="learned",
                   bias=True, tie_embeddings=True),
    "energy_ff1": dict(d_model=16, n_heads=2, n_core=1, R=2, d_ff=40, block="energy", energy_ff="ff1",
                       energy_P="diag", energy_c=0.1, energy_strict=True, norm="rmsnorm", pos="learned",
                       bias=False, tie_embeddings=False),
    # CEM (docs/systems.md): d 16, 2 heads (hd 8). cem: the paper's T = 2 with the diagonal term and RoPE,
    # d_ff 4d, tied. cem_precond: both preconditioners (rank 3), T = 3, two core blocks, learned
    # positions (no RoPE), d_ff 40 (not 4d). cem_nodiag: T = 1 (one standard-layer step), no
    # attn.diag, RoPE, R 3; norm_f is a layernorm, bias true and an untied head (lm_head.bias), so a
    # cem block that followed `norm` (a LayerNorm, attn_norm.bias) or `bias` shows in the tensor set.
    "cem": dict(d_model=16, n_heads=2, n_core=1, R=2, d_ff=0, block="cem", cem_T=2, cem_diag=True,
                cem_precond=False, pos="rope", norm="rmsnorm", bias=False, tie_embeddings=True),
    "cem_precond": dict(d_model=16, n_heads=2, n_core=2, R=2, d_ff=40, block="cem", cem_T=3, cem_diag=True,
                        cem_precond=True, cem_precond_rank=3, pos="learned", norm="rmsnorm", bias=False,
                        tie_embeddings=True),
    "cem_nodiag": dict(d_model=16, n_heads=2, n_core=1, R=3, d_ff=0, block="cem", cem_T=1, cem_diag=False,
                       cem_precond=False, pos="rope", norm="layernorm", bias=True, tie_embeddings=False),
    # The residual rule with loop_norm (Nanbeige4.2's layout: the whole stack looped, the final norm
    # between loops, untied head).
    "loop_norm": dict(n_core=2, R=3, d_ff=28, block="pre_norm", norm="rmsnorm", mlp="swiglu",
                      pos="rope", bias=False, tie_embeddings=False, loop_norm=True),
    # Ouro's layout: peri_norm blocks (sub-layer outputs normed), the final norm between loops, and
    # the learned exit gate (gate.{r}: its lambda at every exit)
    "ouro": dict(n_core=2, R=3, d_ff=28, block="peri_norm", norm="rmsnorm", mlp="swiglu", pos="rope",
                 rope_base=1e6, bias=False, tie_embeddings=False, loop_norm=True, exit_gate=True),
    # Huginn's layout: prelude, sandwich core looped with the linear injection of [state, h_pre] from
    # a zero state, coda; the embedding scaled by sqrt(d); norm_f before the coda and after it;
    # biases on (Huginn's q/k biases: looplm's bias covers every linear)
    "huginn": dict(n_prelude=1, n_core=2, R=3, n_coda=1, d_ff=28, block="sandwich", norm="rmsnorm", mlp="swiglu",
                   pos="rope", rope_base=50000.0, bias=True, tie_embeddings=True, loop_rule="inject_linear",
                   inject_readout_norm=True, emb_scale=18 ** 0.5),
    # Nanbeige4.2-3B's attention: grouped-query (4 query heads on 2 key/value heads) with a head
    # dimension that is not d_model / n_heads (4 x 6 = 24 query columns on d_model 18); q/k/v biases
    # as Qwen2's; looped with the boundary norm
    "gqa": dict(n_heads=4, n_kv_heads=2, d_head=6, n_core=2, R=2, d_ff=28, block="pre_norm", norm="rmsnorm",
                mlp="swiglu", pos="rope", rope_base=1e6, bias=True, tie_embeddings=False, loop_norm=True),
    # huginn's layout with Huginn's like-init state: s^(0) per position a seeded truncated normal
    # (std emb_scale * sqrt(2/(5d)) = 0.632, cut at +-3 std) from looplm's counter-based generator.
    # Seed 1234567 (bits above 16 set) redraws two values outside +-3 within the 11 positions, so
    # the truncation is exercised too.
    "huginn_like_init": dict(n_prelude=1, n_core=2, R=3, n_coda=1, d_ff=28, block="sandwich", norm="rmsnorm",
                             mlp="swiglu", pos="rope", rope_base=50000.0, bias=True, tie_embeddings=True,
                             loop_rule="inject_linear", inject_readout_norm=True, emb_scale=18 ** 0.5,
                             inject_state_init="like_init", inject_state_seed=1234567),
    # The learned exit gate on another rule than Ouro's (gated, noise off) with a coda (run at every exit):
    # its stage I objectives (both priors, and under truncated back-propagation) and stage II.
    "exit_gate": dict(n_core=1, R=3, n_coda=1, d_ff=20, block="pre_norm", norm="layernorm",
                      mlp="gelu", pos="learned", bias=False, tie_embeddings=False, loop_rule="gated",
                      gate_tau=0.7, gate_sigma_x=0.0, gate_sigma_g=0.0, exit_gate=True),
}


def full_config(name):
    cfg = resolve_config({**COMMON, **FIXTURES[name]})
    return {**cfg, **TRAIN}


def perturb(model, gen):
    """Make the fixture discriminative. Norm weights/biases and linear biases move off 1/0 so their
    gradients are meaningful; attn.q/k and mlp.gate/up are redrawn from N(0, 1/d_model) so that
    attention scores and MLP pre-activations are O(1) (at init_std 0.02 they are ~1e-3 and RoPE,
    the softmax scale or erf-vs-tanh GELU would barely show in the outputs). The loop rule's own
    parameters ("loop.*") are perturbed by perturb_loop(), energy blocks' by perturb_energy(), cem
    blocks' by perturb_cem()."""
    d = model.cfg["d_model"]
    block = model.cfg["block"]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.startswith("loop."):
                perturb_loop(model.cfg, n, p, gen)
            elif block == "energy" and n.startswith(("prelude.", "core.", "coda.")):
                perturb_energy(model.cfg, n, p, gen)
            elif block == "cem" and n.startswith(("prelude.", "core.", "coda.")):
                perturb_cem(model.cfg, n, p, gen)
            elif p.ndim == 1:
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
            elif any(s in n for s in (".attn.q.", ".attn.k.", ".mlp.gate.", ".mlp.up.")):
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) / d ** 0.5)



def perturb_energy(cfg, name, p, gen):
    """Energy block (NRGPT). At init (init_std 0.02) the scores g_i^T H_h g_j are ~0.01 (uniform
    attention), F is ~1e-3 and P ~ 0.02/sqrt(2N): the state would hardly move. Redrawn so that
    everything is O(1) and nothing degenerate (|g|^2 ~ d):
      attn.H.weight  N(0, 1/d^2)     scores ~ N(0, 1): attention neither uniform nor one-hot
      mlp.up.weight  N(0, 1/d)       u = W g + b ~ N(0, 1): GELU, GELU' and GELU'' all in play
      mlp.up.bias    N(0, 0.3^2)     (init 0)
      mlp.down.weight N(0, 1/f)      W2 GELU(u) and W2^T g O(1)          (ff2w)
      mlp.down.bias  N(0, 0.3^2)     (init 0)                            (ff2w)
      attn_norm.bias N(0, 0.3^2)     (init 0)
      ff_scale       U(0.5, 1.5)     (init 1)
      step.weight    N(0, 0.3^2/d)   P v ~ 0.3 |v| / sqrt(d) per element: the state moves O(0.3)
                                     per step, while the embeddings are ~0.02 (init std)
      step.gamma     U(0.5, 1.5)     (init 1; P = c diag(gamma), c = energy_c)"""
    d, f = cfg["d_model"], cfg["d_ff"]
    rnd = lambda: torch.randn(p.shape, generator=gen, dtype=p.dtype)
    uni = lambda: 0.5 + torch.rand(p.shape, generator=gen, dtype=p.dtype)
    leaf = name.split(".", 2)[2]  # after "{section}.{i}."
    if leaf == "attn.H.weight":
        p.copy_(rnd() / d)
    elif leaf == "mlp.up.weight":
        p.copy_(rnd() / d ** 0.5)
    elif leaf == "mlp.down.weight":
        p.copy_(rnd() / f ** 0.5)
    elif leaf in ("mlp.up.bias", "mlp.down.bias", "attn_norm.bias"):
        p.copy_(0.3 * rnd())
    elif leaf == "step.weight":
        p.copy_(0.3 * rnd() / d ** 0.5)
    elif leaf in ("ff_scale", "step.gamma"):
        p.copy_(uni())
    else:
        raise AssertionError(f"no perturbation for {name}")


def perturb_cem(cfg, name, p, gen):
    """cem block (CEM). At init (init_std 0.02) the scores are ~1e-3 (uniform attention), d_shared
    is 0, the updates are ~1e-3 and P = I + O(1e-3): neither the diagonal term nor the preconditioner
    would show. Redrawn (|x_hat|^2 ~ d):
      attn.q/k.weight, mlp.gate/up.weight  N(0, 1/d)   q, kk, W_gate c_hat, W_up x_hat ~ N(0, 1): the
                                        scores O(1), SiLU in its curved range; the updates O(1)
      attn.diag          N(0, 0.5^2)    (init 0) the diagonal score term ~ N(0, 0.5^2 d/hd) and its
                                        update d_shared * sum_j a c_hat_j of the same order as the rest
      attn_norm/mlp_norm.weight U(0.5, 1.5)  (init 1) gains visibly not 1 on both x_hat and c_hat
      *_precond.p        softplus^-1(1) + N(0, 0.5^2)  softplus(p) in ~(0.5, 1.5)
      *_precond.U / V    N(0, 0.2^2)    (init N(0, init_std)) U V^T + V U^T is O(1): on cem_precond the
                                        four P's have eigenvalues in [-0.32, 2.48] (one is indefinite,
                                        which the parametrisation allows), max |P - I| 0.6 .. 1.1"""
    d = cfg["d_model"]
    rnd = lambda: torch.randn(p.shape, generator=gen, dtype=p.dtype)
    uni = lambda: 0.5 + torch.rand(p.shape, generator=gen, dtype=p.dtype)
    leaf = name.split(".", 2)[2]  # after "{section}.{i}."
    if leaf in ("attn.q.weight", "attn.k.weight", "mlp.gate.weight", "mlp.up.weight"):
        p.copy_(rnd() / d ** 0.5)
    elif leaf == "attn.diag":
        p.copy_(0.5 * rnd())
    elif leaf in ("attn_norm.weight", "mlp_norm.weight"):
        p.copy_(uni())
    elif leaf.endswith("_precond.p"):
        p.copy_(SOFTPLUS_INV_1 + 0.5 * rnd())
    elif leaf.endswith(("_precond.U", "_precond.V")):
        p.copy_(0.2 * rnd())
    else:
        raise AssertionError(f"no perturbation for {name}")


def perturb_loop(cfg, name, p, gen):
    """gated: fc2.bias redrawn N(0.5, 0.5) so the gates sit around sigmoid(0.5/tau), not saturated
    at sigmoid(4/tau) (then W_proj and the core get real gradients); W_proj and fc1.weight redrawn
    N(0, 1/(2d)), fc2.weight N(0, 1/d), so h~ and the gate pre-activations are O(1) and vary per
    element; the other 1-D params (norms, proj.bias, fc1.bias) + N(0, 0.1) as in the blocks.
    hyper: alphas redrawn U(0.5, 1.5), W's N(0, 1/(n*d)) (then W z ~ N(0, 1) since |z|^2 = n*d),
    biases + N(0, 0.3) (sinkhorn: on top of the identity), loop.emb redrawn N(0, 0.1)."""
    d = cfg["d_model"]
    rnd = lambda: torch.randn(p.shape, generator=gen, dtype=p.dtype)
    if name.startswith("loop.exit_gate."):  # any rule
        # Ouro's gate: w ~ N(0, 1/d) so w . x ~ N(0, 1) on a normed x, bias ~ N(0, 0.3^2): lambda
        # spread over (0, 1) rather than all near 1/2
        p.copy_(rnd() / d ** 0.5 if name.endswith(".weight") else 0.3 * rnd())
        return
    if cfg["loop_rule"] == "gated":
        if name == "loop.gate.fc2.bias":
            p.copy_(0.5 + 0.5 * rnd())
        elif name in ("loop.proj.weight", "loop.gate.fc1.weight"):
            p.copy_(rnd() / (2 * d) ** 0.5)
        elif name == "loop.gate.fc2.weight":
            p.copy_(rnd() / d ** 0.5)
        else:
            assert p.ndim == 1, name
            p.add_(0.1 * rnd())
    elif cfg["loop_rule"] == "hyper":
        nd = cfg["hyper_streams"] * d
        if name == "loop.emb.weight":
            p.copy_(0.1 * rnd())
        elif name.endswith(".alpha"):
            p.copy_(0.5 + torch.rand(p.shape, generator=gen, dtype=p.dtype))
        elif name.endswith(".weight"):
            p.copy_(rnd() / nd ** 0.5)
        else:
            assert name.endswith(".bias"), name
            p.add_(0.3 * rnd())
    elif cfg["loop_rule"] == "inject_linear":
        # W_proj N(0, 1/(2d)): the core's input O(1) from [s, h_pre] (|.|^2 ~ 2d)
        p.copy_(rnd() / (2 * d) ** 0.5 if name.endswith(".weight") else 0.1 * rnd())
    else:
        raise AssertionError(f"no perturbation for {name}")


def train_steps(model, tokens, targets, cfg, k):
    """K steps of clip(grad_clip) + AdamW (decay only on ndim >= 2). Returns (losses, grad norms)."""
    opt = torch.optim.AdamW(param_groups(model, cfg["weight_decay"]), lr=cfg["lr"],
                            betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["adam_eps"])
    losses, norms = [], []
    for _ in range(k):
        opt.zero_grad(set_to_none=True)
        loss = model.loss(model(tokens), targets)
        loss.backward()
        for p in model.parameters():  # a param the loss does not reach (an exit gate): a zero gradient,
            if p.grad is None:        # so weight decay still applies to it, as in the engine
                p.grad = torch.zeros_like(p)
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["grad_clip"]).item())
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float64), torch.tensor(norms, dtype=torch.float64)


def make_fixture(name, seed):
    cfg = full_config(name)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    model = LoopLM(cfg)  # float32 init
    perturb(model, gen)
    model = model.double()  # exact copy of the float32 values; all math below in float64
    V = cfg["vocab_size"]
    tokens = torch.randint(0, V, (B, T), generator=gen)
    targets = torch.randint(0, V, (B, T), generator=gen)

    out = {}
    params = dict(model.named_parameters())
    for n, p in params.items():
        out[n] = p.detach().float()
    out["input.tokens"] = tokens.int()
    out["input.targets"] = targets.int()

    R = cfg["R"]
    states = model.loop_states(tokens)
    logits = model.exit_logits(states[-1])
    loss = model.loss(logits, targets)
    with torch.no_grad():
        by_depth = model.loss_by_depth(tokens, targets, R + BEYOND)
        beyond = model.loop_states(tokens, R + BEYOND)
    loss.backward()
    out["out.logits"] = logits.detach().float()
    out["out.loss"] = loss.detach().reshape(1).float()
    out["out.loss_by_depth"] = by_depth.float()
    for r, h in enumerate(beyond):
        out[f"state.{r}"] = h.detach().float()
    for n, p in params.items():  # the exit gate is not in the loss: no gradient, zeros
        out[f"grad.{n}"] = (p.grad if p.grad is not None else torch.zeros_like(p)).float()
    if cfg.get("exit_gate", False):
        with torch.no_grad():
            for r, lam in enumerate(model.exit_gates(tokens, R + BEYOND), start=1):
                out[f"gate.{r}"] = lam.reshape(-1).float()
    if cfg.get("exit_gate", False):
        for tag, prior, cut in (("token", "token", None), ("batch", "batch", None), ("token_bptt", "token", BPTT_K)):
            model.zero_grad(set_to_none=True)
            obj = model.exit_objective(tokens, targets, prior, EXIT_BETA, grad_steps=cut)
            obj.backward()
            out[f"exit.{tag}.loss"] = obj.detach().reshape(1).float()
            for n, p in params.items():
                out[f"exit.{tag}.grad.{n}"] = (p.grad if p.grad is not None else torch.zeros_like(p)).float()
        model.zero_grad(set_to_none=True)
        alone = model.exit_gate_alone(tokens, targets, EXIT_K, EXIT_GAMMA)
        alone.backward()
        out["exit.stage2.loss"] = alone.detach().reshape(1).float()
        for n, p in params.items():
            if n.startswith("loop.exit_gate."):
                out[f"exit.stage2.grad.{n}"] = p.grad.float()
            else:
                assert p.grad is None, f"stage II reached {n}"
        model.zero_grad(set_to_none=True)
    if cfg["block"] == "energy":
        with torch.no_grad():
            for r, e in enumerate(model.energies(tokens, R + BEYOND), start=1):  # E(h^(r-1))
                out[f"energy.{r}"] = e.reshape(-1).float()
    if R > 1:
        model.zero_grad(set_to_none=True)
        cut = model.loss(model.exit_logits(model.loop_states(tokens, grad_steps=BPTT_K)[-1]), targets)
        cut.backward()
        for n, p in params.items():
            out[f"bptt.grad.{n}"] = (p.grad if p.grad is not None else torch.zeros_like(p)).float()
        model.zero_grad(set_to_none=True)

    trained = copy.deepcopy(model)
    trained.zero_grad(set_to_none=True)
    losses, norms = train_steps(trained, tokens, targets, cfg, K)
    out["train.loss"] = losses.float()
    out["train.grad_norm"] = norms.float()
    for n, p in trained.named_parameters():
        out[f"after.{n}"] = p.detach().float()

    meta = {"format": "pt", "fixture_version": FIXTURE_VERSION,
            "config": json.dumps(cfg, sort_keys=True), "bptt_k": str(BPTT_K)}
    if cfg.get("exit_gate", False):
        meta.update(exit_beta=repr(EXIT_BETA), exit_k=repr(EXIT_K), exit_gamma=repr(EXIT_GAMMA))
    return out, meta


# Init statistics (tests/fixtures/init/*.safetensors): the reference's own init
# (LoopLM.reset_parameters) on models large enough for its statistics to be sharp (d = 128), one
# [4] tensor per parameter: mean, std, min, max of the drawn values. The engine draws from another
# generator, so tests compare statistics: constants exactly, normal draws by mean and std.
INIT_CONFIGS = {
    "init_looped": dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_prelude=1, n_core=2, R=4,
                        n_coda=1, block="pre_norm", norm="layernorm", mlp="gelu", pos="learned", bias=True,
                        tie_embeddings=False),
    "init_deeploop": dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_core=2, R=3,
                          block="sandwich", norm="rmsnorm", mlp="swiglu", pos="rope", deeploop_p=0.5),
    "init_gated": dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_prelude=1, n_core=2, R=4,
                       n_coda=1, block="pre_norm", norm="layernorm", mlp="gelu", pos="learned", bias=True,
                       tie_embeddings=False, loop_rule="gated"),
    "init_hyper": dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_prelude=1, n_core=2, R=3,
                       n_coda=1, block="pre_norm", norm="rmsnorm", mlp="swiglu", pos="rope",
                       loop_rule="hyper", hyper_streams=4, hyper_res="sinkhorn"),
    "init_energy": dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_core=1, R=4,
                        block="energy", energy_ff="ff2w", energy_P="matrix", norm="layernorm",
                        pos="learned"),
    "init_cem": dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_core=1, R=3, block="cem",
                     cem_T=2, cem_diag=True, cem_precond=True, cem_precond_rank=4, norm="rmsnorm", pos="rope"),
}


def make_init_stats(name, seed):
    cfg = resolve_config(INIT_CONFIGS[name])
    torch.manual_seed(seed)
    model = LoopLM(cfg).double()
    out = {}
    for n, p in model.named_parameters():
        w = p.detach().flatten()
        out[n] = torch.stack([w.mean(), w.std(unbiased=False), w.min(), w.max()]).float()
    return out, {"format": "pt", "fixture_version": FIXTURE_VERSION, "config": json.dumps(cfg, sort_keys=True)}


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.normpath(os.path.join(here, "..", "tests", "fixtures")))
    ap.add_argument("names", nargs="*", help="only these fixtures / init sets (default: all)")
    args = ap.parse_args()
    unknown = set(args.names) - set(FIXTURES) - set(INIT_CONFIGS)
    if unknown:
        ap.error(f"unknown names {sorted(unknown)}; choose from {list(FIXTURES) + list(INIT_CONFIGS)}")
    wanted = lambda name: not args.names or name in args.names
    os.makedirs(args.out, exist_ok=True)
    for i, name in enumerate(FIXTURES):  # seeds by position: adding a fixture at the end changes no other
        if not wanted(name):
            continue
        tensors, meta = make_fixture(name, seed=1000 + i)
        path = os.path.join(args.out, f"{name}.safetensors")
        save_file(tensors, path, meta)
        cfg = json.loads(meta["config"])
        n_params = sum(v.numel() for k, v in tensors.items() if k.startswith("after."))
        fmt = lambda t, nd: [round(x, nd) for x in t.tolist()]
        print(f"{path}: {os.path.getsize(path)} bytes, {n_params} params, R={cfg['R']}, "
              f"loss_by_depth {fmt(tensors['out.loss_by_depth'], 4)}, "
              f"train.loss {fmt(tensors['train.loss'], 4)}, grad_norm {fmt(tensors['train.grad_norm'], 3)}")
        if cfg["block"] == "energy":
            e = [tensors[f"energy.{r}"].mean().item() for r in range(1, cfg["R"] + BEYOND + 2)]
            print(f"    mean energy of state.0..state.{cfg['R'] + BEYOND}: {[round(x, 4) for x in e]}")

    init_dir = os.path.join(args.out, "init")
    os.makedirs(init_dir, exist_ok=True)
    for i, name in enumerate(INIT_CONFIGS):
        if not wanted(name):
            continue
        tensors, meta = make_init_stats(name, seed=2000 + i)
        path = os.path.join(init_dir, f"{name}.safetensors")
        save_file(tensors, path, meta)
        print(f"{path}: {os.path.getsize(path)} bytes, {len(tensors)} parameters")


if __name__ == "__main__":
    main()
