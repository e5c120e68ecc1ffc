"""Load a looplm checkpoint into the PyTorch reference and print logits for a prompt.

    /usr/bin/python3 reference/load_checkpoint.py path/to/model.safetensors "In the beginning" [--R 4]

The whole recipe is the five lines under "load" below: the config travels in the safetensors
metadata (key "config"), parameter names and [out, in] layouts are PyTorch's, tied lm_head is absent.
The config's block (pre_norm, parallel, sandwich, energy, cem) selects the block kind and loop_rule (residual,
gated, hyper) the rule and its "loop.*" parameters; eval mode
turns the gated rule's training noise off.
Byte tokenizer: token id = UTF-8 byte (vocab_size 256).
"""
import argparse
import json
import os
import sys

try:
    import torch
except ImportError:
    sys.exit(f"{__file__}: needs PyTorch. Install Debian's build (apt-get install python3-torch) and run "
             "this script with /usr/bin/python3.")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from looplm_ref import LoopLM  # noqa: E402
from safetensors_io import load_file  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoint", help="model.safetensors, or the directory that holds it")
    ap.add_argument("prompt")
    ap.add_argument("--R", type=int, default=None, help="loop steps at inference (default: trained R)")
    args = ap.parse_args()
    path = args.checkpoint
    if os.path.isdir(path):
        path = os.path.join(path, "model.safetensors")

    # --- load
    tensors, meta = load_file(path)
    config = json.loads(meta["config"])
    model = LoopLM(config)
    model.load_state_dict({k: v.float() for k, v in tensors.items()}, strict=True)
    model.eval()

    # --- run
    ids = list(args.prompt.encode("utf-8"))[-config["context"]:]
    assert max(ids) < config["vocab_size"], "byte tokenizer needs vocab_size >= 256"
    with torch.no_grad():
        logits = model(torch.tensor([ids]), R=args.R)[0]  # [T, V]
    print(f"config: {json.dumps({k: model.cfg[k] for k in ('d_model', 'n_prelude', 'n_core', 'n_coda', 'R', 'block', 'loop_rule')})}")
    print(f"logits {list(logits.shape)}; last position, first 8: {logits[-1, :8].tolist()}")
    top = logits[-1].topk(5)
    show = lambda i: repr(chr(i)) if i < 128 else f"0x{i:02x}"
    print("next-byte top 5:", [(show(i), round(v, 4)) for v, i in zip(top.values.tolist(), top.indices.tolist())])


if __name__ == "__main__":
    main()
