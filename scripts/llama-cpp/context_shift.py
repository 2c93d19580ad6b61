#!/usr/bin/env python3
"""Drives llama.cpp's own KV memory the way its server shifts context, over forced token ids.

The reference for sinkscope's `keep` policy (with `--positions delta`): llama.cpp (through the
llama-cpp-python bindings of `scripts/llama-cpp/build.sh`) decodes the given token ids as a server
slot generating them would, and writes each token's log-probability. The rule is the server's
(`tools/server/server-context.cpp`, `pre_decode`): before a token is decoded, if the cache holds
`n_past` entries with `n_past + 1 >= n_ctx`, keep the first `n_keep = --keep (+1 when the model adds
BOS)` entries, discard `n_discard = (n_past - n_keep) / 2` after them (`llama_memory_seq_rm`), and
move the survivors back by `n_discard` (`llama_memory_seq_add`, which re-rotates their keys on the
next decode). The first `--prompt` tokens are decoded as one batch (a prompt), then one token per
decode (generation), as in the server.

`--break` makes a deliberately broken engine, for `sinkscope verify` to catch:
  no-shift      survivors are never moved back (keys keep their rotation; new tokens continue at
                their stream index)
  evict-bos     BOS not counted in n_keep
  keep-plus-one n_keep one larger than the server's
  budget-minus-one  shifts one token early (when n_past + 2 >= n_ctx)

Output: `--out FILE.jsonl`, one line per token, `{"id": token_id, "logprob": x}` (the first token's
logprob is null: nothing predicts it), preceded by nothing else, so `sinkscope verify` and `watch`
read it as a JSONL trace; `--summary FILE.json` says what the engine did (n_ctx, n_keep, each
shift's step and discard count, timings).

    LLAMA_CPP_LIB_PATH=$CACHE/build/bin $CACHE/venv/bin/python context_shift.py \
        --model M.gguf --ids ids.json --ctx 256 --keep 4 --out trace.jsonl --summary shifts.json
"""

import argparse
import ctypes
import json
import math
import os
import sys
import tempfile
import time

import numpy as np

# ggml's type ids (ggml.h) of the cache types llama.cpp's --cache-type-k/-v accept.
GGML_TYPES = {"f32": 0, "f16": 1, "q4_0": 2, "q4_1": 3, "q5_0": 6, "q5_1": 7, "q8_0": 8, "iq4_nl": 20, "bf16": 30}

BREAKS = ("none", "no-shift", "evict-bos", "keep-plus-one", "budget-minus-one")


def fail(msg):
    print(f"context_shift.py: {msg}", file=sys.stderr)
    sys.exit(2)


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".context_shift.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def read_ids(path):
    with open(path) as f:
        text = f.read()
    try:
        ids = json.loads(text)
    except json.JSONDecodeError:
        ids = [int(x) for x in text.split()]
    if isinstance(ids, dict):
        ids = ids.get("ids")
    if not isinstance(ids, list) or not all(isinstance(i, int) for i in ids):
        fail(f"{path}: not a JSON list of token ids (or whitespace-separated integers)")
    return ids


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", required=True)
    ap.add_argument("--ids", required=True, help="token ids: a JSON list or whitespace-separated")
    ap.add_argument("--ctx", type=int, required=True, help="llama.cpp's n_ctx (a multiple of 256)")
    ap.add_argument("--keep", type=int, default=0, help="the server's --keep (BOS is added to it)")
    ap.add_argument("--dense", action="store_true", help="no shift: n_ctx holds every token")
    ap.add_argument("--prompt", type=int, default=None, help="tokens decoded as one batch first [default: n_ctx/2]")
    ap.add_argument("--break", dest="brk", choices=BREAKS, default="none")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--kv-type", choices=["f16", "f32"], default="f16", help="the KV cache's type; f32 also turns flash attention off [default: f16, llama.cpp's]")
    ap.add_argument("--type-k", choices=sorted(GGML_TYPES), help="the key cache's type (llama.cpp's --cache-type-k), flash attention as llama.cpp chooses")
    ap.add_argument("--type-v", choices=sorted(GGML_TYPES), help="the value cache's type (--cache-type-v)")
    ap.add_argument("--no-attn-rot", action="store_true", help="LLAMA_ATTN_ROT_DISABLE=1: no Hadamard rotation of a quantized cache")
    ap.add_argument("--no-flash-attn", action="store_true", help="flash attention off (llama.cpp refuses a quantized V cache without it)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--summary")
    ap.add_argument("--verbose", action="store_true", help="llama.cpp's own log on stderr")
    a = ap.parse_args()
    if a.no_attn_rot:
        os.environ["LLAMA_ATTN_ROT_DISABLE"] = "1"

    import llama_cpp as L

    ids = read_ids(a.ids)
    if len(ids) < 2:
        fail(f"{a.ids}: fewer than 2 tokens")
    # llama.cpp's log goes to stderr only with --verbose (the callback must outlive the run).
    quiet = L.llama_log_callback(lambda level, text, user: None)
    if not a.verbose:
        L.llama_log_set(quiet, None)
    L.llama_backend_init()
    mp = L.llama_model_default_params()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        fail(f"{a.model}: llama.cpp cannot load it")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    add_bos = bool(L.llama_vocab_get_add_bos(vocab))
    bad = [i for i in ids if not 0 <= i < n_vocab]
    if bad:
        fail(f"{a.ids}: token id {bad[0]} is outside the model's vocabulary of {n_vocab}")

    cp = L.llama_context_default_params()
    want_ctx = len(ids) + 1 if a.dense else a.ctx
    cp.n_ctx = want_ctx
    cp.n_batch = cp.n_ubatch = 512
    cp.n_seq_max = 1
    if a.kv_type == "f32":
        # f32 keys and values, and no flash attention (its CPU kernel rounds to f16 on the way).
        cp.type_k = cp.type_v = 0  # GGML_TYPE_F32
        cp.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    if a.type_k or a.type_v:
        if a.kv_type != "f16":
            fail("--kv-type f32 and --type-k/--type-v do not go together")
        cp.type_k = GGML_TYPES[a.type_k or "f16"]
        cp.type_v = GGML_TYPES[a.type_v or "f16"]
    if a.no_flash_attn:
        cp.flash_attn_type = 0  # LLAMA_FLASH_ATTN_TYPE_DISABLED
    cp.n_threads = cp.n_threads_batch = a.threads
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        fail("llama.cpp cannot create the context")
    n_ctx = L.llama_n_ctx(ctx)
    mem = L.llama_get_memory(ctx)
    can_shift = bool(L.llama_memory_can_shift(mem))
    if not a.dense and not can_shift:
        # The server disables context shift for such a model ("ctx_shift is not supported by
        # this context"): say so, as it does.
        fail(f"llama.cpp refuses to shift this model's cache (llama_memory_can_shift is false): {a.model}")

    # The server's n_keep (tools/server: `if (add_bos_token) n_keep += 1`), then the broken variants.
    n_keep = a.keep + (1 if add_bos else 0)
    if a.brk == "evict-bos":
        n_keep = a.keep
    elif a.brk == "keep-plus-one":
        n_keep += 1
    n_keep = min(n_ctx - 4, n_keep)
    full_at = n_ctx - (1 if a.brk == "budget-minus-one" else 0)

    batch = L.llama_batch_init(512, 0, 1)
    logprob = [None] * len(ids)
    shifts = []
    cached = []  # the position of each cache entry, in cache order
    pos_next = 0  # the position the next token gets
    prompt = a.prompt if a.prompt is not None else n_ctx // 2
    t = 0
    t0 = time.time()

    def decode(tokens, first_step):
        nonlocal pos_next
        batch.n_tokens = len(tokens)
        for k, tok in enumerate(tokens):
            batch.token[k] = tok
            batch.pos[k] = pos_next + k
            batch.n_seq_id[k] = 1
            batch.seq_id[k][0] = 0
            batch.logits[k] = 1
        rc = L.llama_decode(ctx, batch)
        if rc != 0:
            fail(f"llama_decode returned {rc} at step {first_step}")
        for k in range(len(tokens)):
            step = first_step + k
            if step + 1 < len(ids):
                row = np.ctypeslib.as_array(L.llama_get_logits_ith(ctx, k), shape=(n_vocab,)).astype(np.float64)
                m = row.max()
                lse = m + math.log(np.exp(row - m).sum())
                logprob[step + 1] = float(row[ids[step + 1]] - lse)
        cached.extend(range(pos_next, pos_next + len(tokens)))
        pos_next += len(tokens)

    # The prompt: one batch (never past what fits before the first shift).
    first = min(prompt, len(ids) - 1, 512, full_at - 1)
    if a.dense:
        while t < len(ids) - 1:
            k = min(512, len(ids) - 1 - t)
            decode(ids[t : t + k], t)
            t += k
    else:
        decode(ids[:first], 0)
        t = first
        while t < len(ids) - 1:
            n_past = len(cached)
            if n_past + 1 >= full_at and n_past - n_keep >= 2:
                n_left = n_past - n_keep
                n_discard = max(0, min(n_left // 2, n_left - 1))
                shifts.append({"step": t, "n_past": n_past, "n_keep": n_keep, "n_discard": n_discard})
                # The server's seq_rm(n_keep, n_keep + n_discard) in position terms, which are
                # cache order while positions stay contiguous (always, unless --break no-shift).
                p0, p1 = cached[n_keep], cached[n_keep + n_discard - 1] + 1
                L.llama_memory_seq_rm(mem, 0, p0, p1)
                del cached[n_keep : n_keep + n_discard]
                if a.brk != "no-shift":
                    assert (p0, p1) == (n_keep, n_keep + n_discard), "positions stay contiguous"
                    L.llama_memory_seq_add(mem, 0, p1, pos_next, -n_discard)
                    cached = [p - n_discard if p >= p1 else p for p in cached]
                    pos_next -= n_discard
            decode([ids[t]], t)
            t += 1
    elapsed = time.time() - t0
    L.llama_batch_free(batch)

    lines = [json.dumps({"id": tok, "logprob": lp}) for tok, lp in zip(ids, logprob)]
    write_atomic(a.out, "\n".join(lines) + "\n")
    if a.summary:
        scored = [-lp for lp in logprob if lp is not None]
        summary = {
            "engine": f"llama.cpp vendored by llama-cpp-python {L.__version__}",
            "model": a.model,
            "tokens": len(ids),
            "n_ctx": n_ctx,
            "requested_ctx": want_ctx,
            "keep": a.keep,
            "add_bos": add_bos,
            "n_keep": n_keep,
            "dense": a.dense,
            "break": a.brk,
            "type_k": a.type_k or ("f32" if a.kv_type == "f32" else "f16"),
            "type_v": a.type_v or ("f32" if a.kv_type == "f32" else "f16"),
            "attn_rot": not a.no_attn_rot,
            "can_shift": can_shift,
            "prompt_batch": first if not a.dense else None,
            "shifts": shifts,
            "ppl": math.exp(sum(scored) / len(scored)),
            "seconds": elapsed,
        }
        write_atomic(a.summary, json.dumps(summary, indent=1) + "\n")
    L.llama_free(ctx)
    L.llama_model_free(model)


if __name__ == "__main__":
    main()
