#!/usr/bin/env python3
"""HF transformers' side of benches/capture_vs_hf_gguf.sh: loads a GGUF in float32 (eager
attention), then times R forwards over the given token ids with output_attentions=True and
all-position logits turned into each next token's NLL by log-softmax (what sinkscope's capture
computes), and prints one JSON line: min/median seconds, perplexity and peak RSS (VmHWM).

    python benches/hf_forward_gguf.py --gguf PATH --tokens F.json [--repeat 3] [--threads 2]
"""

import argparse
import json
import time
from pathlib import Path


def peak_rss_mb():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(a.threads)
    g = Path(a.gguf)
    model = AutoModelForCausalLM.from_pretrained(str(g.parent), gguf_file=g.name, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.tensor([json.loads(Path(a.tokens).read_text())])
    walls = []
    with torch.no_grad():
        for _ in range(a.repeat):
            t = time.perf_counter()
            out = model(input_ids=ids, output_attentions=True, use_cache=False)
            nll = -torch.log_softmax(out.logits[0, :-1], dim=-1).gather(1, ids[0, 1:, None])
            walls.append(time.perf_counter() - t)
            ppl = float(nll.double().mean().exp())
            del out, nll
    walls.sort()
    print(json.dumps({"tokens": ids.shape[1], "min_s": walls[0], "median_s": walls[len(walls) // 2], "perplexity": ppl, "peak_rss_mb": peak_rss_mb()}))


if __name__ == "__main__":
    main()
