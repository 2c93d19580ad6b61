#!/usr/bin/env python3
"""A seeded random-weight Llama of Llama-3.2-1B's shape as an HF directory, for measuring what
bf16 weight storage saves (benches/bf16_storage.sh). Not a trained model: its attention has no
sinks to speak of; it exercises sizes, not findings.

Run from the repository root (a venv with torch and safetensors):

    /work/venv-ref/bin/python benches/make_random_llama.py --out /tmp/random-llama-1b

    options: --layers N (default 16)   --seed S (default 1234)   --dtype bf16|f16|f32 (default bf16)

Shape: d_model 2,048, 16 layers, 32 query / 8 key-value heads of 64, d_ff 8,192, tied embeddings,
RoPE base 500,000 (as Llama 3.2 1B), with SmolLM2's 49,152-token vocabulary so its tokenizer.json
(copied from ../shared/models/smollm2-135m-tokenizer) encodes the texts: 1.07 B parameters,
2.1 GB in bf16. Matrices are N(0, 0.02²) as a fresh Llama is initialised; norm weights 1 + N(0, 0.1²).
Written to a temporary name in the output's parent and renamed, so a half-written directory is
never left under the final name.
"""

import argparse
import json
import os
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SINKSCOPE_SHARED", REPO.parent / "shared")).resolve()
TOKENIZER = SHARED / "models" / "smollm2-135m-tokenizer" / "tokenizer.json"
D, HEADS, KV_HEADS, D_HEAD, FF, VOCAB = 2048, 32, 8, 64, 8192, 49152
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    args = ap.parse_args()
    dtype = DTYPES[args.dtype]
    gen = torch.Generator().manual_seed(args.seed)

    def matrix(rows, cols):
        return (0.02 * torch.randn(rows, cols, generator=gen)).to(dtype)

    def norm():
        return (1.0 + 0.1 * torch.randn(D, generator=gen)).to(dtype)

    tensors = {"model.embed_tokens.weight": matrix(VOCAB, D), "model.norm.weight": norm()}
    for l in range(args.layers):
        p = f"model.layers.{l}."
        tensors[p + "input_layernorm.weight"] = norm()
        tensors[p + "post_attention_layernorm.weight"] = norm()
        tensors[p + "self_attn.q_proj.weight"] = matrix(HEADS * D_HEAD, D)
        tensors[p + "self_attn.k_proj.weight"] = matrix(KV_HEADS * D_HEAD, D)
        tensors[p + "self_attn.v_proj.weight"] = matrix(KV_HEADS * D_HEAD, D)
        tensors[p + "self_attn.o_proj.weight"] = matrix(D, HEADS * D_HEAD)
        tensors[p + "mlp.gate_proj.weight"] = matrix(FF, D)
        tensors[p + "mlp.up_proj.weight"] = matrix(FF, D)
        tensors[p + "mlp.down_proj.weight"] = matrix(D, FF)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": D,
        "intermediate_size": FF,
        "num_hidden_layers": args.layers,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": D_HEAD,
        "vocab_size": VOCAB,
        "max_position_embeddings": 8192,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": {"bf16": "bfloat16", "f16": "float16", "f32": "float32"}[args.dtype],
    }
    out = args.out.resolve()
    tmp = out.parent / (out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    save_file(tensors, tmp / "model.safetensors", metadata={"format": "pt", "seed": str(args.seed)})
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    shutil.copy(TOKENIZER, tmp / "tokenizer.json")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    n = sum(t.numel() for t in tensors.values())
    size = (out / "model.safetensors").stat().st_size
    print(f"{out}: {n / 1e9:.3f} B parameters, {size / 2**30:.2f} GiB ({args.dtype})")


if __name__ == "__main__":
    main()
