#!/usr/bin/env python3
"""llama.cpp's side of benches/speed_vs_llama_cpp.sh: through the llama-cpp-python bindings of
scripts/llama-cpp/build.sh, on the same GGUF and token ids as `cargo bench --bench speed`, one run
of each: prompt processing at each length with every position's logits (batches of 512, as
sinkscope's capture scores every position), the same with only the last position's logits (what
llama-bench's pp measures), and decoding 128 tokens one at a time after the first, each with its
logits (llama-bench's tg128); and llama.cpp's own perplexity over the shortest prompt (from the
logits of the all-position run, after the timing). Prints one JSON object.

    LLAMA_CPP_LIB_PATH=$CACHE/build/bin $CACHE/venv/bin/python benches/llama_cpp_speed.py \
        --model M.gguf --ids ids.json [--lengths 512,2048] [--threads 2]
"""

import argparse
import json
import math
import time

import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True)
    ap.add_argument("--lengths", default="512,2048")
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import llama_cpp as L

    ids = json.load(open(a.ids))
    lengths = [int(t) for t in a.lengths.split(",")]
    quiet = L.llama_log_callback(lambda level, text, user: None)
    L.llama_log_set(quiet, None)
    L.llama_backend_init()
    model = L.llama_model_load_from_file(a.model.encode(), L.llama_model_default_params())
    if not model:
        raise SystemExit(f"llama.cpp cannot load {a.model}")

    def context(n_ctx):
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = cp.n_ubatch = 512
        cp.n_seq_max = 1
        cp.n_threads = cp.n_threads_batch = a.threads
        ctx = L.llama_init_from_model(model, cp)
        if not ctx:
            raise SystemExit("llama.cpp cannot create the context")
        return ctx

    batch = L.llama_batch_init(512, 0, 1)

    def decode(ctx, tokens, pos0, all_logits):
        for b0 in range(0, len(tokens), 512):
            part = tokens[b0 : b0 + 512]
            batch.n_tokens = len(part)
            for k, tok in enumerate(part):
                batch.token[k] = tok
                batch.pos[k] = pos0 + b0 + k
                batch.n_seq_id[k] = 1
                batch.seq_id[k][0] = 0
                batch.logits[k] = 1 if all_logits or b0 + k == len(tokens) - 1 else 0
            if L.llama_decode(ctx, batch) != 0:
                raise SystemExit("llama_decode failed")

    out = {"threads": a.threads, "prompt": {}}
    for t in lengths:
        row = {}
        for name, all_logits in (("all_logits_tok_s", True), ("last_logits_tok_s", False)):
            ctx = context(t)
            start = time.perf_counter()
            decode(ctx, ids[:t], 0, all_logits)
            row[name] = t / (time.perf_counter() - start)
            if all_logits and t == min(lengths):
                n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(model))
                nll = 0.0
                for k in range(t - 1):
                    logits = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, k), shape=(n_vocab,)).astype(np.float64)
                    top = logits.max()
                    nll += top + math.log(np.exp(logits - top).sum()) - logits[ids[k + 1]]
                out["perplexity"] = {"tokens": t, "ppl": math.exp(nll / (t - 1))}
            L.llama_free(ctx)
        out["prompt"][str(t)] = row
    ctx = context(256)
    decode(ctx, ids[:1], 0, True)
    start = time.perf_counter()
    for i in range(1, 129):
        decode(ctx, ids[i : i + 1], i, True)
    out["decode_tok_s"] = 128 / (time.perf_counter() - start)
    L.llama_free(ctx)
    L.llama_batch_free(batch)
    L.llama_model_free(model)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
