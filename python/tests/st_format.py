"""Writes the safetensors format by hand: 8-byte little-endian header length, JSON, data."""

from __future__ import annotations

import json
import struct

import numpy as np

DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
          "int16": "I16", "int8": "I8", "uint8": "U8", "bool": "BOOL", "uint16": "U16"}


def encode(tensors: dict, metadata: dict | None = None) -> bytes:
    header: dict = {}
    if metadata:
        header["__metadata__"] = metadata
    blobs, off = [], 0
    for name, a in tensors.items():
        b = np.ascontiguousarray(a).tobytes()
        header[name] = {"dtype": DTYPES[str(a.dtype)], "shape": list(a.shape),
                        "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    j = json.dumps(header).encode()
    j += b" " * (-len(j) % 8)
    return struct.pack("<Q", len(j)) + j + b"".join(blobs)


def sample(seed: int = 0, big: int = 300_000) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "embed.weight": rng.standard_normal((big // 100, 100)).astype(np.float32),
        "layer.0.bias": rng.standard_normal(37).astype(np.float16),
        "layer.0.idx": rng.integers(-5, 5, size=(3, 4), dtype=np.int64),
        "mask": rng.integers(0, 2, size=11).astype(bool),
        "scalar": np.array(3.5, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.int32),
        "bytes": rng.integers(0, 255, size=9, dtype=np.uint8),
    }
