#!/usr/bin/env python3
"""A seeded random-weight GGUF shaped like Llama-3.1-8B, Q4_0, for measuring how sinkscope loads a
model as large as users run (benches/llama8b_shaped.sh). Generated on the fly, never committed;
not a trained model (no sinks to speak of): it exercises sizes, memory and speed, not findings.

Run from the repository root (numpy, and gguf-py: the `gguf` package, or llama.cpp's own under
DIR/gguf-py with --gguf-py DIR):

    python3 benches/make_llama8b_gguf.py --out /tmp/llama8b-q4_0.gguf [--layers 32] [--seed 1234]

Shape (Llama-3.1-8B's): d_model 4,096, 32 layers, 32 query / 8 key-value heads of 128, d_ff
14,336, vocabulary 128,256, untied output head, RoPE base 500,000 with Llama 3.1's scaling as
llama.cpp's converter writes it (`rope_freqs.weight`: factor 8, low/high 1/4, original context
8,192), context 131,072. Every matrix is Q4_0 (4.5 bits a weight: 8.03 B parameters, 4.5 GB);
norms and the RoPE factors f32. Q4_0 blocks: a random f16 scale around 0.004 and random nibbles,
so weights are about ±0.03. The tokenizer is stories260K's 512-token vocabulary (ids fit in the
128,256 rows). Written tensor by tensor (little memory), to a temporary name, then renamed.
"""

import argparse
import math
import os
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SINKSCOPE_SHARED", REPO.parent / "shared")).resolve()
D, HEADS, KV_HEADS, D_HEAD, FF, VOCAB, CONTEXT, THETA = 4096, 32, 8, 128, 14336, 128256, 131072, 500000.0


def llama3_factors():
    """The factors convert_hf_to_gguf.py writes for Llama 3.1's scaling."""
    factor, low, high, old = 8.0, 1.0, 4.0, 8192
    freqs = 1.0 / (THETA ** (np.arange(0, D_HEAD, 2, dtype=np.float32) / D_HEAD))
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, dtype=np.float32)


def q4_0(rng, rows, cols):
    """rows × cols weights as Q4_0 blocks (18 bytes per 32: f16 scale, 16 bytes of nibbles)."""
    blocks = rows * cols // 32
    out = np.empty((blocks, 18), dtype=np.uint8)
    scale = (0.004 * (0.5 + rng.random(blocks, dtype=np.float32))).astype(np.float16)
    out[:, :2] = scale.view(np.uint8).reshape(blocks, 2)
    out[:, 2:] = rng.integers(0, 256, size=(blocks, 16), dtype=np.uint8)
    return out.reshape(rows, cols // 32 * 18)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--gguf-py", help="llama.cpp's source tree, to use its gguf-py")
    a = ap.parse_args()
    if a.gguf_py:
        sys.path.insert(0, str(Path(a.gguf_py) / "gguf-py"))
    import gguf

    rng = np.random.default_rng(a.seed)
    tmp = a.out.with_name(a.out.name + ".part")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name("random Llama-3.1-8B-shaped (sinkscope bench)")
    w.add_block_count(a.layers)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(D)
    w.add_feed_forward_length(FF)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(THETA)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(D_HEAD)
    w.add_vocab_size(VOCAB)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_0)
    reader = gguf.GGUFReader(str(SHARED / "models" / "stories260K.gguf"))
    tok = {n: f.contents() for n, f in reader.fields.items() if n.startswith("tokenizer.")}
    w.add_tokenizer_model(tok["tokenizer.ggml.model"])
    w.add_token_list(tok["tokenizer.ggml.tokens"])
    w.add_token_scores(tok["tokenizer.ggml.scores"])
    w.add_token_types(tok["tokenizer.ggml.token_type"])
    w.add_bos_token_id(tok["tokenizer.ggml.bos_token_id"])
    w.add_eos_token_id(tok["tokenizer.ggml.eos_token_id"])
    # (name, rows, cols) of every Q4_0 matrix, then the f32 vectors.
    matrices = [("token_embd.weight", VOCAB, D), ("output.weight", VOCAB, D)]
    vectors = [("output_norm.weight", D), ("rope_freqs.weight", D_HEAD // 2)]
    for l in range(a.layers):
        b = f"blk.{l}."
        matrices += [(b + "attn_q.weight", HEADS * D_HEAD, D), (b + "attn_k.weight", KV_HEADS * D_HEAD, D), (b + "attn_v.weight", KV_HEADS * D_HEAD, D)]
        matrices += [(b + "attn_output.weight", D, HEADS * D_HEAD), (b + "ffn_gate.weight", FF, D), (b + "ffn_up.weight", FF, D), (b + "ffn_down.weight", D, FF)]
        vectors += [(b + "attn_norm.weight", D), (b + "ffn_norm.weight", D)]
    for name, rows, cols in matrices:
        w.add_tensor_info(name, (rows, cols // 32 * 18), np.dtype(np.uint8), rows * cols // 32 * 18, raw_dtype=gguf.GGMLQuantizationType.Q4_0)
    for name, n in vectors:
        w.add_tensor_info(name, (n,), np.dtype(np.float32), 4 * n)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for name, rows, cols in matrices:
        w.write_tensor_data(q4_0(rng, rows, cols))
    for name, n in vectors:
        w.write_tensor_data(llama3_factors() if name == "rope_freqs.weight" else (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))
    w.close()
    os.replace(tmp, a.out)
    print(f"{a.out}: {a.out.stat().st_size / 1e9:.2f} GB, {a.layers} layers")


if __name__ == "__main__":
    main()
