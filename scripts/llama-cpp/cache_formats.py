#!/usr/bin/env python3
"""Writes the reference round trips of every KV-cache format sinkscope models, from llama.cpp's own
library (and ml_dtypes for vLLM's fp8), for `tests/cache_formats.rs`.

The rows are what a cache stores: head-sized vectors (64 values), plain Gaussian ones, rows with one
massive outlier (a sink token's key), all-zero and tiny blocks, and values on rounding ties. Each
block format goes through the functions a llama.cpp cache write calls on CPU (`quantize_row_<type>`
of libggml-cpu, the type's `from_float`) and back through libggml-base's `dequantize_row_<type>`;
f16 and bf16 through `ggml_fp32_to_{fp16,bf16}_row` and back. fp8 (e4m3fn, e5m2) through ml_dtypes,
on rows inside their range (vLLM saturates outside it; ml_dtypes gives NaN there).

Output: tests/fixtures/cache_formats/{input,<format>}.f32 (little-endian f32, row-major) and
meta.json (shape, versions, SHA-256 of the llama-cpp-python sdist build).

    python3 -m venv /tmp/v && /tmp/v/bin/pip install numpy ml_dtypes
    /tmp/v/bin/python scripts/llama-cpp/cache_formats.py --lib "$(scripts/llama-cpp/build.sh --check)/build/bin"
"""

import argparse
import ctypes
import json
import os
import sys

import ml_dtypes
import numpy as np

ROWS, DIM = 48, 64
# ggml type ids (ggml.h): the block formats a cache can hold.
BLOCK_TYPES = {"q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20}
BLOCK_BYTES = {"q4_0": 18, "q4_1": 20, "q5_0": 22, "q5_1": 24, "q8_0": 34, "iq4_nl": 18}


def rows():
    rng = np.random.default_rng(20261206)
    x = rng.standard_normal((ROWS, DIM)).astype(np.float32)
    x[8:16, 3] *= 80.0  # one massive dimension (a sink key)
    x[16:20, :32] = 0.0  # an all-zero block
    x[20:24] *= 1e-6  # tiny values
    x[24:28] = np.round(x[24:28] * 4) / 4  # values on a coarse grid (ties for the rounding)
    x[28:32, 0] = -50.0  # a negative outlier first in its block
    x[32:40] *= 8.0
    x[40:48] += 3.0  # an offset (what q4_1/q5_1's minimum is for)
    return x


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True, help="llama.cpp's build/bin (libggml-base.so, libggml-cpu.so)")
    ap.add_argument("--out", default="tests/fixtures/cache_formats")
    args = ap.parse_args()
    base = ctypes.CDLL(os.path.join(args.lib, "libggml-base.so"))
    cpu = ctypes.CDLL(os.path.join(args.lib, "libggml-cpu.so"))
    vp, i64 = ctypes.c_void_p, ctypes.c_int64
    for lib, fn in [(cpu, f"quantize_row_{n}") for n in BLOCK_TYPES] + [(base, f"dequantize_row_{n}") for n in BLOCK_TYPES] + [
        (base, n) for n in ("ggml_fp32_to_fp16_row", "ggml_fp16_to_fp32_row", "ggml_fp32_to_bf16_row", "ggml_bf16_to_fp32_row")
    ]:
        getattr(lib, fn).argtypes = [vp, vp, i64]
        getattr(lib, fn).restype = None
    cpu.ggml_cpu_init()
    x = rows()
    out = {"input": x}
    for name in BLOCK_TYPES:
        q = getattr(cpu, f"quantize_row_{name}")
        dq = getattr(base, f"dequantize_row_{name}")
        got = np.zeros_like(x)
        for r in range(ROWS):
            src = np.ascontiguousarray(x[r])
            buf = ctypes.create_string_buffer(BLOCK_BYTES[name] * DIM // 32)
            q(src.ctypes.data, buf, DIM)
            dst = np.zeros(DIM, dtype=np.float32)
            dq(buf, dst.ctypes.data, DIM)
            got[r] = dst
        out[name] = got
    for name, to_row, from_row in (("f16", "ggml_fp32_to_fp16_row", "ggml_fp16_to_fp32_row"), ("bf16", "ggml_fp32_to_bf16_row", "ggml_bf16_to_fp32_row")):
        half = np.zeros(x.size, dtype=np.uint16)
        src = np.ascontiguousarray(x)
        getattr(base, to_row)(src.ctypes.data, half.ctypes.data, x.size)
        back = np.zeros(x.size, dtype=np.float32)
        getattr(base, from_row)(half.ctypes.data, back.ctypes.data, x.size)
        out[name] = back.reshape(x.shape)
    for name, dt in (("fp8-e4m3", ml_dtypes.float8_e4m3fn), ("fp8-e5m2", ml_dtypes.float8_e5m2)):
        back = x.astype(dt).astype(np.float32)
        if not np.isfinite(back).all():
            sys.exit(f"cache_formats.py: {name} input out of range")
        out[name] = back
    os.makedirs(args.out, exist_ok=True)
    for name, a in out.items():
        a.astype("<f4").tofile(os.path.join(args.out, f"{name}.f32"))
    meta = {
        "rows": ROWS,
        "dim": DIM,
        "formats": [n for n in out if n != "input"],
        "llama_cpp": "llama-cpp-python 0.3.36 sdist (scripts/llama-cpp/build.sh), libggml CPU build for AVX2+FMA+F16C",
        "ml_dtypes": ml_dtypes.__version__,
        "numpy": np.__version__,
    }
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
