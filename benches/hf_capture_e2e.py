#!/usr/bin/env python3
"""HF transformers doing the whole job of one `sinkscope capture` command, for the end-to-end
comparison in benches/capture_vs_hf.sh (the shell times this whole process, imports included).

    /work/venv/bin/python benches/hf_capture_e2e.py --text FILE --max-tokens 512 --out F.json \
        [--model-dir DIR] [--threads 2]

Loads SmolLM2-135M-Instruct in float32 with eager attention -- from the Q4_1 GGUF (dequantized by
transformers, as the parity fixtures are made) or, with --model-dir, from a safetensors directory
written once by `--convert DIR` (HF's fastest load) -- tokenizes the file with SmolLM2's tokenizer,
keeps the first --max-tokens ids, runs one forward with output_attentions=True and all-position
logits, reduces it as sinkscope's capture does (per-(layer, head) attention mass on the first 16
keys, per-layer max |h| and its dim, median |h|, perplexity) and writes that summary as JSON.
"""

import argparse
import json
import os
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SINKSCOPE_SHARED", REPO.parent / "shared")).resolve()
MODELS = SHARED / "models"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOKENIZER = MODELS / "smollm2-135m-tokenizer"


def load_model(model_dir, models=MODELS):
    """SmolLM2 in float32, eager attention: from `model_dir` (safetensors) or the GGUF in `models`."""
    import torch
    from transformers import AutoModelForCausalLM

    where, kw = (model_dir, {}) if model_dir else (models, {"gguf_file": GGUF})
    try:
        model = AutoModelForCausalLM.from_pretrained(where, dtype=torch.float32, attn_implementation="eager", **kw)
    except TypeError:  # older transformers
        model = AutoModelForCausalLM.from_pretrained(where, torch_dtype=torch.float32, attn_implementation="eager", **kw)
    return model.eval()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", help="text file to capture")
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--out", help="summary JSON to write")
    ap.add_argument("--model-dir", help="safetensors directory written by --convert (default: load the GGUF)")
    ap.add_argument("--convert", metavar="DIR", help="write the GGUF's float32 weights as a safetensors directory and exit")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    torch.set_num_threads(args.threads)
    if args.convert:
        model = load_model(None)
        # The weights are plain float32 by now; drop the GGUF marker that blocks saving them.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(args.convert)
        return

    t0 = time.perf_counter()
    model = load_model(args.model_dir)
    tokenizer = AutoTokenizer.from_pretrained(TOKENIZER)
    ids = tokenizer(Path(args.text).read_text(encoding="utf-8"))["input_ids"][: args.max_tokens]
    t1 = time.perf_counter()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_attentions=True, use_cache=False, output_hidden_states=True)
    mass = torch.stack([a[0, :, :, :16].mean(dim=1) for a in out.attentions])  # [L, H, 16]
    hidden = torch.stack(out.hidden_states[1:])[:, 0].abs()  # [L, T, D]
    max_abs, flat = hidden.reshape(hidden.shape[0], -1).max(dim=1)
    median_abs = hidden.reshape(hidden.shape[0], -1).median(dim=1).values
    nll = torch.nn.functional.cross_entropy(out.logits[0, :-1], torch.tensor(ids[1:]), reduction="mean")
    t2 = time.perf_counter()
    summary = {
        "tokens": len(ids),
        "perplexity": float(nll.exp()),
        "mass_first_keys": mass.tolist(),
        "max_abs": max_abs.tolist(),
        "max_dim": (flat % hidden.shape[2]).tolist(),
        "median_abs": median_abs.tolist(),
        "load_and_tokenize_s": round(t1 - t0, 3),
        "forward_and_reduce_s": round(t2 - t1, 3),
    }
    Path(args.out).write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
