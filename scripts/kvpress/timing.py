#!/usr/bin/env python3
"""CPU time of kvpress 0.5.5 per press on the reference prompt, for docs/findings.md.

Times, per press at ratio 0.5 (and the wrappers sinkscope also runs), what `sinkscope press` does
for one press: prefill the 512-token context under the press (compressing the cache), then run the
24-token question and 16-token answer after it (teacher-forced), on SmolLM2-135M in float32 on the
CPU, the best of 3. The same inputs and model as reference.py. Prints one line per press.

    THREADS=1 /work/venv-kvpress/bin/python scripts/kvpress/timing.py
"""

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference as ref  # noqa: E402  (sets the thread count from THREADS)

import torch  # noqa: E402
from kvpress import AdaKVPress, ChunkKVPress, KnormPress, PyramidKVPress, SnapKVPress  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402


def timed(model, context, question, answer, make):
    best = float("inf")
    for _ in range(3):
        t = time.perf_counter()
        cache = ref.prefill(model, context, make())
        ref.append_qa(model, cache, question, answer)
        best = min(best, time.perf_counter() - t)
    return best


def main():
    _, context, question, answer = ref.tokens()
    eager = ref.load_model()
    presses = [(name, eager, (lambda cls=cls, kw=kw: cls(compression_ratio=0.5, **kw))) for name, (cls, kw) in ref.PRESSES.items()]
    presses.append(("pyramidkv 0.75", eager, lambda: PyramidKVPress(compression_ratio=0.75)))
    sdpa = AutoModelForCausalLM.from_pretrained(str(ref.MODELS), gguf_file=ref.GGUF, dtype=torch.float32, attn_implementation="sdpa")
    sdpa.eval()
    presses.append(("adakv(snapkv)", sdpa, lambda: AdaKVPress(SnapKVPress(compression_ratio=0.5))))
    presses.append(("knorm+block16", sdpa, lambda: ChunkKVPress(KnormPress(compression_ratio=0.5), chunk_length=16)))
    print(f"threads {torch.get_num_threads()}; none: {timed(eager, context, question, answer, lambda: None):.2f} s")
    for name, model, make in presses:
        print(f"{name:22s} {timed(model, context, question, answer, make):.2f} s", flush=True)


if __name__ == "__main__":
    main()
