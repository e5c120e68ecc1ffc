"""Minimal safetensors reader/writer (no `safetensors` package needed).

File layout (https://github.com/huggingface/safetensors):
    8 bytes   little-endian uint64 N = length of the JSON header (including padding)
    N bytes   JSON header, padded with spaces to a multiple of 8:
              {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
               "data_offsets": [begin, end]}, ...}
    rest      tensor bytes, little-endian, C order; offsets are relative to the byte after the header.

    save_file({"name": tensor, ...}, path, metadata={"k": "v"})
    tensors, metadata = load_file(path)
"""
import json
import struct
import sys

import torch

assert sys.byteorder == "little", "this helper assumes a little-endian host"

_DTYPES = {  # safetensors name <-> torch dtype
    "F64": torch.float64,
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "I64": torch.int64,
    "I32": torch.int32,
    "I16": torch.int16,
    "I8": torch.int8,
    "U8": torch.uint8,
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def _tensor_bytes(t):
    t = t.detach().cpu().contiguous().reshape(-1)
    return t.view(torch.uint8).numpy().tobytes() if t.numel() else b""


def save_file(tensors, path, metadata=None):
    """Write a dict name -> torch.Tensor (tensors keep their dtype; insertion order is kept)."""
    header = {}
    if metadata:
        for k, v in metadata.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise TypeError("__metadata__ must map str -> str")
        header["__metadata__"] = dict(metadata)
    blobs, offset = [], 0
    for name, t in tensors.items():
        if name == "__metadata__":
            raise ValueError("reserved tensor name")
        if t.dtype not in _NAMES:
            raise TypeError(f"{name}: unsupported dtype {t.dtype}")
        b = _tensor_bytes(t)
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * (-len(hjson) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)


def load_file(path):
    """Return (dict name -> torch.Tensor, metadata dict str -> str)."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError("file too short")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError("header length exceeds file size")
    header = json.loads(data[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", None) or {}
    body = memoryview(data)[8 + n:]
    tensors = {}
    for name, info in header.items():
        dtype = _DTYPES[info["dtype"]]
        shape = [int(s) for s in info["shape"]]
        begin, end = info["data_offsets"]
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if not (0 <= begin <= end <= len(body)) or end - begin != numel * itemsize:
            raise ValueError(f"{name}: bad data_offsets {begin},{end} for shape {shape}")
        raw = bytearray(body[begin:end])  # copy: the tensor owns writable memory
        t = torch.frombuffer(raw, dtype=dtype) if numel else torch.empty(0, dtype=dtype)
        tensors[name] = t.reshape(shape)
    return tensors, metadata
