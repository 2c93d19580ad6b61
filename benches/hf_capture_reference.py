#!/usr/bin/env python3
"""HF transformers baseline for sinkscope's capture benchmark.

    /work/venv/bin/python benches/hf_capture_reference.py --tokens FILE.json --threads 2 [--repeat R] [--model-dir DIR]

FILE.json is a JSON list of SmolLM2 token ids. Loads SmolLM2-135M-Instruct in float32 with eager
attention -- the Q4_1 GGUF dequantized by transformers, or with --model-dir the same weights saved
as safetensors by `benches/hf_capture_e2e.py --convert DIR` (faster to load) -- runs one warm-up
forward on 16 tokens, then times R forwards over all the given tokens with output_attentions=True
and every position's logits, and R with logits_to_keep=1 (only the last position's), alternating,
each reducing every layer's attention pattern to the per-(layer, head) mean attention on key 0.
Prints one JSON object: with_logits / without_logits {wall_s_min, wall_s_median}, load_s,
peak_rss_mb, tokens, torch (plus a few extras).
"""

import argparse
import json
import resource
import time
from pathlib import Path

import torch
import transformers

from hf_capture_e2e import MODELS, load_model  # benches/ is on the path when run as a script


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", required=True, help="JSON list of token ids")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default=str(MODELS), help="directory holding the GGUF")
    ap.add_argument("--model-dir", help="float32 safetensors directory (default: load the GGUF)")
    ap.add_argument("--repeat", type=int, default=1, help="timed runs of each variant; min and median are reported")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    ids = json.loads(Path(args.tokens).read_text())
    assert isinstance(ids, list) and all(isinstance(i, int) for i in ids) and ids, "tokens must be a JSON list of ints"

    t0 = time.perf_counter()
    model = load_model(args.model_dir, Path(args.models))
    load_s = time.perf_counter() - t0

    def capture(tok_ids, logits_to_keep=0):
        out = model(input_ids=torch.tensor([tok_ids], dtype=torch.long), output_attentions=True, use_cache=False,
                    logits_to_keep=logits_to_keep)
        # per-(layer, head) mean over query positions of the attention on key 0
        sink = torch.stack([a[0, :, :, 0].mean(dim=-1) for a in out.attentions])  # [L, H]
        return sink, out.logits

    with torch.no_grad():
        capture(ids[:16])  # warm-up
        walls = {0: [], 1: []}  # logits_to_keep -> wall times
        for i in range(max(1, args.repeat)):
            for keep in (i % 2, 1 - i % 2):
                t1 = time.perf_counter()
                sink, _ = capture(ids, keep)
                walls[keep].append(time.perf_counter() - t1)

    def stats(w):
        w.sort()
        return {"wall_s_min": round(w[0], 4), "wall_s_median": round(w[len(w) // 2], 4)}

    print(
        json.dumps(
            {
                "impl": "hf-transformers-eager",
                "with_logits": stats(walls[0]),
                "without_logits": stats(walls[1]),
                "repeat": len(walls[0]),
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
