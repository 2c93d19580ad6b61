#!/usr/bin/env python3
"""HF transformers baseline for sinkscope's capture benchmark.

    /work/venv/bin/python benches/hf_capture_reference.py --tokens FILE.json --threads 2

FILE.json is a JSON list of SmolLM2 token ids. Loads SmolLM2-135M-Instruct (Q4_1 GGUF dequantized to
float32 by transformers, eager attention), runs one warm-up forward on 16 tokens, then times one
forward over all the given tokens with output_attentions=True and reduces every layer's attention
pattern to the per-(layer, head) mean attention on key 0 -- the same work as sinkscope's capture.
Prints one JSON object: wall_s, load_s, peak_rss_mb, tokens, torch (plus a few extras).
"""

import argparse
import json
import os
import resource
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoModelForCausalLM

REPO = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("SINKSCOPE_SHARED", REPO.parent / "shared")).resolve()
MODELS = SHARED / "models"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", required=True, help="JSON list of token ids")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default=str(MODELS), help="directory holding the GGUF")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs; min and median are reported")
    ap.add_argument("--logits-to-keep", type=int, default=0,
                    help="0 (default): logits for every position, as a plain forward; 1: only the last position's")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    ids = json.loads(Path(args.tokens).read_text())
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids) and ids, "tokens must be a JSON list of ints"

    t0 = time.perf_counter()
    kw = dict(gguf_file=GGUF, attn_implementation="eager")
    try:
        model = AutoModelForCausalLM.from_pretrained(args.models, dtype=torch.float32, **kw)
    except TypeError:  # older transformers
        model = AutoModelForCausalLM.from_pretrained(args.models, torch_dtype=torch.float32, **kw)
    model.eval()
    load_s = time.perf_counter() - t0

    def capture(tok_ids):
        out = model(input_ids=torch.tensor([tok_ids], dtype=torch.long), output_attentions=True, use_cache=False,
                    logits_to_keep=args.logits_to_keep)
        # per-(layer, head) mean over query positions of the attention on key 0
        sink = torch.stack([a[0, :, :, 0].mean(dim=-1) for a in out.attentions])  # [L, H]
        return sink, out.logits

    with torch.no_grad():
        capture(ids[:16])  # warm-up
        walls = []
        for _ in range(max(1, args.repeat)):
            t1 = time.perf_counter()
            sink, _ = capture(ids)
            walls.append(time.perf_counter() - t1)
        walls.sort()
        wall_s = walls[0]

    print(
        json.dumps(
            {
                "impl": "hf-transformers-eager",
                "logits_to_keep": args.logits_to_keep,
                "wall_s": round(wall_s, 4),
                "wall_s_min": round(walls[0], 4),
                "wall_s_median": round(walls[len(walls) // 2], 4),
                "repeat": len(walls),
                "load_s": round(load_s, 4),
                "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "tokens": len(ids),
                "torch": torch.__version__,
                "transformers": transformers.__version__,
                "threads": args.threads,
                "sink_mean": round(float(sink.mean()), 6),
            }
        )
    )


if __name__ == "__main__":
    main()
