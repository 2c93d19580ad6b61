"""Reads a .safetensors file (the tensors `capture --save-tensors` writes) into numpy arrays.

The format is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
shape and byte range, then the raw little-endian data; numpy reads it without another package.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {
    "F64": "<f8",
    "F32": "<f4",
    "F16": "<f2",
    "I64": "<i8",
    "I32": "<i4",
    "I16": "<i2",
    "I8": "i1",
    "U8": "u1",
    "U32": "<u4",
    "BOOL": "?",
}


def read_safetensors(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """Every tensor of the file (name → array, in the file's order) and its string metadata."""
    path = Path(path)
    data = path.read_bytes()
    if len(data) < 8:
        raise ValueError(f"{path}: is not a safetensors file (shorter than its header length)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise ValueError(f"{path}: is truncated (its header claims {n} bytes)")
    header = json.loads(data[8 : 8 + n])
    body = memoryview(data)[8 + n :]
    metadata = header.pop("__metadata__", {}) or {}
    tensors: dict[str, np.ndarray] = {}
    for name, spec in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        dtype = _DTYPES.get(spec["dtype"])
        if dtype is None:
            raise ValueError(f"{path}: tensor {name} has dtype {spec['dtype']}, which this reader does not know")
        start, end = spec["data_offsets"]
        if not 0 <= start <= end <= len(body):
            raise ValueError(f"{path}: tensor {name} lies outside the file (bytes {start}..{end})")
        array = np.frombuffer(body[start:end], dtype=dtype).reshape(spec["shape"])
        tensors[name] = array.copy()
    return tensors, metadata
