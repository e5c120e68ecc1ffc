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
   H_res ~ sigmoid(1)), Sinkhorn rows and columns summing to 1 on the mhc fixture's logits.
5. Init statistics (tests/fixtures/init/*) against the spec's init written out.
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
except ImportError:
    sys.exit(f"{__file__}: needs PyTorch. Install Debian's build (apt-get install python3-torch) and run "
             "this script with /usr/bin/python3.")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from looplm_ref import LoopLM, apply_rope, resolve_config, rope_cos_sin, sinkhorn  # noqa: E402
from safetensors_io import load_file, save_file  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
FIXDIR = os.path.join(HERE, "..", "tests", "fixtures")
PREFIXES = ("input.", "out.", "state.", "grad.", "bptt.", "train.", "after.")
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
    states = model.loop_states(tokens)
    logits = model.exit_logits(states[-1])
    close(f"{name}: out.logits", logits.detach(), ts["out.logits"])
    loss = model.loss(logits, targets)
    # cross-entropy by hand
    lp = logits.detach() - logits.detach().logsumexp(-1, keepdim=True)
    ce = -lp.gather(-1, targets[..., None]).mean()
    close(f"{name}: out.loss (and CE by hand)", torch.stack([loss.detach(), ce]), ts["out.loss"].expand(2))
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
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

    # training steps with the hand-written optimizer
    model.zero_grad(set_to_none=True)
    losses, norms = manual_train(model, tokens, targets, cfg, len(ts["train.loss"]))
    close(f"{name}: train.loss", losses, ts["train.loss"])
    close(f"{name}: train.grad_norm", norms, ts["train.grad_norm"])
    worst = max((p.detach() - ts[f"after.{n}"].double()).abs().max().item() for n, p in model.named_parameters())
    check(worst < 1e-6, f"{name}: all after.* match a hand-written clip+AdamW (max abs err {worst:.1e})")
    check(os.path.getsize(path) < 300_000, f"{name}: size {os.path.getsize(path)} < 300 KB")


def expected_init(n, cfg):
    """SPEC §1 / §2.1 / §2.2 / §2.5 init written out: ("const", value), ("normal", std),
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
    if n.endswith(".bias"):
        return "const", 0.0
    if "norm" in n and n.endswith(".weight"):
        return "const", 1.0
    if p > 0 and any(x in n for x in (".attn.v.", ".attn.o.", ".mlp.")):
        return "normal", std * (8 * N) ** (-p)
    if p == 0 and any(x in n for x in (".attn.o.", ".mlp.down.")):
        return "normal", std / math.sqrt(2 * N)
    return "normal", std


def check_init_stats(path):
    """The init statistics against the spec's init (expected_init): N(0, 0.02) matrices, attn.o and
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
    check(not bad, f"{name}: init statistics of {len(ts)} parameters follow the spec {bad[:3]}")


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
    ~4e-6 off (the median ~2e-10), so rows are checked at 1e-4."""
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
    print(f"\n{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)
