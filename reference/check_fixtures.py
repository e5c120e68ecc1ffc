"""Self-check of the reference and the fixtures.

    /usr/bin/python3 reference/check_fixtures.py

1. safetensors_io round trip (every dtype, 0-d and empty tensors, header padding).
2. For every tests/fixtures/*.safetensors, read back with our reader, rebuild the model from the
   stored config + weights and recompute (float64) logits, losses, loop states, grads and the K
   training steps; the training steps are redone with a hand-written clip + AdamW (not torch.optim),
   so the optimizer semantics the C++ engine must match are spelled out below.
3. Central finite differences of a few gradient entries against grad.*.
4. Independent checks: cross-entropy by hand; RoPE scores depend only on relative position;
   loop rules: the gated rule's gates at init (sigmoid(gate_bias_init / tau)), noise only in
   training; the hyper rule's coefficients at init (H_pre ~ sigmoid(1/n), H_post ~ 1,
   H_res ~ sigmoid(1)), Sinkhorn rows and columns summing to 1 on the mhc fixture's logits;
   the energy block (NRGPT): its analytic updates against autograd (F = -grad_g E_FF,
   A = -grad of E_AT w.r.t. the query copy only), against a loop-by-loop rewrite of docs/systems.md
   (NRGPT), and a float64 gradcheck through the analytic gradients (GELU''); the fixtures' energy.{r};
   the cem block (CEM): a loop-by-loop rewrite of CEM in docs/systems.md (every T / diag / precond / RoPE
   combination), T = 1 without diag and preconditioner = a pre_norm SwiGLU block with
   v = W_K, o = W_Q^T, down = W_up^T, the preconditioner = its explicit symmetric matrix, the updates
   = minus the gradients of the conditional energies w.r.t. the normalised query (attention: times
   sqrt(hd), without RoPE), float64 gradcheck; inject_linear's like_init state: the truncated
   normal's bound, mean and std on 54000 draws, a pure function of (seed, position), and the
   huginn_like_init fixture's drawn state.0.
5. Init statistics (tests/fixtures/init/*) against the init of docs/systems.md written out.
"""
import glob
import json
import math
import os
import struct
import sys
import tempfile

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(f"{__file__}: needs PyTorch. Install Debian's build (apt-get install python3-torch) and run "
             "this script with /usr/bin/python3.")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from looplm_ref import LoopLM, apply_rope, like_init_state, resolve_config, rope_cos_sin, sinkhorn  # noqa: E402
from looplm_ref import SOFTPLUS_INV_1, Block, CemBlock, EnergyBlock  # noqa: E402
from safetensors_io import load_file, save_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXDIR = os.path.join(HERE, "..", "tests", "fixtures")
PREFIXES = ("input.", "out.", "state.", "grad.", "bptt.", "train.", "after.", "energy.", "gate.", "exit.")
failures = []


def check(cond, msg):
    print(("ok   " if cond else "FAIL ") + msg)
    if not cond:
        failures.append(msg)


def close(name, got, want, rtol=1e-5, atol=1e-6):
    got, want = got.double(), want.double()
    err = (got - want).abs().max().item() if got.numel() else 0.0
    ok = got.shape == want.shape and torch.allclose(got, want, rtol=rtol, atol=atol)
    check(ok, f"{name}: max abs err {err:.2e}")


def roundtrip():
    ts = {
        "f64": torch.randn(3, 5, dtype=torch.float64),
        "f32": torch.randn(2, 3, 4),
        "i32": torch.randint(-5, 5, (7,), dtype=torch.int32),
        "i64": torch.randint(-5, 5, (2, 2), dtype=torch.int64),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
    }
    meta = {"format": "pt", "config": json.dumps({"a": 1})}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "x.safetensors")
        save_file(ts, path, meta)
        raw = open(path, "rb").read()
        (n,) = struct.unpack("<Q", raw[:8])
        check(n % 8 == 0 and raw[8:8 + n].decode().endswith(("}", " ")), "header padded to 8")
        back, meta2 = load_file(path)
    check(meta2 == meta, "metadata round trip")
    check(all(back[k].dtype == v.dtype and torch.equal(back[k], v) for k, v in ts.items()),
          "tensor round trip (F64 F32 I32 I64, 0-d, empty)")


def manual_train(model, tokens, targets, cfg, k):
    """clip_grad_norm_ + AdamW, written out:
       g *= min(1, clip / (||g||_total + 1e-6))
       p *= 1 - lr * wd            (wd only for ndim >= 2)
       m = b1 m + (1 - b1) g;   v = b2 v + (1 - b2) g^2
       p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)"""
    lr, wd, b1, b2, eps = (cfg[x] for x in ("lr", "weight_decay", "beta1", "beta2", "adam_eps"))
    params = list(model.parameters())
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    losses, norms = [], []
    for t in range(1, k + 1):
        for p in params:
            p.grad = None
        loss = model.loss(model(tokens), targets)
        loss.backward()
        for p in params:  # a param the loss does not reach (an exit gate): a zero gradient
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        total = math.sqrt(sum(p.grad.pow(2).sum().item() for p in params))
        coef = min(1.0, cfg["grad_clip"] / (total + 1e-6))
        with torch.no_grad():
            for i, p in enumerate(params):
                g = p.grad * coef
                if p.ndim >= 2:
                    p.mul_(1 - lr * wd)
                m[i] = b1 * m[i] + (1 - b1) * g
                v[i] = b2 * v[i] + (1 - b2) * g * g
                denom = v[i].sqrt() / math.sqrt(1 - b2 ** t) + eps
                p.sub_(lr / (1 - b1 ** t) * m[i] / denom)
        losses.append(loss.item())
        norms.append(total)
    return torch.tensor(losses), torch.tensor(norms)


def check_fixture(path):
    name = os.path.basename(path)
    ts, meta = load_file(path)
    check(meta.get("format") == "pt" and meta.get("fixture_version") == "2", f"{name}: metadata")
    cfg = json.loads(meta["config"])
    model = LoopLM(cfg).double()
    weights = {k: v for k, v in ts.items() if not k.startswith(PREFIXES)}
    model.load_state_dict({k: v.double() for k, v in weights.items()}, strict=True)
    check(set(weights) == {k[5:] for k in ts if k.startswith("grad.")}, f"{name}: grad.* for every param")
    tokens, targets = ts["input.tokens"].long(), ts["input.targets"].long()
    R = cfg["R"]

    with torch.no_grad():
        for r, h in enumerate(model.loop_states(tokens, R + 2)):  # two exits beyond R
            close(f"{name}: state.{r}", h, ts[f"state.{r}"])
        close(f"{name}: out.loss_by_depth [{R + 2}]", model.loss_by_depth(tokens, targets, R + 2), ts["out.loss_by_depth"])
        stored = sorted(k for k in ts if k.startswith("energy."))
        if cfg["block"] == "energy":  # energy.{r} = E(h^(r-1)), r = 1..R+3
            want = sorted(f"energy.{r}" for r in range(1, R + 4))
            check(stored == want, f"{name}: energy.1..energy.{R + 3} present")
            for r, e in enumerate(model.energies(tokens, R + 2), start=1):
                close(f"{name}: energy.{r} (at state.{r - 1})", e.reshape(-1), ts[f"energy.{r}"])
        else:
            check(not stored, f"{name}: no energy.* tensors")
        gates = sorted(k for k in ts if k.startswith("gate."))
        if cfg.get("exit_gate", False):  # gate.{r}: the exit gate's lambda at exit r = 1..R+2
            check(gates == sorted(f"gate.{r}" for r in range(1, R + 3)), f"{name}: gate.1..gate.{R + 2} present")
            for r, lam in enumerate(model.exit_gates(tokens, R + 2), start=1):
                close(f"{name}: gate.{r}", lam.reshape(-1), ts[f"gate.{r}"])
            lam = torch.cat([ts[f"gate.{r}"] for r in range(1, R + 3)])
            spread = 0.1 if name == "ouro.safetensors" else 0.01  # exit_gate: a normed state close to the bias's
            check(0.05 < lam.min() and lam.max() < 0.95 and lam.std() > spread,
                  f"{name}: the gate's lambda spread over (0, 1) (min {lam.min():.2f}, max {lam.max():.2f}, std {lam.std():.2f})")
        else:
            check(not gates, f"{name}: no gate.* tensors")
    states = model.loop_states(tokens)
    logits = model.exit_logits(states[-1])
    close(f"{name}: out.logits", logits.detach(), ts["out.logits"])
    loss = model.loss(logits, targets)
    # cross-entropy by hand
    lp = logits.detach() - logits.detach().logsumexp(-1, keepdim=True)
    ce = -lp.gather(-1, targets[..., None]).mean()
    close(f"{name}: out.loss (and CE by hand)", torch.stack([loss.detach(), ce]), ts["out.loss"].expand(2))
    loss.backward()
    grads = {n: (p.grad if p.grad is not None else torch.zeros_like(p)).clone() for n, p in model.named_parameters()}
    worst = max((grads[n] - ts[f"grad.{n}"].double()).abs().max().item() /
                (grads[n].abs().max().item() + 1e-12) for n in grads)
    check(worst < 1e-5, f"{name}: all {len(grads)} grad.* tensors match (worst rel err {worst:.1e})")
    if R > 1:
        # Truncated BPTT, written out independently: the first R - k steps as constants.
        k = int(meta["bptt_k"])
        model.zero_grad(set_to_none=True)
        assert R - k >= 1
        with torch.no_grad():
            h_pre = model.embed(tokens)
            state = model.loop.init_state(h_pre)
            for r in range(1, R - k + 1):
                state = model.loop_step(state, h_pre, r)
        h_pre_g = model.embed(tokens)  # the prelude gets a gradient only through steps that read h_pre
        for r in range(R - k + 1, R + 1):
            state = model.loop_step(state, h_pre_g, r)
        model.loss(model.exit_logits(model.loop.readout(state)), targets).backward()
        worst = max(((p.grad if p.grad is not None else torch.zeros_like(p)) - ts[f"bptt.grad.{n}"].double()).abs().max().item()
                    / (ts[f"bptt.grad.{n}"].double().abs().max().item() + 1e-12) for n, p in model.named_parameters())
        check(worst < 1e-5, f"{name}: bptt.grad.* (k = {k}) match a hand-written truncation (worst rel err {worst:.1e})")
        model.zero_grad(set_to_none=True)

    # finite differences in float64 on a few entries (largest |grad| entry of a few params)
    picks = [n for n in grads if n.startswith(("tok_emb", "pos_emb", "lm_head"))][:1]
    picks += [n for n in grads if ".attn.q." in n][:1] + [n for n in grads if "norm" in n][-2:]
    picks += [n for n in grads if n.endswith(".bias")][:1] + [n for n in grads if ".mlp.down." in n][-1:]
    picks += [n for n in grads if n.startswith("loop.")]  # every loop-rule parameter
    if cfg["block"] in ("energy", "cem"):  # every block parameter (energy: gradients through GELU'')
        picks += [n for n in grads if n.startswith(("prelude.", "core.", "coda."))]
    params = dict(model.named_parameters())
    for n in dict.fromkeys(picks):
        idx = grads[n].abs().flatten().argmax().item()
        p, eps = params[n], 1e-6
        with torch.no_grad():
            flat = p.view(-1)
            old = flat[idx].item()
            flat[idx] = old + eps
            lp_ = model.loss(model(tokens), targets).item()
            flat[idx] = old - eps
            lm_ = model.loss(model(tokens), targets).item()
            flat[idx] = old
        fd = (lp_ - lm_) / (2 * eps)
        g = ts[f"grad.{n}"].view(-1)[idx].item()
        check(abs(fd - g) <= 1e-6 + 1e-4 * abs(g), f"{name}: finite diff {n}[{idx}] {fd:.8f} vs stored {g:.8f}")

    if cfg.get("exit_gate", False):
        check_exit_objectives(name, model, ts, tokens, targets)

    # training steps with the hand-written optimizer
    model.zero_grad(set_to_none=True)
    losses, norms = manual_train(model, tokens, targets, cfg, len(ts["train.loss"]))
    close(f"{name}: train.loss", losses, ts["train.loss"])
    close(f"{name}: train.grad_norm", norms, ts["train.grad_norm"])
    worst = max((p.detach() - ts[f"after.{n}"].double()).abs().max().item() for n, p in model.named_parameters())
    check(worst < 1e-6, f"{name}: all after.* match a hand-written clip+AdamW (max abs err {worst:.1e})")
    check(os.path.getsize(path) < 300_000, f"{name}: size {os.path.getsize(path)} < 300 KB")


def expected_init(n, cfg):
    """The init of docs/systems.md (Building blocks and each system) written out (cem: attn.q/k, mlp.gate/up
    N(0, init_std) with no output scaling, since none of them is named attn.o / mlp.down): ("const", value), ("normal", std),
    ("uniform", bound) or ("eye", n_streams)."""
    N = cfg["n_prelude"] + cfg["n_core"] * cfg["R"] + cfg["n_coda"]
    p, std = cfg["deeploop_p"], cfg["init_std"]
    rule = cfg.get("loop_rule", "residual")
    if rule == "gated" and n.startswith("loop."):
        if n == "loop.gate.fc2.bias":
            return "const", cfg["gate_bias_init"]
        if n.endswith(".bias"):
            return "const", 0.0
        if n.startswith("loop.norm_"):
            return "const", 1.0
        return "normal", std  # proj, fc1, fc2 weights: N(0, init_std), no output scaling
    if rule == "hyper" and n.startswith("loop."):
        k = cfg["hyper_streams"]
        if n == "loop.emb.weight":
            return "normal", std
        if n.endswith(".alpha"):
            return "const", 0.01
        if n.endswith(".weight"):
            return "uniform", 1 / math.sqrt(k * cfg["d_model"])
        if n.endswith(".pre.bias"):
            return "const", 1 / k
        if n.endswith(".post.bias"):
            return "const", 0.0
        assert n.endswith(".res.bias"), n
        return ("eye", k) if cfg["hyper_res"] == "sinkhorn" else ("const", 1.0)
    if n.endswith(".attn.diag"):  # cem: d_shared starts at 0
        return "const", 0.0
    if n.endswith("_precond.p"):  # cem: softplus(p) = 1, P = I + U V^T + V U^T
        return "const", SOFTPLUS_INV_1
    if n.endswith(("_precond.U", "_precond.V")):  # cem: N(0, init_std)
        return "normal", std
    if n.endswith(".bias"):
        return "const", 0.0  # also the energy block's attn_norm.bias and mlp biases
    if n.endswith((".ff_scale", ".step.gamma")):  # energy block: s_ff and gamma start at 1
        return "const", 1.0
    if n.endswith(".step.weight"):  # energy block: P, an output projection
        return "normal", std / math.sqrt(2 * N)
    if "norm" in n and n.endswith(".weight"):
        return "const", 1.0
    if p > 0 and any(x in n for x in (".attn.v.", ".attn.o.", ".mlp.")):
        return "normal", std * (8 * N) ** (-p)
    if p == 0 and any(x in n for x in (".attn.o.", ".mlp.down.")):
        return "normal", std / math.sqrt(2 * N)
    return "normal", std


def check_exit_objectives(name, model, ts, tokens, targets):
    """exit.* (the exit gate's objectives): the stored losses recomputed, and the stored gradients
    by central finite differences in float64 on the largest entry of every exit-gate and loop-rule
    parameter and of the head."""
    from export_fixtures import BPTT_K, EXIT_BETA, EXIT_GAMMA, EXIT_K
    runs = {"token": lambda: model.exit_objective(tokens, targets, "token", EXIT_BETA),
            "batch": lambda: model.exit_objective(tokens, targets, "batch", EXIT_BETA),
            "token_bptt": lambda: model.exit_objective(tokens, targets, "token", EXIT_BETA, grad_steps=BPTT_K),
            "stage2": lambda: model.exit_gate_alone(tokens, targets, EXIT_K, EXIT_GAMMA)}
    params = dict(model.named_parameters())
    for tag, f in runs.items():
        check(f"exit.{tag}.loss" in ts, f"{name}: exit.{tag}.loss present")
        with torch.no_grad():
            close(f"{name}: exit.{tag}.loss", f().reshape(1), ts[f"exit.{tag}.loss"])
        if tag == "token_bptt":  # a truncated gradient is no function's derivative: no finite differences
            continue
        picks = [n for n in params if n.startswith("loop.exit_gate.")]
        if tag != "stage2":
            picks += [n for n in params if n.startswith(("loop.", "lm_head", "norm_f"))][:3]
            picks += [n for n in params if n.startswith("core.")][:1]
        for n in dict.fromkeys(picks):
            g_all = ts[f"exit.{tag}.grad.{n}"].view(-1)
            idx = g_all.abs().argmax().item()
            flat, eps = params[n].data.view(-1), 1e-6
            old = flat[idx].item()
            with torch.no_grad():
                flat[idx] = old + eps
                lp_ = f().item()
                flat[idx] = old - eps
                lm_ = f().item()
                flat[idx] = old
            fd, g = (lp_ - lm_) / (2 * eps), g_all[idx].item()
            check(abs(fd - g) <= 1e-6 + 1e-4 * abs(g), f"{name}: exit.{tag} finite diff {n}[{idx}] {fd:.8f} vs stored {g:.8f}")
    if "exit.stage2.grad.loop.exit_gate.weight" in ts:
        check(not any(k.startswith("exit.stage2.grad.") and not k.startswith("exit.stage2.grad.loop.exit_gate.") for k in ts),
              f"{name}: stage II has gradients for the gate alone")


def check_init_stats(path):
    """The init statistics against the init of docs/systems.md (expected_init): N(0, 0.02) matrices, attn.o and
    mlp.down x 1/sqrt(2N), or with DeepLoop beta = (8N)^-p on attn.v, attn.o and every MLP matrix;
    norm weights 1, biases 0; gated: fc2.bias +4; hyper: W ~ U(+-1/sqrt(n d)), alpha 0.01,
    b_pre 1/n, b_res 1 (sinkhorn: identity), b_post 0, loop.emb N(0, 0.02)."""
    name = os.path.basename(path)
    ts, meta = load_file(path)
    cfg = resolve_config(json.loads(meta["config"]))
    f32 = lambda x: torch.tensor(x, dtype=torch.float32).item()
    numel = {n: p.numel() for n, p in LoopLM(cfg).named_parameters()}  # shapes only
    check(set(numel) == set(ts), f"{name}: one statistics tensor per parameter")
    bad = []
    for n, (mean, std, lo, hi) in ((n, t.tolist()) for n, t in ts.items()):
        kind, x = expected_init(n, cfg)
        # sampling tolerance: 5% or 5 standard errors, whichever is wider (loop.emb has R*d values)
        tol = max(0.05, 5 / math.sqrt(numel[n]))
        if kind == "const":
            ok = mean == f32(x) and lo == f32(x) and hi == f32(x)
        elif kind == "eye":  # n x n identity: mean 1/n, std sqrt(n-1)/n, min 0, max 1
            ok = abs(mean - 1 / x) < 1e-7 and abs(std - math.sqrt(x - 1) / x) < 1e-7 and lo == 0 and hi == 1
        elif kind == "uniform":  # U(-b, b): std b/sqrt(3), all inside the bound, reaching near it
            s_ = x / math.sqrt(3)
            ok = abs(std / s_ - 1) < tol and abs(mean) < tol * s_ and -x <= lo < -0.99 * x and 0.99 * x < hi <= x
        else:
            ok = abs(std / x - 1) < tol and abs(mean) < tol * x
        if not ok:
            bad.append(f"{n} ({kind} {x}: mean {mean:.5f} std {std:.5f} min {lo:.5f} max {hi:.5f})")
    check(not bad, f"{name}: init statistics of {len(ts)} parameters follow docs/systems.md {bad[:3]}")


def small_config(**kw):
    return {**dict(vocab_size=256, d_model=128, n_heads=4, context=32, n_prelude=1, n_core=2, R=3, n_coda=1,
                   norm="layernorm", mlp="gelu", pos="learned"), **kw}


def check_gated_rule():
    """At init f_g's output is gate_bias_init + small, so g = sigmoid(gate_bias_init / tau + small);
    the noise is drawn in training mode only."""
    tokens = torch.randint(0, 256, (2, 32))
    for tau in (1.0, 0.7):
        model = LoopLM(small_config(loop_rule="gated", gate_tau=tau)).double().eval()
        with torch.no_grad():
            h_pre = model.embed(tokens)
            g = model.loop.gate_values(h_pre, h_pre)  # step 1: h = h_pre
        want = 1 / (1 + math.exp(-4.0 / tau))
        err = (g - want).abs().max().item()
        check(abs(g.mean().item() - want) < 1e-3 and err < 1e-2,
              f"gated at init (tau {tau}): mean g {g.mean().item():.6f}, min {g.min().item():.6f}, "
              f"max {g.max().item():.6f} vs sigmoid(4/tau) = {want:.6f} (max dev {err:.1e})")
    model = LoopLM(small_config(loop_rule="gated")).double()
    with torch.no_grad():
        model.eval()
        a, b = model(tokens), model(tokens)
        model.train()
        c = model(tokens)
    check(torch.equal(a, b) and (a - c).abs().max().item() > 1e-6,
          "gated: deterministic in eval, noisy in training (sigma 0.1)")


def check_hyper_rule(fixdir):
    """At init alpha = 0.01 makes every map ~ its bias: H_pre ~ sigmoid(1/n), H_post ~ 2 sigmoid(0)
    = 1, H_res ~ sigmoid(1) (diag). Sinkhorn: columns sum to 1 exactly (the last normalisation);
    rows only approximately: after 20 iterations on the fixture's O(1) logits the worst token is
    ~4e-6 off (the median ~2e-10), so rows are checked at 1e-4. Seeded: the deviations are random
    and their maximum sits near the bound (an unseeded run drew one at 1.0e-2 after more fixtures
    had consumed the global generator)."""
    torch.manual_seed(20261205)
    tokens = torch.randint(0, 256, (2, 32))
    n = 4
    model = LoopLM(small_config(loop_rule="hyper", hyper_streams=n, hyper_res="diag",
                                norm="rmsnorm", mlp="swiglu", pos="rope")).double()
    with torch.no_grad():
        Y = model.loop.init_state(model.embed(tokens))
        H_pre, H_res, H_post = model.loop.coefficients(Y, 0)
    sig = lambda x: 1 / (1 + math.exp(-x))
    dev = [(H - w).abs().max().item() for H, w in ((H_pre, sig(1 / n)), (H_post, 1.0), (H_res, sig(1.0)))]
    check(max(dev) < 1e-2, f"hyper at init (n {n}): H_pre mean {H_pre.mean().item():.5f} (sigmoid(1/n) = "
          f"{sig(1 / n):.5f}), H_post mean {H_post.mean().item():.5f}, H_res mean {H_res.mean().item():.5f} "
          f"(sigmoid(1) = {sig(1.0):.5f}); max devs {dev[0]:.1e} {dev[1]:.1e} {dev[2]:.1e}")

    path = os.path.join(fixdir, "mhc.safetensors")
    ts, meta = load_file(path)
    cfg = json.loads(meta["config"])
    model = LoopLM(cfg).double()
    model.load_state_dict({k: v.double() for k, v in ts.items() if not k.startswith(PREFIXES)}, strict=True)
    row_err = col_err = 0.0
    row_all = []
    with torch.no_grad():
        h_pre = model.embed(ts["input.tokens"].long())
        Y = model.loop.init_state(h_pre)
        lp = model.loop
        for r in range(1, cfg["R"] + 3):
            l = lp.loop_index(r)
            z = Y / torch.sqrt(Y.pow(2).mean(-1, keepdim=True) + 1e-20)
            L = lp.maps(l).res(z).reshape(*z.shape[:-1], lp.n, lp.n)
            M = sinkhorn(L, cfg["sinkhorn_iters"])
            row_all.append((M.sum(-1) - 1).abs().amax(-1).flatten())
            row_err = max(row_err, row_all[-1].max().item())
            col_err = max(col_err, (M.sum(-2) - 1).abs().max().item())
            Y = model.loop_step(Y, h_pre, r)
        spread = L.std().item()
    median = torch.cat(row_all).median().item()
    check(col_err < 1e-12 and row_err < 1e-4,
          f"mhc: Sinkhorn ({cfg['sinkhorn_iters']} iterations, float64) on the fixture's logits (std {spread:.2f}): "
          f"max |row sum - 1| {row_err:.1e} (median over tokens and steps {median:.1e}), "
          f"max |column sum - 1| {col_err:.1e}")



def check_like_init(fixdir):
    """inject_linear's like_init state (looplm_ref.like_init_state): a truncated normal of std
    sigma = emb_scale * sqrt(2 / (5 d)) cut at +-3 sigma, a pure function of (seed, position). On
    3000 positions x d 18 (54000 values): every value within 3 sigma; mean and std against the
    truncated normal's (std 0.98659 sigma) within 5 standard errors; rows by position only (a
    shorter draw is a prefix, a draw from position 5 is rows 5..); another seed another draw. The
    fixture huginn_like_init: state.0 (norm_f of the drawn state) the same in both batch rows, not
    zero and different at every position."""
    d, T, seed, scale = 18, 3000, 42, 18 ** 0.5
    sigma = math.sqrt(2.0 / (5.0 * d)) * scale
    s = like_init_state(seed, T, d, scale).double()
    z = (s / sigma).flatten()
    n = z.numel()
    phi3 = math.exp(-4.5) / math.sqrt(2 * math.pi)
    want_std = math.sqrt(1 - 6 * phi3 / math.erf(3 / math.sqrt(2)))  # N(0, 1) cut at +-3
    check(s.dtype == torch.float64 and z.abs().max().item() <= 3.0 + 1e-6
          and abs(z.mean().item()) < 5 * want_std / math.sqrt(n)
          and abs(z.std().item() / want_std - 1) < 5 / math.sqrt(2 * n),
          f"like_init: {n} values, max |z| {z.abs().max().item():.4f} <= 3, mean {z.mean().item():.4f}, "
          f"std {z.std().item():.5f} (truncated normal {want_std:.5f})")
    pure = (torch.equal(like_init_state(seed, 11, d, scale), s[:11].float())
            and torch.equal(like_init_state(seed, 7, d, scale, start=5), s[5:12].float())
            and not torch.equal(like_init_state(seed + 1, 11, d, scale), s[:11].float()))
    check(pure, "like_init: a pure function of (seed, position): prefixes and offsets agree, another seed differs")
    ts, meta = load_file(os.path.join(fixdir, "huginn_like_init.safetensors"))
    cfg = json.loads(meta["config"])
    s0 = ts["state.0"]
    check(cfg["inject_state_init"] == "like_init" and cfg["inject_state_seed"] != 0
          and torch.equal(s0[0], s0[1]) and s0.abs().min().item() > 0
          and all(not torch.equal(s0[0, i], s0[0, j]) for i in range(s0.shape[1]) for j in range(i)),
          f"huginn_like_init: like_init, seed {cfg['inject_state_seed']}; state.0 the same in both batch rows, "
          f"non-zero, different at each of the {s0.shape[1]} positions")

ENERGY_SMALL = dict(vocab_size=37, d_model=8, n_heads=2, context=7, n_core=1, R=2, block="energy", pos="learned")


def random_energy_block(cfg, gen):
    """An EnergyBlock (float64) with every parameter drawn O(1) (scores ~ N(0, 1), u ~ N(0, 1))."""
    blk = EnergyBlock(resolve_config(cfg)).double()
    d, f = blk.attn_norm.bias.numel(), blk.mlp.up.weight.shape[0]
    with torch.no_grad():
        for n, p in blk.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            scale = {"attn.H.weight": 1 / d, "mlp.up.weight": d ** -0.5, "mlp.down.weight": f ** -0.5,
                     "step.weight": 0.3 * d ** -0.5}.get(n, 0.3)
            p.copy_(1 + r * scale if n in ("ff_scale", "step.gamma") else r * scale)
    return blk


def naive_energy_block(blk, x):
    """NRGPT (docs/systems.md) written out token by token and head by head, from the weights only (no
    code shared with EnergyBlock). Returns (x_new, A, F, E) for one sequence x [T, d]."""
    T, d = x.shape
    nh = blk.attn.n_heads
    H = [blk.attn.H.weight[h * d:(h + 1) * d] for h in range(nh)]
    W1, b1 = blk.mlp.up.weight, blk.mlp.up.bias
    Phi = lambda u: 0.5 * (1 + torch.erf(u / math.sqrt(2)))
    gelu = lambda u: u * Phi(u)
    dgelu = lambda u: Phi(u) + u * torch.exp(-u * u / 2) / math.sqrt(2 * math.pi)
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    g = (x - mu) / torch.sqrt(var + blk.attn_norm.eps) + blk.attn_norm.bias
    A = torch.zeros(T, d, dtype=x.dtype)
    E = torch.zeros(T, dtype=x.dtype)
    F_ = torch.zeros(T, d, dtype=x.dtype)
    for i in range(T):
        keys = range(i) if blk.strict else range(i + 1)
        for h in range(nh):
            if not keys:
                continue
            s = torch.stack([g[i] @ H[h] @ g[j] for j in keys])
            a = torch.exp(s - s.max())
            a = a / a.sum()
            A[i] += sum(a[k] * (H[h] @ g[j]) for k, j in enumerate(keys))
            E[i] -= s.max() + torch.log(torch.exp(s - s.max()).sum())
        u = W1 @ g[i] + b1
        if blk.mlp.kind == "ff1":
            E[i] -= (gelu(u) ** 2).sum()
            F_[i] = 2 * W1.t() @ (gelu(u) * dgelu(u))
        else:
            W2, b2 = blk.mlp.down.weight, blk.mlp.down.bias
            m = W2 @ gelu(u) + b2
            E[i] -= g[i] @ m
            F_[i] = m + W1.t() @ (dgelu(u) * (W2.t() @ g[i]))
    v = A + blk.ff_scale * F_
    if isinstance(blk.step, torch.nn.Linear):
        Pv = torch.stack([blk.step.weight @ v[i] for i in range(T)])
    else:
        Pv = blk.step.c * blk.step.gamma * v
    return x + Pv, A, F_, E


def check_energy_block():
    """The energy block's analytic updates, for every (energy_ff, energy_P, energy_strict):
    F = -autograd grad_g E_FF; A = -autograd grad of E_AT w.r.t. the query copy g_i only (keys
    detached), and that this differs from the full gradient (so the check can tell them apart);
    forward, A, F and energy() = a loop-by-loop rewrite of NRGPT (docs/systems.md); strict: position 0 gets
    A = 0 and no attention energy; gradcheck (float64) of the block output w.r.t. x and every
    parameter, which differentiates through GELU' (GELU'')."""
    gen = torch.Generator().manual_seed(7)
    B, T = 2, 7
    for ff in ("ff1", "ff2w"):
        for P in ("matrix", "diag"):
            for strict in (False, True):
                tag = f"energy block {ff}/{P}/{'strict' if strict else 'causal'}"
                blk = random_energy_block(dict(ENERGY_SMALL, energy_ff=ff, energy_P=P, energy_strict=strict,
                                               d_ff=12, energy_c=0.3), gen)
                x = torch.randn(B, T, 8, generator=gen, dtype=torch.float64)
                g = blk.attn_norm(x).detach().requires_grad_(True)
                F_an = blk.ff_update(g)
                (F_ag,) = torch.autograd.grad(blk.ff_energy(g).sum(), g)
                e_F = (F_an + F_ag).abs().max().item()
                A_an = blk.attn_update(g)
                gq = g.detach().clone().requires_grad_(True)
                (A_ag,) = torch.autograd.grad(blk.attn_energy(gq, keys=g.detach()).sum(), gq)
                e_A = (A_an + A_ag).abs().max().item()
                (full,) = torch.autograd.grad(blk.attn_energy(g).sum(), g)  # queries and keys
                gap = (A_an + full).abs().max().item()
                with torch.no_grad():
                    y = blk(x)
                    E = blk.energy(x)
                    e_n = 0.0
                    for b in range(B):
                        y_n, A_n, F_n, E_n = naive_energy_block(blk, x[b])
                        e_n = max(e_n, (y[b] - y_n).abs().max().item(), (A_an[b] - A_n).abs().max().item(),
                                  (F_an[b] - F_n).abs().max().item(), (E[b] - E_n).abs().max().item())
                scale = max(F_an.abs().max().item(), A_an.abs().max().item())
                ok = e_F < 1e-12 * scale + 1e-13 and e_A < 1e-12 * scale + 1e-13 and e_n < 1e-11 and gap > 1e-3
                msg = (f"{tag}: |F + autograd grad E_FF| {e_F:.1e}, |A + autograd grad_query E_AT| {e_A:.1e} "
                       f"(|A|,|F| max {scale:.2f}; full-gradient gap {gap:.2f}), vs the loop-by-loop definition {e_n:.1e}")
                if strict:
                    zero = A_an[:, 0].abs().max().item() + blk.attn_energy(g)[:, 0].abs().max().item()
                    ok = ok and zero == 0.0
                    msg += f", position 0: |A| + |E_AT| = {zero:.1e}"
                check(ok, msg)
                # gradcheck through the analytic gradients, on a shorter sequence
                names = [n for n, _ in blk.named_parameters()]
                xs = x[:1, :4].clone().requires_grad_(True)
                ps = tuple(p.detach().clone().requires_grad_(True) for p in blk.parameters())
                ok = torch.autograd.gradcheck(lambda xv, *pv: _functional_block(blk, names, pv, xv), (xs, *ps),
                                              eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False)
                check(ok, f"{tag}: gradcheck, float64 (x and all {len(names)} parameters, through A and F)")


def _functional_block(blk, names, values, x):
    """blk(x) with its parameters replaced by `values` (differentiable), via torch.nn.utils.stateless."""
    from torch.nn.utils import stateless
    return stateless.functional_call(blk, dict(zip(names, values)), (x,))


CEM_SMALL = dict(vocab_size=37, d_model=8, n_heads=2, context=7, n_core=1, R=2, block="cem", d_ff=12)


def random_cem_block(cfg, gen):
    """A CemBlock (float64) with every parameter drawn O(1), as the fixtures' perturb_cem."""
    blk = CemBlock(resolve_config(cfg)).double()
    d = blk.attn_norm.weight.numel()
    with torch.no_grad():
        for n, p in blk.named_parameters():
            r = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            if n.endswith("norm.weight"):
                p.copy_(0.5 + torch.rand(p.shape, generator=gen, dtype=p.dtype))
            elif n.endswith("_precond.p"):
                p.copy_(SOFTPLUS_INV_1 + 0.5 * r)
            elif n.endswith(("_precond.U", "_precond.V")):
                p.copy_(0.3 * r)
            elif n == "attn.diag":
                p.copy_(0.5 * r)
            else:
                p.copy_(r / d ** 0.5)
    return blk


def naive_cem_block(blk, h, rope, T):
    """CEM (docs/systems.md) written out token by token and head by head from the weights only (no code
    shared with CemBlock). h [L, d] one sequence; rope: bool; T inner steps. Returns the block output."""
    L, d = h.shape
    nh = blk.attn.n_heads
    hd = d // nh
    eps = blk.attn_norm.eps
    WQ, WK = blk.attn.q.weight, blk.attn.k.weight
    dsh = blk.attn.diag
    Wg, Wu = blk.mlp.gate.weight, blk.mlp.up.weight

    def rms(v, w):
        return v / torch.sqrt((v * v).mean() + eps) * w

    def rot(v, pos):  # rotate-half: channel i with i + hd/2, theta_i = 10000^(-2i/hd)
        out = v.clone()
        for i in range(hd // 2):
            a = pos * 10000.0 ** (-2.0 * i / hd)
            out[i] = v[i] * math.cos(a) - v[i + hd // 2] * math.sin(a)
            out[i + hd // 2] = v[i + hd // 2] * math.cos(a) + v[i] * math.sin(a)
        return out

    def precond(name, u):
        if not blk.precond:
            return u
        pc = getattr(blk, name)
        sp = torch.log1p(torch.exp(pc.p))
        return torch.stack([sp * u[i] + pc.U @ (pc.V.t() @ u[i]) + pc.V @ (pc.U.t() @ u[i]) for i in range(L)])

    # attention sub-layer
    c = h
    w = blk.attn_norm.weight
    ch = [rms(c[j], w) for j in range(L)]
    x = c.clone()
    for _ in range(T):
        xh = [rms(x[i], w) for i in range(L)]
        upd = torch.zeros(L, d, dtype=h.dtype)
        for i in range(L):
            for k in range(nh):
                rows = slice(k * hd, (k + 1) * hd)
                qi = WQ[rows] @ xh[i]
                s = []
                for j in range(i + 1):
                    kj = WK[rows] @ ch[j]
                    sc = (rot(qi, i) @ rot(kj, j)) if rope else qi @ kj
                    if dsh is not None:
                        sc = sc + (xh[i] * dsh) @ ch[j]
                    s.append(sc / math.sqrt(hd))
                s = torch.stack(s)
                a = torch.exp(s - s.max())
                a = a / a.sum()
                o = sum(a[j] * (WK[rows] @ ch[j]) for j in range(i + 1))  # values: W_K c_hat_j, no RoPE
                upd[i] += WQ[rows].t() @ o
                if dsh is not None:
                    upd[i] += dsh * sum(a[j] * ch[j] for j in range(i + 1))
        x = x + precond("attn_precond", upd)
    # MLP sub-layer, context = the attention sub-layer's output
    c = x
    w = blk.mlp_norm.weight
    ch = [rms(c[j], w) for j in range(L)]
    for _ in range(T):
        upd = torch.stack([Wu.t() @ (F.silu(Wg @ ch[i]) * (Wu @ rms(x[i], w))) for i in range(L)])
        x = x + precond("mlp_precond", upd)
    return x


def check_cem_block():
    """The cem block (CEM, docs/systems.md): forward = the loop-by-loop rewrite for T in 1..3, diag on/off,
    preconditioner on/off, RoPE on/off; with T = 1, no diag, no preconditioner it is a pre_norm
    SwiGLU block (q = W_Q, k = v = W_K, o = W_Q^T, gate = W_gate, up = W_up, down = W_up^T); the
    preconditioner = multiplying by diag(softplus(p)) + U V^T + V U^T; attention update = -sqrt(hd)
    grad_{x_hat_i} E_attn (E_attn,i = -sum_k logsumexp_j s^k_ij, context fixed) without RoPE (with
    RoPE the values are unrotated, so it is not a gradient: the gap is printed), MLP update =
    -grad_{x_hat} of E_mlp = -1/2 sum_f silu(W_gate c_hat)_f (W_up x_hat)_f^2; gradcheck (float64)."""
    gen = torch.Generator().manual_seed(11)
    Bs, L, d = 2, 6, 8
    for pos in ("rope", "learned"):
        for diag in (True, False):
            for pre in (False, True):
                for T in (1, 2, 3):
                    if T == 3 and not (diag and pre):
                        continue
                    tag = f"cem block T {T}, diag {diag}, precond {pre}, {pos}"
                    blk = random_cem_block(dict(CEM_SMALL, pos=pos, cem_T=T, cem_diag=diag, cem_precond=pre,
                                                cem_precond_rank=2), gen)
                    x = torch.randn(Bs, L, d, generator=gen, dtype=torch.float64)
                    with torch.no_grad():
                        y = blk(x)
                        err = max((y[b] - naive_cem_block(blk, x[b], pos == "rope", T)).abs().max().item()
                                  for b in range(Bs))
                    scale = y.abs().max().item()
                    check(err < 1e-12 * scale + 1e-12, f"{tag}: vs the loop-by-loop definition {err:.1e} (|y| max {scale:.2f})")
                    if T == 2 and diag and pre:
                        names = [n for n, _ in blk.named_parameters()]
                        xs = x[:1, :4].clone().requires_grad_(True)
                        ps = tuple(p.detach().clone().requires_grad_(True) for p in blk.parameters())
                        ok = torch.autograd.gradcheck(lambda xv, *pv: _functional_block(blk, names, pv, xv),
                                                      (xs, *ps), eps=1e-6, atol=1e-7, rtol=1e-5,
                                                      raise_exception=False)
                        check(ok, f"{tag}: gradcheck, float64 (x and all {len(names)} parameters)")

        # T = 1, no diag, no preconditioner = pre_norm SwiGLU with tied v / o / down
        cem = random_cem_block(dict(CEM_SMALL, pos=pos, cem_T=1, cem_diag=False, cem_precond=False), gen)
        std = Block(resolve_config(dict(CEM_SMALL, pos=pos, block="pre_norm", mlp="swiglu", norm="rmsnorm")),
                    1.0).double()
        W = dict(cem.named_parameters())
        with torch.no_grad():
            std.attn_norm.weight.copy_(W["attn_norm.weight"])
            std.attn.q.weight.copy_(W["attn.q.weight"])
            std.attn.k.weight.copy_(W["attn.k.weight"])
            std.attn.v.weight.copy_(W["attn.k.weight"])
            std.attn.o.weight.copy_(W["attn.q.weight"].t())
            std.mlp_norm.weight.copy_(W["mlp_norm.weight"])
            std.mlp.gate.weight.copy_(W["mlp.gate.weight"])
            std.mlp.up.weight.copy_(W["mlp.up.weight"])
            std.mlp.down.weight.copy_(W["mlp.up.weight"].t())
            x = torch.randn(Bs, L, d, generator=gen, dtype=torch.float64)
            y_c, y_s = cem(x), std(x)
            err = (y_c - y_s).abs().max().item()
            moved = (y_s - x).abs().max().item()
        check(err < 1e-12 * y_s.abs().max().item() + 1e-13,
              f"cem T 1, no diag, no precond, {pos} = pre_norm SwiGLU block with v = W_K, o = W_Q^T, "
              f"down = W_up^T: max err {err:.1e} (the block moves x by up to {moved:.2f})")

        # energies: update = -grad w.r.t. the query's normalised state, context fixed
        blk = random_cem_block(dict(CEM_SMALL, pos=pos, cem_T=2, cem_diag=True, cem_precond=False), gen)
        x = torch.randn(Bs, L, d, generator=gen, dtype=torch.float64)
        c = torch.randn(Bs, L, d, generator=gen, dtype=torch.float64)
        xh = blk.attn_norm(x).detach().requires_grad_(True)
        ch = blk.attn_norm(c).detach()
        (g_att,) = torch.autograd.grad(blk.attn_energy(xh, ch).sum(), xh)
        upd = blk.attn_update(xh, ch).detach()
        gap = (upd + math.sqrt(blk.attn.hd) * g_att).abs().max().item()
        xh2 = blk.mlp_norm(x).detach().requires_grad_(True)
        ch2 = blk.mlp_norm(c).detach()
        (g_mlp,) = torch.autograd.grad(blk.mlp_energy(xh2, ch2).sum(), xh2)
        gap_m = (blk.mlp_update(xh2, ch2).detach() + g_mlp).abs().max().item()
        scale = upd.abs().max().item()
        if pos == "rope":
            check(gap > 1e-3 * scale and gap_m < 1e-12 * scale,
                  f"cem energies, rope: attention update is not -sqrt(hd) grad E_attn (unrotated values; "
                  f"gap {gap:.2f}, |update| max {scale:.2f}); MLP update = -grad E_mlp: {gap_m:.1e}")
        else:
            check(gap < 1e-12 * scale and gap_m < 1e-12 * scale,
                  f"cem energies, {pos}: |update + sqrt(hd) grad_x_hat E_attn| {gap:.1e}, "
                  f"|update + grad_x_hat E_mlp| {gap_m:.1e} (|update| max {scale:.2f})")

    # the preconditioner against its explicit symmetric matrix
    blk = random_cem_block(dict(CEM_SMALL, cem_precond=True, cem_precond_rank=3), gen)
    u = torch.randn(Bs, L, d, generator=gen, dtype=torch.float64)
    with torch.no_grad():
        for nm in ("attn_precond", "mlp_precond"):
            pc = getattr(blk, nm)
            M = torch.diag(torch.log1p(torch.exp(pc.p))) + pc.U @ pc.V.t() + pc.V @ pc.U.t()
            err = max((pc(u) - u @ M.t()).abs().max().item(), (pc(u) - u @ M).abs().max().item(),
                      (pc.matrix() - M).abs().max().item())
            off = (M - torch.eye(d, dtype=M.dtype)).abs().max().item()
            check(err < 1e-12, f"cem {nm}: P u = (diag(softplus p) + U V^T + V U^T) u, symmetric: max err "
                  f"{err:.1e} (|P - I| max {off:.2f})")


def check_rope():
    hd, T = 6, 9
    cos, sin = rope_cos_sin(T, hd, 10000.0, torch.float64)
    q, k = torch.randn(hd, dtype=torch.float64), torch.randn(hd, dtype=torch.float64)
    s = lambda i, j: (apply_rope(q, cos[i], sin[i]) @ apply_rope(k, cos[j], sin[j])).item()
    check(abs(s(5, 2) - s(7, 4)) < 1e-12 and abs(s(3, 3) - q @ k) < 1e-12, "RoPE: scores depend on i - j only")
    # channel i pairs with i + hd/2: at t=1 the pair (0, 3) rotates by theta_0 = 1 rad
    x = torch.zeros(hd, dtype=torch.float64)
    x[0] = 1
    y = apply_rope(x, cos[1], sin[1])
    check(abs(y[0] - math.cos(1)) < 1e-12 and abs(y[3] - math.sin(1)) < 1e-12, "RoPE: rotate-half pairing")


if __name__ == "__main__":
    torch.manual_seed(0)
    roundtrip()
    check_rope()
    check_gated_rule()
    for path in sorted(glob.glob(os.path.join(FIXDIR, "init", "*.safetensors"))):
        check_init_stats(path)
    paths = sorted(glob.glob(os.path.join(FIXDIR, "*.safetensors")))
    check(len(paths) >= 4, f"{len(paths)} fixtures found")
    for path in paths:
        check_fixture(path)
    check_hyper_rule(FIXDIR)
    check_like_init(FIXDIR)
    check_energy_block()
    check_cem_block()
    print(f"\n{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
