#!/usr/bin/env python3
"""kvpress reference for sinkscope's press tests: what NVIDIA kvpress does to SmolLM2-135M.

What it is
----------
For several kvpress presses x compression ratios this records, for SmolLM2-135M-Instruct (Q4_1 GGUF
dequantized to float32 by transformers' GGUF loader, eager attention, CPU), exactly which context
positions kvpress keeps per (layer, KV head) and the teacher-forced per-token NLL of a 16-token answer.
The output is tests/fixtures/kvpress_reference.json; the Rust tests in tests/press.rs (to be written)
read it.

How to rerun (from the repository root; ~2-4 minutes on one core)
-----------------------------------------------------------------
    /work/venv-kvpress/bin/pip install gguf accelerate      # kvpress 0.5.5, transformers 5.2.0, torch 2.15
    THREADS=1 /work/venv-kvpress/bin/python scripts/kvpress/reference.py

Inputs: /work/shared/models/SmolLM2-135M-Instruct.Q4_1.gguf, the tokenizer
/work/shared/models/smollm2-135m-tokenizer/tokenizer.json (adds no BOS) and
/work/shared/corpora/pg1342_pride_and_prejudice.txt (override the /work/shared root with
SINKSCOPE_SHARED=/path). The text from character 100000 is encoded once; ids [0:512) are the CONTEXT,
[512:536) the QUESTION, [536:552) the ANSWER. All three id lists are in the JSON.

The setting (kvpress's default, query-agnostic; mirrors KVPressTextGenerationPipeline._forward)
------------------------------------------------------------------------------------------------
1. The context (512 ids, positions 0..511) is prefilled with `model.model(input_ids=context,
   past_key_values=DynamicCache())` inside `with press(model):`. kvpress's forward hook runs after each
   attention layer's prefill attention and replaces that layer's cache by the compressed one (so layer
   l+1 is computed from un-compressed hidden states; only the cache is compressed). For ScorerPress
   subclasses the compression is `scores.topk(n_kept, dim=-1).indices` then `keys.gather(2, idx)`
   (same for values), n_kept = max(1, int(512 * (1 - ratio))), per layer and per KV head.
2. The press is then removed and question + answer (40 ids) are appended uncompressed in one teacher-
   forced forward with `position_ids = 512 .. 551`: the pipeline passes
   `position_ids = arange(context_length, ...)` where context_length is the ORIGINAL context length
   (512), so RoPE positions continue from 512 even though the cache holds only n_kept entries.
   `cache_position` is left to transformers, which derives it from the compressed cache length
   (n_kept .. n_kept+39); it is only used to build the causal mask over the cache slots, which is
   exactly causal over the appended tokens and fully visible over the kept context.
3. answer_nll[k] = -log_softmax(float64(logits))[answer[k]] from the logits row of the token before
   answer[k] (k = 0 is predicted from the question's last token), in nats.

Bitmask encoding of kept positions
----------------------------------
kept[layer][kv_head] is the integer K = sum(1 << p for kept context positions p in 0..511) written as
exactly 128 lowercase hex digits, big-endian, no "0x": position p is bit (p % 4) of the hex digit at
string index 127 - p // 4. Python: `int(s, 16) >> p & 1`. popcount(K) == n_kept.

Ties
----
scores are kvpress's own score tensor (batch 0) for that layer. With cut = n_kept-th largest score:
ties_at_cut[l][h] = number of positions whose score == cut (always >= 1); ties_at_cut_kept[l][h] = how
many of those were kept. If ties_at_cut > ties_at_cut_kept the kept set among the tied positions was
chosen by torch.topk's CPU tie-breaking (deterministic but implementation-defined, neither lowest- nor
highest-index first), so a reimplementation may legitimately keep other positions there.
cut_gap_rel[l][h] = (cut - best dropped score) / |cut| (3 significant digits; 0 means a tie straddles
the cut); small values flag cuts that float rounding differences between implementations could move.

Checks made (all asserted)
--------------------------
* For every run and layer: the cache after compression equals keys_full.gather(2, topk indices) and
  values_full.gather(...) bit for bit, where keys_full/values_full/scores are captured by wrapping the
  press's `score` (kvpress itself is not changed), so the recorded positions are what kvpress kept.
* The same press class/parameters run through kvpress's own KVPressTextGenerationPipeline._forward
  (fresh press object, unwrapped, greedy decoding) leaves a compressed context cache bit-identical to
  ours, and its first (question) forward's last-row logits match ours within 1e-4.
* Feeding the answer one token at a time (as the pipeline's decoding loop does, but teacher-forced)
  gives the same answer NLLs within 1e-4 nats as the single question+answer forward.
* "none" (no press): answer NLL equals that of one plain forward of context+question+answer within 1e-4.
"""

import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

torch.set_num_threads(int(os.environ.get("THREADS", "1")))
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import kvpress  # noqa: E402
import transformers  # noqa: E402
from kvpress import (  # noqa: E402
    ExpectedAttentionPress,
    KeyDiffPress,
    KnormPress,
    KVPressTextGenerationPipeline,
    ObservedAttentionPress,
    SnapKVPress,
    StreamingLLMPress,
    TOVAPress,
)
from kvpress.utils import compute_n_kept  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402

transformers.logging.set_verbosity_error()
transformers.logging.disable_progress_bar()

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
SHARED = Path(os.environ.get("SINKSCOPE_SHARED", "/work/shared")).resolve()
MODELS = SHARED / "models"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
TOKENIZER = MODELS / "smollm2-135m-tokenizer" / "tokenizer.json"
TEXT = SHARED / "corpora" / "pg1342_pride_and_prejudice.txt"
TEXT_START = 100000
OUT = REPO / "tests" / "fixtures" / "kvpress_reference.json"

N_CTX, N_Q, N_A = 512, 24, 16
RATIOS = [0.25, 0.5, 0.75]
PRESSES = {
    "knorm": (KnormPress, {}),
    "streaming_llm": (StreamingLLMPress, {"n_sink": 4}),
    "snapkv": (SnapKVPress, {"window_size": 64, "kernel_size": 5}),
    "tova": (TOVAPress, {}),
    "observed_attention": (ObservedAttentionPress, {}),
    "expected_attention": (ExpectedAttentionPress, {}),
    "keydiff": (KeyDiffPress, {}),
}
TOL = 1e-4


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def load_model():
    model = AutoModelForCausalLM.from_pretrained(
        str(MODELS), gguf_file=GGUF, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    return model


def tokens():
    tok = Tokenizer.from_file(str(TOKENIZER))
    text = TEXT.read_text(encoding="utf-8")[TEXT_START : TEXT_START + 20000]
    ids = tok.encode(text, add_special_tokens=False).ids
    assert len(ids) >= N_CTX + N_Q + N_A, len(ids)
    ids = ids[: N_CTX + N_Q + N_A]
    return tok, ids[:N_CTX], ids[N_CTX : N_CTX + N_Q], ids[N_CTX + N_Q :]


def nll_from_logits(logits_rows, targets):
    """logits_rows: (n, V) float32 rows predicting targets (n,)."""
    lp = torch.log_softmax(logits_rows.double(), dim=-1)
    return [float(-lp[i, t]) for i, t in enumerate(targets)]


def bitmask_hex(positions, n=N_CTX):
    v = 0
    for p in positions:
        v |= 1 << int(p)
    s = format(v, "0%dx" % (n // 4))
    assert len(s) == n // 4
    return s


def prefill(model, context, press):
    """Prefill the context exactly as KVPressTextGenerationPipeline._forward does; return the cache."""
    cache = DynamicCache()
    ctx = torch.tensor([context])
    with torch.no_grad():
        if press is None:
            model.model(input_ids=ctx, past_key_values=cache)
        else:
            with press(model):
                model.model(input_ids=ctx, past_key_values=cache)
    return cache


def snapshot(cache):
    return [(cache.layers[l].keys.clone(), cache.layers[l].values.clone()) for l in range(len(cache))]


def append_qa(model, cache, question, answer):
    """Teacher-forced question+answer at original positions 512.. in one forward; returns answer NLLs."""
    qa = torch.tensor([question + answer])
    pos = torch.arange(N_CTX, N_CTX + qa.shape[1]).unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=qa, past_key_values=cache, position_ids=pos).logits[0]
    rows = logits[N_Q - 1 : N_Q - 1 + N_A]
    return nll_from_logits(rows, answer), logits[N_Q - 1].clone()


def append_incremental(model, cache, question, answer):
    """The pipeline's call pattern: question in one forward, then one token per forward (teacher-forced)."""
    pos = torch.arange(N_CTX, N_CTX + N_Q).unsqueeze(0)
    rows = []
    with torch.no_grad():
        out = model(input_ids=torch.tensor([question]), past_key_values=cache, position_ids=pos, logits_to_keep=1)
        rows.append(out.logits[0, -1])
        p = N_CTX + N_Q
        for t in answer[:-1]:
            out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, position_ids=torch.tensor([[p]]))
            rows.append(out.logits[0, -1])
            p += 1
    return nll_from_logits(torch.stack(rows), answer)


class _TokShim:
    def __init__(self, tok):
        self.tok = tok

    def decode(self, ids, skip_special_tokens=True):
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=skip_special_tokens)


def run_pipeline(model, tok, context, question, press):
    """Run kvpress's own pipeline _forward (greedy) with a fresh press; return (compressed cache, first logits)."""
    pipe = object.__new__(KVPressTextGenerationPipeline)
    pipe.model = model
    pipe.tokenizer = _TokShim(tok)
    captured = []
    h = model.register_forward_hook(lambda m, a, kw, out: captured.append(out.logits[0, -1].clone()), with_kwargs=True)
    cache = DynamicCache()
    try:
        with torch.no_grad():
            answers = pipe._forward(
                {"context_ids": torch.tensor([context]), "questions_ids": [torch.tensor([question])]},
                max_new_tokens=4,
                press=press,
                cache=cache,
            )
    finally:
        h.remove()
    return cache, captured[0], answers[0]


def wrap_score(press, store):
    orig = press.score

    def score(module, hidden_states, keys, values, attentions, kwargs):
        s = orig(module, hidden_states, keys, values, attentions, kwargs)
        store[module.layer_idx] = (keys.clone(), values.clone(), s.detach().clone())
        return s

    press.score = score  # instance attribute shadows the method; kvpress's compress calls self.score


def analyse(store, cache, n_layers, n_kv, ratio):
    kept, ties, ties_kept, gaps = [], [], [], []
    for l in range(n_layers):
        keys_full, values_full, scores = store[l]
        assert scores.shape == (1, n_kv, N_CTX), scores.shape
        n_kept = compute_n_kept(keys_full.shape[2], ratio)
        idx = scores.topk(n_kept, dim=-1).indices
        gidx = idx.unsqueeze(-1).expand(-1, -1, -1, keys_full.shape[-1])
        ck, cv = cache.layers[l].keys, cache.layers[l].values
        assert ck.shape[2] == n_kept, (l, ck.shape)
        assert torch.equal(ck, keys_full.gather(2, gidx)), f"layer {l}: cache keys != gather(topk)"
        assert torch.equal(cv, values_full.gather(2, gidx)), f"layer {l}: cache values != gather(topk)"
        kl, tl, tkl, gl = [], [], [], []
        for h in range(n_kv):
            s = scores[0, h]
            pos = idx[0, h].tolist()
            assert len(set(pos)) == n_kept
            kl.append(bitmask_hex(pos))
            srt = torch.sort(s, descending=True).values
            cut = srt[n_kept - 1]
            tied = (s == cut)
            tl.append(int(tied.sum()))
            tkl.append(int(tied[idx[0, h]].sum()))
            nxt = srt[n_kept] if n_kept < N_CTX else torch.tensor(float("-inf"))
            g = float((cut - nxt) / cut.abs()) if float(cut) != 0.0 else float(cut - nxt)
            gl.append(float("%.3g" % g) if math.isfinite(g) else None)
        kept.append(kl)
        ties.append(tl)
        ties_kept.append(tkl)
        gaps.append(gl)
    return n_kept, kept, ties, ties_kept, gaps


def main():
    t0 = time.time()
    tok, context, question, answer = tokens()
    model = load_model()
    cfg = model.config
    n_layers, n_kv = cfg.num_hidden_layers, cfg.num_key_value_heads
    log(f"model loaded in {time.time() - t0:.1f}s: layers={n_layers} kv_heads={n_kv} heads={cfg.num_attention_heads}")

    # --- none: prefill uncompressed, append, compare with one plain forward -------------------------
    cache = prefill(model, context, None)
    none_nll, _ = append_qa(model, cache, question, answer)
    with torch.no_grad():
        full_logits = model(input_ids=torch.tensor([context + question + answer])).logits[0]
    plain = nll_from_logits(full_logits[N_CTX + N_Q - 1 : N_CTX + N_Q - 1 + N_A], answer)
    d = max(abs(a - b) for a, b in zip(none_nll, plain))
    assert d < TOL, f"none vs plain forward: max diff {d}"
    cache = prefill(model, context, None)
    inc = append_incremental(model, cache, question, answer)
    d_inc = max(abs(a - b) for a, b in zip(none_nll, inc))
    assert d_inc < TOL, f"none incremental: {d_inc}"
    log(f"none: mean nll {sum(none_nll) / N_A:.4f}; vs plain forward max diff {d:.2e}; incremental {d_inc:.2e}")
    checks = {"none_vs_plain_forward_max_abs_diff": d, "none_incremental_max_abs_diff": d_inc}

    runs, skipped = [], []
    max_inc, max_pipe_logit = 0.0, 0.0
    for name, (cls, kw) in PRESSES.items():
        for ratio in RATIOS:
            t1 = time.time()
            try:
                press = cls(compression_ratio=ratio, **kw)
                store = {}
                wrap_score(press, store)
                cache = prefill(model, context, press)
            except Exception as e:  # record and skip presses that cannot run here
                log(f"SKIP {name} {ratio}: {type(e).__name__}: {e}")
                skipped.append({"press": name, "ratio": ratio, "why": f"{type(e).__name__}: {e}"})
                continue
            assert sorted(store) == list(range(n_layers)), f"{name}: score not called for every layer"
            n_kept, kept, ties, ties_kept, gaps = analyse(store, cache, n_layers, n_kv, ratio)
            compressed = snapshot(cache)
            nll, first_row = append_qa(model, cache, question, answer)

            # pipeline's call pattern, teacher-forced, on a fresh identical compressed cache
            cache2 = DynamicCache()
            for l, (k, v) in enumerate(compressed):
                cache2.update(k.clone(), v.clone(), l)
            inc = append_incremental(model, cache2, question, answer)
            di = max(abs(a - b) for a, b in zip(nll, inc))
            assert di < TOL, f"{name} {ratio}: incremental vs batched {di}"
            max_inc = max(max_inc, di)

            # kvpress's own pipeline with a fresh, unwrapped press
            pcache, plogits, greedy = run_pipeline(model, tok, context, question, cls(compression_ratio=ratio, **kw))
            for l, (k, v) in enumerate(compressed):
                assert torch.equal(pcache.layers[l].keys, k), f"{name} {ratio} layer {l}: pipeline cache keys differ"
                assert torch.equal(pcache.layers[l].values, v), f"{name} {ratio} layer {l}: pipeline cache values differ"
            dl = float((plogits - first_row).abs().max())
            assert dl < TOL, f"{name} {ratio}: pipeline first logits differ by {dl}"
            max_pipe_logit = max(max_pipe_logit, dl)

            flat_t = [t for row in ties for t in row]
            flat_tk = [t for row in ties_kept for t in row]
            params = dataclasses.asdict(cls(compression_ratio=ratio, **kw))
            runs.append(
                {
                    "press": name,
                    "kvpress_class": cls.__name__,
                    "ratio": ratio,
                    "params": params,
                    "n_kept": n_kept,
                    "tie_summary": {
                        "heads_with_ties_at_cut": sum(t > 1 for t in flat_t),
                        "heads_with_ties_straddling_cut": sum(t > k for t, k in zip(flat_t, flat_tk)),
                        "max_ties_at_cut": max(flat_t),
                        "total_tied_dropped": sum(t - k for t, k in zip(flat_t, flat_tk)),
                    },
                    "kept": kept,
                    "ties_at_cut": ties,
                    "ties_at_cut_kept": ties_kept,
                    "cut_gap_rel": gaps,
                    "answer_nll": nll,
                    "pipeline_greedy_first_tokens": greedy,
                }
            )
            log(
                f"{name:19s} r={ratio:.2f} n_kept={n_kept} mean_nll={sum(nll) / N_A:.4f} "
                f"straddling_ties={runs[-1]['tie_summary']['heads_with_ties_straddling_cut']} "
                f"inc_diff={di:.1e} pipe_logit_diff={dl:.1e} ({time.time() - t1:.1f}s)"
            )
    checks["max_incremental_vs_batched_nll_diff"] = max_inc
    checks["max_pipeline_first_logits_diff"] = max_pipe_logit

    out = {
        "versions": {"kvpress": kvpress_version(), "transformers": transformers.__version__, "torch": torch.__version__},
        "model": GGUF,
        "text": f"{TEXT.name} from char {TEXT_START}",
        "setting": "context prefilled with press (per-layer compression after that layer's prefill attention); "
        "question+answer appended uncompressed at original positions 512..551; float32 CPU eager",
        "kept_encoding": "128 lowercase hex digits, big-endian integer sum(1<<p) over kept context positions p",
        "context": context,
        "question": question,
        "answer": answer,
        "layers": n_layers,
        "kv_heads": n_kv,
        "heads": cfg.num_attention_heads,
        "head_dim": getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads),
        "checks": checks,
        "runs": runs,
        "none": {"answer_nll": none_nll, "plain_forward_answer_nll": plain},
        "skipped": skipped,
    }
    write_json(out)
    log(f"wrote {OUT} ({OUT.stat().st_size} bytes) in {time.time() - t0:.1f}s")


def kvpress_version():
    try:
        from importlib.metadata import version

        return version("kvpress")
    except Exception:
        return getattr(kvpress, "__version__", "unknown")


def write_json(obj):
    # one run per line: small, diffable
    parts = []
    for k, v in obj.items():
        if k == "runs":
            inner = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in v)
            parts.append(f'"runs":[\n{inner}\n]')
        else:
            parts.append(json.dumps(k) + ":" + json.dumps(v, separators=(",", ":")))
    text = "{\n" + ",\n".join(parts) + "\n}\n"
    json.loads(text)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=OUT.parent, prefix=".kvpress_reference.", suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, OUT)


if __name__ == "__main__":
    main()
