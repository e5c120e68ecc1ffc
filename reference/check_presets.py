"""Every preset's checkpoint loads in PyTorch with load_checkpoint.py's recipe and gives the engine's losses.

    /usr/bin/python3 reference/check_presets.py [--bin build/looplm] [--keep DIR] [PRESET ...]

For every preset (configs/*.json, or the names given; byte-level and the char-level bench-* ones):

1. `looplm train --preset NAME` for 2 steps at a shrunk size (d_model 32, 2 heads, context 32,
   batch 2; SHRINK below) on a small text file written here. Every other key of the preset is kept
   (layout, R, block and the energy / cem block's keys, norm, mlp, pos, bias, loop rule and its keys,
   deeploop_p, tokenizer), so each
   loop rule / block kind / norm / position kind the presets use is exercised; the script checks
   that the checkpoint's config holds the preset's values. lr is raised to 0.05 (a training key, not
   a model key) so that the two Adam steps move every weight by ~0.1, several times its init std:
   at init the logits are ~N(0, 0.1) and every loss sits within ~1e-3 of ln V, so a 1e-4 relative
   tolerance would hardly see the weights; after the two big steps the losses differ from ln V
   and from exit to exit by far more than the tolerance (columns "exit spread", "vs ln V").
2. `looplm eval --checkpoint DIR --data val.txt --depth R+2 --json`: loss_by_depth, exits 1..R+2
   (two beyond the trained R).
3. DIR/model.safetensors loaded exactly as load_checkpoint.py does (load_file, config from the
   metadata, LoopLM(config), load_state_dict(strict=True), eval()), then cast to float64; the mean
   token cross-entropy at every exit 1..R+2 on the windows eval scores (src/data/dataset.cpp
   eval_windows / eval_window: W = (N - 1) // T consecutive non-overlapping windows, window i
   = tokens[i*T : i*T+T], targets shifted by one; the leftover tail is not scored).
4. Pass if every exit agrees within TOL = 1e-4 relative (--tol to change it). Why 1e-4: the
   engine runs float32 (unit roundoff 6e-8) through up to n_prelude + n_core*(R+2) + n_coda = 14
   block applications (plus the loop rule's maps, Sinkhorn's 20 rounds, the head) and averages
   ~700 token losses (float32 per batch); compounded over ~10-20 layers that is at most ~1e-6 relative, so 1e-4
   is a bound float32 cannot reach by rounding alone, whatever the preset. In practice the mean
   losses agree to ~1e-8..4e-8 (per-token errors average out), so 1e-4 is loose: it catches
   structural mismatches (DeepLoop alpha = 1: 1e-2; gate tau 1.0 -> 1.01: 3.6e-4; the hyper
   rule's exits beyond R using loop 0's maps on hyperloop: 1.4e-4) but not small ones (tanh
   instead of erf GELU: 2.8e-6; the same wrong-maps mistake on mhc: 1.7e-5). --tol 1e-6 still
   leaves ~25x headroom over the observed float32 differences and catches those two as well.

Prints a table (preset, loop rule, block, exits checked, max rel diff, exit spread, distance from
ln V, pass/fail) and exits 1 if any preset fails. Deterministic (fixed seed, fixed text); ~2 s per
preset.
"""
import argparse
import errno
import glob
import json
import math
import os
import subprocess
import sys
import tempfile
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    sys.exit(f"{__file__}: needs PyTorch. Install Debian's build (apt-get install python3-torch) and run "
             "this script with /usr/bin/python3.")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from looplm_ref import LoopLM  # noqa: E402
from safetensors_io import load_file  # noqa: E402

TOL = 1e-4  # relative, per exit (see the docstring)
EXTRA_EXITS = 2  # exits checked beyond the trained R
SHRINK = {  # size and schedule only; every model key not listed here keeps the preset's value
    "d_model": 32, "n_heads": 2, "context": 32, "batch_size": 2, "steps": 2, "warmup": 1,
    "eval_every": 2, "eval_batches": 1, "lr": 0.05, "seed": 1337,
}
# Model keys whose preset value must survive into the checkpoint's config (when the preset sets them).
MODEL_KEYS = ("vocab_size", "n_prelude", "n_core", "n_coda", "R", "d_ff", "block", "norm", "mlp", "pos",
              "rope_base", "bias", "tie_embeddings", "loop_rule", "deeploop_p", "init_std", "norm_eps",
              "gate_sigma_x", "gate_sigma_g", "gate_tau", "gate_bias_init", "hyper_streams", "hyper_res",
              "sinkhorn_iters", "energy_ff", "energy_P", "energy_c", "energy_strict", "cem_T", "cem_diag",
              "cem_precond", "cem_precond_rank", "tokenizer", "tokenizer_chars")

# Genesis 1 (KJV, public domain). Only characters of the bench-* alphabet
# ("\n !$&',-.3:;?A-Za-z"), so the same text serves the char-level presets.
TRAIN_TEXT = """In the beginning God created the heaven and the earth.
And the earth was without form, and void; and darkness was upon the face of the deep. And the Spirit of God moved upon the face of the waters.
And God said, Let there be light: and there was light.
And God saw the light, that it was good: and God divided the light from the darkness.
And God called the light Day, and the darkness he called Night. And the evening and the morning were the first day.
"""
VAL_TEXT = """And God said, Let the waters under the heaven be gathered together unto one place, and let the dry land appear: and it was so.
And God called the dry land Earth; and the gathering together of the waters called he Seas: and God saw that it was good.
And God said, Let the earth bring forth grass, the herb yielding seed, and the fruit tree yielding fruit after his kind, whose seed is in itself, upon the earth: and it was so.
And the earth brought forth grass, and herb yielding seed after his kind, and the tree yielding fruit, whose seed was in itself, after his kind: and God saw that it was good.
And the evening and the morning were the third day. Is it good? Yes & no: 'tis $3 - or so!
"""
# Byte-level presets also see multi-byte UTF-8 (ids >= 128).
BYTE_EXTRA = "Caf\u00e9, na\u00efve \u00fcber \u2014 \u2713 \u03bb \u65e5\u672c.\n"


def run_engine(cmd, what):
    """Run the engine; if the binary is missing or being relinked, wait 30 s and retry (10 times)."""
    for attempt in range(11):
        try:
            p = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
        except OSError as e:  # missing, ETXTBSY (being written), ENOEXEC (half-written)
            if attempt == 10 or e.errno not in (errno.ENOENT, errno.ETXTBSY, errno.ENOEXEC, errno.EACCES):
                raise
            print(f"  ({what}: {cmd[0]}: {e.strerror}; retrying in 30 s)", flush=True)
            time.sleep(30)
            continue
        if p.returncode in (126, 127) or p.returncode < 0 and not os.path.exists(cmd[0]):
            if attempt < 10:
                print(f"  ({what}: exit {p.returncode}; retrying in 30 s)", flush=True)
                time.sleep(30)
                continue
        if p.returncode != 0:
            raise RuntimeError(f"{what} failed (exit {p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        return p.stdout
    raise AssertionError("unreachable")


def encode(text, cfg):
    """The engine's tokenizers: byte = UTF-8 bytes; char = index of the code point in tokenizer_chars
    (the engine rejects characters outside the alphabet, so the text must not contain any)."""
    if cfg.get("tokenizer", "byte") == "byte":
        return list(text.encode("utf-8"))
    index = {c: i for i, c in enumerate(cfg["tokenizer_chars"])}
    missing = sorted(set(text) - set(index))
    assert not missing, f"text has characters outside the char alphabet: {missing}"
    return [index[c] for c in text]


def reference_losses(ckpt, tokens, depth):
    """(config, [loss at exit 1..depth]) in float64, load_checkpoint.py's recipe for the load."""
    # --- load (load_checkpoint.py, verbatim)
    tensors, meta = load_file(ckpt)
    config = json.loads(meta["config"])
    model = LoopLM(config)
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    model.eval()
    # --- float64 from the stored float32 weights
    model.double()
    T = config["context"]
    n_win = (len(tokens) - 1) // T  # eval_windows
    assert n_win >= 1, "eval data too short"
    t = torch.tensor(tokens, dtype=torch.long)
    x = torch.stack([t[i * T: i * T + T] for i in range(n_win)])  # eval_window
    y = torch.stack([t[i * T + 1: i * T + T + 1] for i in range(n_win)])
    with torch.no_grad():
        states = model.loop_states(x, R=depth)
        losses = [F.cross_entropy(model.exit_logits(h).reshape(-1, config["vocab_size"]), y.reshape(-1)).item()
                  for h in states[1:]]
    return config, losses, n_win * T


def check_preset(name, binary, work):
    preset = json.load(open(os.path.join(REPO, "configs", name + ".json")))
    d = os.path.join(work, name)
    os.makedirs(d)
    char = preset.get("tokenizer", "byte") == "char"
    train_txt, val_txt = os.path.join(d, "train.txt"), os.path.join(d, "val.txt")
    with open(train_txt, "w", encoding="utf-8") as f:
        f.write(TRAIN_TEXT if char else TRAIN_TEXT + BYTE_EXTRA)
    val_text = VAL_TEXT if char else VAL_TEXT + BYTE_EXTRA
    with open(val_txt, "w", encoding="utf-8") as f:
        f.write(val_text)
    sets = dict(SHRINK, data_train=train_txt, data_val=val_txt)
    out = os.path.join(d, "run")
    cmd = [binary, "train", "--preset", name, "--out", out, "--quiet", "--sample-len", "0"]
    for k, v in sets.items():
        cmd += ["--set", f"{k}={v}"]
    run_engine(cmd, f"{name}: train")
    ckpt = os.path.join(out, "model.safetensors")

    R = preset.get("R", 1)
    depth = R + EXTRA_EXITS
    ev = json.loads(run_engine([binary, "eval", "--checkpoint", out, "--data", val_txt, "--depth", str(depth),
                                "--json", "--progress", "off"], f"{name}: eval"))
    engine = ev["loss_by_depth"]

    tokens = encode(val_text, json.loads(load_file(ckpt)[1]["config"]))  # the checkpoint's tokenizer
    config, ref, n_tok = reference_losses(ckpt, tokens, depth)

    problems = []
    for k in MODEL_KEYS:  # the preset's own keys reached the checkpoint
        if k in preset and k not in SHRINK and config.get(k) != preset[k]:
            problems.append(f"checkpoint {k}={config.get(k)!r}, preset {preset[k]!r}")
    if ev["tokens"] != n_tok:
        problems.append(f"engine scored {ev['tokens']} tokens, reference {n_tok}")
    if len(engine) != depth:
        problems.append(f"engine returned {len(engine)} exits, expected {depth}")
    rel = [abs(e - r) / abs(r) for e, r in zip(engine, ref)]
    worst = max(range(len(rel)), key=lambda i: rel[i]) if rel else 0
    max_rel = rel[worst] if rel else math.inf
    if not all(math.isfinite(v) for v in engine + ref):
        problems.append("non-finite loss")
    if not max_rel <= TOL:
        problems.append(f"exit {worst + 1}: engine {engine[worst]:.9g}, reference {ref[worst]:.9g} "
                        f"(rel {max_rel:.2e} > {TOL:g})")
    # What the tolerance can resolve: how far the exits' losses are from each other and from ln V
    # (the loss of uniform logits), relative.
    spread = (max(ref) - min(ref)) / max(ref)
    from_uniform = min(abs(r - math.log(config["vocab_size"])) for r in ref) / math.log(config["vocab_size"])
    return dict(name=name, rule=config["loop_rule"]
                + (f"/{config['hyper_res']}" if config["loop_rule"] == "hyper" else ""),
                block=config["block"] + (f" p={config['deeploop_p']:g}" if config.get("deeploop_p") else "")
                + (f" {config.get('energy_ff', 'ff2w')}/{config.get('energy_P', 'matrix')}"
                   if config["block"] == "energy" else "")
                + (f" T={config['cem_T']}{'' if config['cem_diag'] else ' nodiag'}"
                   f"{' P' + str(config['cem_precond_rank']) if config['cem_precond'] else ''}"
                   if config["block"] == "cem" else ""),
                exits=f"1..{depth} (R={R})", max_rel=max_rel, spread=spread, from_uniform=from_uniform, ok=not problems,
                problems=problems, engine=engine, ref=ref)


def main():
    global TOL
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("presets", nargs="*", help="preset names (default: every configs/*.json)")
    ap.add_argument("--bin", default=os.path.join(REPO, "build", "looplm"), help="the looplm binary")
    ap.add_argument("--keep", metavar="DIR", help="work in DIR (kept) instead of a temporary directory")
    ap.add_argument("--tol", type=float, default=TOL, help=f"relative tolerance per exit (default {TOL:g})")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every exit's losses")
    args = ap.parse_args()
    TOL = args.tol
    torch.manual_seed(0)
    names = args.presets or sorted(os.path.basename(p)[:-5] for p in glob.glob(os.path.join(REPO, "configs", "*.json")))
    # Example-mode presets (listops_*: prompt<TAB>answer data) have the layouts of nrgpt* / gpt_rec*,
    # checked here; their data mode is tests/test_examples.cpp's business.
    skipped = [n for n in names if json.load(open(os.path.join(REPO, "configs", n + ".json"))).get("data_mode") == "examples"]
    names = [n for n in names if n not in skipped]
    if skipped:
        print(f"skipped (data_mode = examples; same layouts as nrgpt* / gpt_rec*): {', '.join(skipped)}")
    binary = os.path.abspath(args.bin)
    t0 = time.time()
    results = []
    with tempfile.TemporaryDirectory(prefix="check_presets_") as tmp:
        work = args.keep or tmp
        if args.keep:
            os.makedirs(work, exist_ok=True)
        for name in names:
            try:
                r = check_preset(name, binary, work)
            except Exception as e:  # a preset that cannot be trained / loaded is a failure, not a crash
                r = dict(name=name, rule="?", block="?", exits="?", max_rel=math.inf, spread=math.nan, from_uniform=math.nan, ok=False,
                         problems=[f"{type(e).__name__}: {e}"], engine=[], ref=[])
            results.append(r)
            if args.verbose:
                for i, (e, f) in enumerate(zip(r["engine"], r["ref"])):
                    print(f"  {name} exit {i + 1}: engine {e:.9f}  reference {f:.9f}  rel {abs(e - f) / abs(f):.2e}")
    w = max(len(r["name"]) for r in results)
    print(f"\n| {'preset':<{w}} | loop rule      | block              | exits checked | max rel diff | exit spread | vs ln V | result |")
    print(f"|{'-' * (w + 2)}|----------------|--------------------|---------------|--------------|-------------|---------|--------|")
    for r in results:
        print(f"| {r['name']:<{w}} | {r['rule']:<14} | {r['block']:<18} | {r['exits']:<13} | {r['max_rel']:12.2e} "
              f"| {r['spread']:11.1e} | {r['from_uniform']:7.1e} | {'pass' if r['ok'] else 'FAIL':<6} |")
    failed = [r for r in results if not r["ok"]]
    for r in failed:
        for p in r["problems"]:
            print(f"FAIL {r['name']}: {p}")
    print(f"\n{len(results) - len(failed)}/{len(results)} presets agree within {TOL:g} relative at every exit "
          f"({time.time() - t0:.1f} s)\nexit spread = (max - min) / max of the exits' losses; vs ln V = min over exits of "
          f"|loss - ln V| / ln V: both should be well above the tolerance for the check to have teeth")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
