#!/usr/bin/env python3
"""kvpress reference for sinkscope's press tests: kvpress's WRAPPER presses on SmolLM2-135M.

What it is
----------
The companion of scripts/kvpress/reference.py (read its docstring first; this script imports it and uses
the same model, tokenizer, text, context/question/answer ids, bitmask encoding and NLL definition). It
records what NVIDIA kvpress 0.5.5 does with its wrapper / budget-allocating presses - ChunkKVPress,
PyramidKVPress, KeyRerotationPress, AdaKVPress - and with the query-aware setting, for SmolLM2-135M-Instruct
(Q4_1 GGUF dequantized to float32, CPU), and writes tests/fixtures/kvpress_wrappers.json: per run the kept
context positions per (layer, KV head), the budgets, ties at the cut and the answer's per-token NLL.

How to rerun (from the repository root; ~2.5-3 minutes on one core: 150-167 s here, model loads included)
------------------------------------------------------------------------------------------------------------
    THREADS=1 /work/venv-kvpress/bin/python scripts/kvpress/wrappers.py
(venv: kvpress 0.5.5, transformers 5.2.0, torch 2.15, gguf, accelerate; inputs as in reference.py.)
WRAPPERS=adakv,chunkkv,... runs only those wrappers and writes nothing (debugging).

Common setting (as reference.py unless a wrapper says otherwise)
-----------------------------------------------------------------
SmolLM2-135M: 30 layers, 9 query heads, 3 KV heads (query head q uses KV head q // 3), head_dim 64.
CONTEXT = ids[0:512) prefilled with `model.model(context, DynamicCache())` inside `with press(model):`
(compression of layer l's cache right after layer l's prefill attention; later layers see uncompressed
hidden states). Then, press removed, QUESTION (24 ids) + ANSWER (16 ids) are appended in ONE teacher-forced
forward with position_ids = question_positions_start + 0..39 (512 unless said otherwise; cache slots of the
appended tokens follow the kept ones). answer_nll[k] = -log_softmax(float64 logits)[answer[k]] in nats from
the row of the token before answer[k] (k = 0: the question's last token).
"attn_implementation" of a run says which model ran it: "eager" (as reference.py) or "sdpa". It matters
for attention-based scores: under eager kvpress's SnapKV/TOVA read the layer's eager attention weights
(`attentions[..., -w:, :-w]`); under sdpa they recompute them (SnapKVPress.compute_window_attention:
q_proj of the last w rows, RoPE, q.k^T/sqrt(64) + causal -inf, softmax in float32) - the same maths,
different float rounding. Knorm / StreamingLLM / ExpectedAttention never use attention weights.

Bitmasks: kept[layer][kv_head] = sum(1 << p) over kept positions p as exactly n/4 lowercase hex digits,
big-endian (128 digits for the 512-position context; 134 for query_aware's 536 positions): position p is
bit (p % 4) of the hex digit at string index n/4 - 1 - p // 4; Python `int(s, 16) >> p & 1`.
The ORDER of the kept entries inside kvpress's cache is not in the bitmask: ScorerPress / PyramidKV /
query_aware keep torch.topk order (descending score, ties in implementation-defined order); ChunkKV and
KeyRerotation keep ascending original position; AdaKV does not reorder (or remove) anything. Only the
float summation order of attention depends on it.

Ties (the `ties_at_cut*` / `cut_gap_rel` fields, same definitions as reference.py): over the scores that
the selection ranks, with cut = the n-th largest (n = number kept): ties_at_cut = #scores == cut (>= 1),
ties_at_cut_kept = #of those kept, cut_gap_rel = (cut - best dropped) / |cut| (3 significant digits;
0 = a tie straddles the cut; null if nothing was dropped). When ties_at_cut > ties_at_cut_kept, WHICH tied
entries were kept was decided by torch.topk's CPU tie-breaking (deterministic, implementation-defined), so
a reimplementation may legitimately differ there. Small gaps (< 1e-4) flag cuts that float rounding can
move. tie_summary counts these per run (for chunkkv/adakv per layer instead of per head).

Runs ("wrapper", "press" = inner press short name, "ratio", "params" = dataclasses.asdict(press))
---------------------------------------------------------------------------------------------------
chunkkv   ChunkKVPress(press=P, chunk_length=16), P in knorm, snapkv(window 64, kernel 5),
          streaming_llm(n_sink 4), expected_attention; ratios 0.25, 0.75. attn_implementation "sdpa":
          kvpress ASSERTS `attentions is None` ("ChunkPress does not support attentions."), which eager
          attention never satisfies; the eager refusals are in "skipped". Selection per layer, shared by all
          3 KV heads: s = P's score (1, 3, 512); chunk score c_j = mean over the 16 positions of chunk j of
          (s[h0] + s[h1] + s[h2]) (torch: s[..., :n*16].sum(dim=1).view(1, n, 16).mean(-1); a trailing partial
          chunk would be a chunk of its own - none here, 512 = 32 x 16); n_chunks_kept =
          max(1, int(32 * (1 - ratio))) (24 / 8); keep the top chunks by torch.topk (ties implementation-
          defined), positions = union of their ranges, stored in ascending order. n_kept: list per layer
          (384 / 128 everywhere). kept[l][h] is the same string for the 3 heads. Tie fields are over the 32
          CHUNK scores, one value per layer: chunk_ties_at_cut, chunk_ties_at_cut_kept, chunk_cut_gap_rel;
          n_chunks, n_chunks_kept. NOTE near-ties: knorm 0.25 layer 2 (gap 6.9e-6), knorm 0.75 layers 10
          (9.5e-5) and 19 (1.1e-5), snapkv 0.25 layer 24 (9.8e-6) - an f32 reimplementation must sum in the
          same order (3 heads, then the 16-wide mean) or may pick the other chunk there.
pyramidkv PyramidKVPress(compression_ratio=r, window_size=64, kernel_size=5, beta=20) (SnapKV scores, eager),
          r = 0.25, 0.5, 0.75. Per-layer budget (get_layer_budget, q_len = 512, L = 30):
              cap = 64 + 512(1-r); mn = (cap-64)/beta; mx = 2(cap-64) - mn;
              if mx >= 512-64: mx = 448, mn = 2(cap-64) - mx;
              if not (512 >= mx >= mn >= 64): budget = max(1, round(512(1-r)))  (all layers; SnapKV fallback)
              else budget(l) = round(mx - l * (mx-mn)/(L-1))      (Python round = half-to-even; no .5 occurs here)
          giving 448..320 (r .25), 448..64 (r .5; layer 29 keeps exactly the 64-token window, whose 64
          scores tie at the pad value max+1 - all kept), and the fallback 128 for every layer (r .75; its
          kept sets equal kvpress_reference.json's snapkv 0.75, checked). n_kept: list per layer. Selection
          per (layer, KV head): torch.topk(scores, budget(l)); cache = gather in topk order (asserted).
          answer_nll: for r = 0.25 / 0.5 kvpress CANNOT run the question forward (nor its own pipeline):
          with different cache lengths per layer, transformers 5.2 sizes the attention mask from layer 0's
          cache length, so layer 1 fails ("size of tensor a (484) must match ... (488)"; in "skipped", with the
          pipeline's own failure). There answer_nll is computed with a per-layer mask (each appended token sees
          every kept slot of THAT layer plus the appended tokens causally; sdpa model, same weights;
          "answer_nll_method": "per_layer_mask_sdpa"), cross-checked against transformers' own sdpa fed one
          token at a time (q_len 1, no mask). For r = 0.75 (uniform) answer_nll is kvpress's eager path
          ("answer_nll_method": "kvpress"); answer_nll_per_layer_mask is recorded for every r.
key_rerotation  KeyRerotationPress(press=P), P = knorm (r 0.5, 0.25), snapkv(64, 5) (r 0.5); eager.
          Selection = P's per-head topk(n_kept), n_kept = int(512(1-r)) (same sets as kvpress_reference.json's
          runs, checked), then kvpress SORTS the indices ascending (torch.sort(indices, dim=2)): cache slot i
          holds original position p_i (p_0 < p_1 < ...), values gathered, keys RE-ROTATED from position p_i to
          position i: k' = k*cos((i-p_i)*inv_freq) + rotate_half(k)*sin((i-p_i)*inv_freq) (float32, angle
          computed as float(i - p_i) * inv_freq in f32; rotate_half = HF half-split convention) - equal to RoPE
          applied afresh at position i to the pre-RoPE key within 1.1e-4 abs (|key| <= 20.4).
          kvpress's pipeline then starts the question at context_length = cache.get_seq_length() = n_kept:
          question_positions_start = n_kept (question+answer at n_kept .. n_kept+39). n_kept: int.
          answer_nll_if_question_at_512: same cache with the question at 512.. (NOT kvpress; diagnostic only).
adakv     AdaKVPress(press=P, alpha_safeguard=0.2), P in knorm, snapkv(64, 5), expected_attention; r = 0.25,
          0.5, 0.75; attn_implementation "sdpa" (kvpress asserts not eager; its attention patch wraps only the
          functions in transformers' ALL_ATTENTION_FUNCTIONS - sdpa/flash/flex - never the module-local eager
          function; checked that the sdpa model calls kvpress's wrapper). Per layer: s = P's score (1, 3, 512);
          n_kept = int(512(1-r)); n_safe = max(1, int(n_kept * 0.2)) (76 / 51 / 25); per head the top n_safe
          (torch.topk) are set to float32::MAX (torch.finfo(float32).max, scatter_ in place); then over the 1536
          flattened scores (index = head*512 + position) the n_pruned = 3(512 - n_kept) SMALLEST are masked
          (torch.topk(-flat, n_pruned)). Nothing is removed from the cache (cache == full keys/values,
          asserted). kept[l][h] = the positions NOT masked for KV head h; n_kept: list of lists [layer][head]
          (their sum per layer is 3*int(512(1-r)) = n_kept_per_layer_total; per head >= n_safe, <= 512).
          Tie fields are per LAYER over the 1536 post-scatter scores with n = 3*n_kept (ties_at_cut[l] ...).
          Masking during question+answer: module.masked_key_indices is set by compress() after the prefill
          attention and reset to None only by a later forward whose q_len == k_len (a new prefill); in every
          other forward (the question+answer forward, each decoding step) kvpress's patch builds one fake key
          per KV head (hyperplane search over that group's queries, K = -1e5*Y/|Y|^2) and WRITES it into the
          cache tensor at the masked slots (the DynamicCache's own tensor: in place, so after decoding the
          cache holds fake keys there), so the masked slots get exp(q.k) = 0 for all query heads of the group.
          answer_nll is that (kvpress's) computation, question at 512..; answer_nll_exact_mask uses a true
          -inf mask (query row i of q appended rows sees slot j iff j <= k_len - q + i and (head, j) not
          masked): identical to the last bit here. A masked slot is masked for all 3 query heads of its group.
query_aware  kvpress's query-aware evaluation: context := context + question (536 ids, positions 0..535),
          no question. Presses snapkv(64, 5), knorm, tova at r 0.5, plain ScorerPress (eager): n_kept =
          int(536 * 0.5) = 268 per (layer, head), torch.topk, kept bitmasks over 536 positions (134 hex
          digits; question positions 512..535 may be dropped). "compressed_len": 536. answer[0] is predicted
          from the prefill's last row: lm_head(model.model(...).last_hidden_state[:, -1]) (model.model's
          output is already normed) - the compression only touches the cache, so answer_nll[0] is the same for
          every press; then answer[:-1] (15 ids) appended in one forward at positions 536..550
          (question_positions_start = 536) give answer_nll[1..15].

Top level: versions, model, text, context/question/answer ids, layers/kv_heads/heads/head_dim, runtime_s,
checks, runs (one per line), none = {eager, sdpa: uncompressed answer NLL (prefill + appended question+answer)
and plain one-forward NLL; query_aware_eager: the query-aware call pattern without compression},
skipped (what kvpress refused, with the exception text and what was done instead).

Checks made (all asserted; values in "checks")
----------------------------------------------
* every run/layer: cache after compression == keys/values captured from the inner press's score call
  (reference.wrap_score's trick), gathered at the recorded positions in kvpress's order, bit for bit
  (key_rerotation: values bit for bit, keys == KeyRerotationPress.rerotate_keys(sorted indices) bit for bit
  and == fresh RoPE at 0..n_kept-1 within 1e-4*max|key|+1e-4); AdaKV: masked_key_indices == our selection,
  and our safeguard-scatter reproduction == kvpress's in-place scores.
* every run except pyramidkv 0.25/0.5: kvpress's own KVPressTextGenerationPipeline._forward (fresh press)
  leaves the same compressed cache (AdaKV: same masked_key_indices, values, unmasked keys) and first logits
  within 1e-4 (query_aware: its "question" is answer[0], compared with our row predicting answer[1]);
  pyramidkv 0.25/0.5: the pipeline fails as above, its compressed prefix equals ours.
* every run: one-token-at-a-time teacher forcing (the pipeline's call pattern: question in one forward, then
  one token per forward) == the batched NLL within 1e-4 (pyramidkv 0.25/0.5: per-layer-mask NLL == sdpa fed
  all 39 tokens one at a time, within 1e-4).
* none (eager, sdpa): appended == one plain forward; query-aware lm_head(last hidden) == model() last logits.
"""

import dataclasses
import json
import math
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reference as ref  # noqa: E402  (sets torch threads from THREADS, imports kvpress, which patches attention)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import transformers  # noqa: E402
from kvpress import (  # noqa: E402
    AdaKVPress,
    ChunkKVPress,
    ExpectedAttentionPress,
    KeyRerotationPress,
    KnormPress,
    PyramidKVPress,
    SnapKVPress,
    StreamingLLMPress,
    TOVAPress,
)
from kvpress.utils import compute_n_kept  # noqa: E402
from transformers import AutoModelForCausalLM, DynamicCache  # noqa: E402
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv  # noqa: E402

OUT = ref.REPO / "tests" / "fixtures" / "kvpress_wrappers.json"
REF_FIXTURE = ref.REPO / "tests" / "fixtures" / "kvpress_reference.json"
N_CTX, N_Q, N_A = ref.N_CTX, ref.N_Q, ref.N_A
TOL = ref.TOL
CHUNK = 16

INNER = {
    "knorm": (KnormPress, {}),
    "snapkv": (SnapKVPress, {"window_size": 64, "kernel_size": 5}),
    "streaming_llm": (StreamingLLMPress, {"n_sink": 4}),
    "expected_attention": (ExpectedAttentionPress, {}),
    "tova": (TOVAPress, {}),
}

log = ref.log


# ----------------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------------
def load_sdpa():
    model = AutoModelForCausalLM.from_pretrained(
        str(ref.MODELS), gguf_file=ref.GGUF, dtype=torch.float32, attn_implementation="sdpa"
    )
    model.eval()
    return model


def inner(name, ratio):
    cls, kw = INNER[name]
    return cls(compression_ratio=ratio, **kw)


def capture(press, store):
    """Like reference.wrap_score, on the press whose score kvpress calls; also keeps hidden_states and a
    reference to the returned score tensor (AdaKV modifies it in place with its safeguard scatter)."""
    orig = press.score

    def score(module, hidden_states, keys, values, attentions, kwargs):
        s = orig(module, hidden_states, keys, values, attentions, kwargs)
        store[module.layer_idx] = {
            "keys": keys.clone(),
            "values": values.clone(),
            "scores": s.detach().clone(),
            "scores_ref": s,
            "hidden": hidden_states.detach().clone(),
            "attentions_given": attentions is not None,
        }
        return s

    press.score = score


def prefill(model, ids, press):
    """KVPressTextGenerationPipeline._forward's prefill: model.model(input_ids, DynamicCache) inside press(model).
    Returns (cache, last hidden state of the last row (normed, model.model's output))."""
    cache = DynamicCache()
    x = torch.tensor([ids])
    with torch.no_grad():
        if press is None:
            out = model.model(input_ids=x, past_key_values=cache)
        else:
            with press(model):
                out = model.model(input_ids=x, past_key_values=cache)
    return cache, out.last_hidden_state[:, -1].clone()


def clone_cache(snap):
    c = DynamicCache()
    for l, (k, v) in enumerate(snap):
        c.update(k.clone(), v.clone(), l)
    return c


def forward_rows(model, cache, ids, start):
    """One teacher-forced forward of ids at position_ids start..start+len-1; returns all logits rows."""
    pos = torch.arange(start, start + len(ids)).unsqueeze(0)
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), past_key_values=cache, position_ids=pos).logits[0]


def incremental_rows(model, cache, block, tokens, start):
    """The pipeline's call pattern: `block` in one forward (logits_to_keep=1; skipped if empty), then one
    token per forward. Returns the last-row logits after the block and after each token."""
    rows, p = [], start
    with torch.no_grad():
        if block:
            pos = torch.arange(p, p + len(block)).unsqueeze(0)
            out = model(input_ids=torch.tensor([block]), past_key_values=cache, position_ids=pos, logits_to_keep=1)
            rows.append(out.logits[0, -1])
            p += len(block)
        for t in tokens:
            out = model(input_ids=torch.tensor([[t]]), past_key_values=cache, position_ids=torch.tensor([[p]]))
            rows.append(out.logits[0, -1])
            p += 1
    return rows


def qa_nll(model, snap, question, answer, start):
    """question+answer (40 ids) at position_ids start..start+39 in one forward on a copy of the cache;
    returns (answer NLLs, logits row of the question's last token, incremental-vs-batched max diff)."""
    logits = forward_rows(model, clone_cache(snap), question + answer, start)
    rows = logits[N_Q - 1 : N_Q - 1 + N_A]
    nll = ref.nll_from_logits(rows, answer)
    inc = ref.nll_from_logits(torch.stack(incremental_rows(model, clone_cache(snap), question, answer[:-1], start)), answer)
    d = max(abs(a - b) for a, b in zip(nll, inc))
    assert d < TOL, f"incremental vs batched answer NLL differ by {d}"
    return nll, logits[N_Q - 1].clone(), d


def gap3(cut, nxt):
    cut, nxt = float(cut), float(nxt)
    g = (cut - nxt) / abs(cut) if cut != 0.0 else cut - nxt
    return float("%.3g" % g) if math.isfinite(g) else None


def tie_stats(s, kept_idx, n_keep):
    """s: 1-D scores; kept_idx: 1-D indices kept; n_keep: how many kept. Returns (ties, ties_kept, gap)."""
    srt = torch.sort(s, descending=True).values
    cut = srt[n_keep - 1]
    tied = s == cut
    nxt = srt[n_keep] if n_keep < s.numel() else torch.tensor(float("-inf"))
    return int(tied.sum()), int(tied[kept_idx].sum()), gap3(cut, nxt)


def tie_summary(ties, ties_kept):
    ft = [t for row in ties for t in (row if isinstance(row, list) else [row])]
    fk = [t for row in ties_kept for t in (row if isinstance(row, list) else [row])]
    return {
        "heads_with_ties_at_cut": sum(t > 1 for t in ft),
        "heads_with_ties_straddling_cut": sum(t > k for t, k in zip(ft, fk)),
        "max_ties_at_cut": max(ft),
        "total_tied_dropped": sum(t - k for t, k in zip(ft, fk)),
    }


def params_of(press):
    p = dataclasses.asdict(press)
    json.dumps(p)  # must be JSON-serializable
    return p


def pipeline_check(model, tok, ctx_ids, q_ids, press, snap, first_row, *, key_mask=None):
    """kvpress's own KVPressTextGenerationPipeline._forward (reference.run_pipeline, fresh press): compare the
    compressed cache with ours and its first (question) forward's last-row logits with ours."""
    pcache, plogits, greedy = ref.run_pipeline(model, tok, ctx_ids, q_ids, press)
    for l, (k, v) in enumerate(snap):
        pk, pv = pcache.layers[l].keys, pcache.layers[l].values
        assert torch.equal(pv, v), f"layer {l}: pipeline cache values differ"
        if key_mask is None:
            assert torch.equal(pk, k), f"layer {l}: pipeline cache keys differ"
        else:  # AdaKV: masked slots hold kvpress's fake keys after decoding (written in place); compare the rest
            m = key_mask[l]
            assert torch.equal(pk[m], k[m]), f"layer {l}: pipeline cache keys differ at unmasked slots"
    d = float((plogits - first_row).abs().max())
    assert d < TOL, f"pipeline first logits differ by {d}"
    return d, greedy


# ----------------------------------------------------------------------------------------------------
# runs
# ----------------------------------------------------------------------------------------------------
class Ctx:
    pass


def run_chunkkv(C, name, ratio):
    """ChunkKVPress(press=inner, chunk_length=16). kvpress asserts attentions is None, i.e. not eager."""
    press = ChunkKVPress(press=inner(name, ratio), chunk_length=CHUNK)
    model, attn = C.sdpa, "sdpa"
    try:  # eager first: record kvpress's refusal
        ref.prefill(C.eager, C.context, ChunkKVPress(press=inner(name, ratio), chunk_length=CHUNK))
        model, attn = C.eager, "eager"
        log(f"  chunkkv {name} {ratio} ran under eager (unexpected); recording the eager run")
    except Exception as e:
        log(f"  chunkkv {name} {ratio} under eager refused: {type(e).__name__}: {e}")
        C.skipped.append(
            {
                "wrapper": "chunkkv",
                "press": name,
                "ratio": ratio,
                "attn_implementation": "eager",
                "why": f"{type(e).__name__}: {e}",
                "instead": "run under sdpa (see runs)",
            }
        )
    store = {}
    capture(press.press, store)
    cache, _ = prefill(model, C.context, press)
    assert sorted(store) == list(range(C.L))
    kept, n_kept, cties, ctk, cgaps = [], [], [], [], []
    for l in range(C.L):
        st = store[l]
        keys_full, values_full, s = st["keys"], st["values"], st["scores"]
        assert not st["attentions_given"]
        kv_len = keys_full.shape[2]
        ncomp, rem = kv_len // CHUNK, kv_len % CHUNK
        cs = s[..., : ncomp * CHUNK].sum(dim=1).view(-1, ncomp, CHUNK).mean(dim=-1)
        if rem:
            cs = torch.cat([cs, s[..., -rem:].sum(dim=1).mean(dim=-1, keepdim=True)], dim=-1)
        n_chunks = ncomp + (rem > 0)
        nck = max(1, int(n_chunks * (1 - ratio)))
        top = cs.topk(nck, dim=-1).indices[0]
        pos = []
        for c in top.tolist():
            pos.extend(range(c * CHUNK, min((c + 1) * CHUNK, kv_len)))
        pos = sorted(pos)
        idx = torch.tensor(pos)
        ck, cv = cache.layers[l].keys, cache.layers[l].values
        assert ck.shape[2] == len(pos), (l, ck.shape)
        assert torch.equal(ck, keys_full[:, :, idx]), f"chunkkv layer {l}: cache keys != gather(sorted chunk positions)"
        assert torch.equal(cv, values_full[:, :, idx]), f"chunkkv layer {l}: cache values != gather"
        kept.append([ref.bitmask_hex(pos)] * C.KV)
        n_kept.append(len(pos))
        t, tk, g = tie_stats(cs[0], top, nck)
        cties.append(t)
        ctk.append(tk)
        cgaps.append(g)
    snap = ref.snapshot(cache)
    nll, first_row, dinc = qa_nll(model, snap, C.question, C.answer, N_CTX)
    dp, greedy = pipeline_check(
        model, C.tok, C.context, C.question, ChunkKVPress(press=inner(name, ratio), chunk_length=CHUNK), snap, first_row
    )
    C.max_inc = max(C.max_inc, dinc)
    C.max_pipe = max(C.max_pipe, dp)
    return {
        "wrapper": "chunkkv",
        "press": name,
        "kvpress_class": "ChunkKVPress(" + type(press.press).__name__ + ")",
        "ratio": ratio,
        "attn_implementation": attn,
        "params": params_of(ChunkKVPress(press=inner(name, ratio), chunk_length=CHUNK)),
        "n_chunks": n_chunks,
        "n_chunks_kept": nck,
        "n_kept": n_kept,
        "tie_summary": tie_summary(cties, ctk),
        "kept": kept,
        "chunk_ties_at_cut": cties,
        "chunk_ties_at_cut_kept": ctk,
        "chunk_cut_gap_rel": cgaps,
        "answer_nll": nll,
        "question_positions_start": N_CTX,
        "pipeline_greedy_first_tokens": greedy,
    }


def pyramid_budget(q_len, ratio, window, beta, n_layers, layer):
    """PyramidKVPress.get_layer_budget written out (python round() = round-half-to-even)."""
    cap = window + q_len * (1 - ratio)
    mn = (cap - window) / beta
    mx = (cap - window) * 2 - mn
    if mx >= q_len - window:
        mx = q_len - window
        mn = (cap - window) * 2 - mx
    if not (q_len >= mx >= mn >= window):
        return max(1, round(q_len * (1 - ratio))), True
    steps = (mx - mn) / (n_layers - 1) if n_layers > 1 else 0.0
    return round(mx - layer * steps), False


def score_topk_analysis(C, store, cache, budgets, n_pos):
    """ScorerPress-style per-(layer, head) topk; asserts cache == gather(topk indices) in topk order."""
    kept, ties, tk, gaps = [], [], [], []
    for l in range(C.L):
        st = store[l]
        keys_full, values_full, s = st["keys"], st["values"], st["scores"]
        assert s.shape == (1, C.KV, n_pos), s.shape
        n_kept = budgets[l]
        idx = s.topk(n_kept, dim=-1).indices
        g = idx.unsqueeze(-1).expand(-1, -1, -1, keys_full.shape[-1])
        ck, cv = cache.layers[l].keys, cache.layers[l].values
        assert ck.shape[2] == n_kept, (l, ck.shape, n_kept)
        assert torch.equal(ck, keys_full.gather(2, g)), f"layer {l}: cache keys != gather(topk)"
        assert torch.equal(cv, values_full.gather(2, g)), f"layer {l}: cache values != gather(topk)"
        kl, tl, tkl, gl = [], [], [], []
        for h in range(C.KV):
            pos = idx[0, h].tolist()
            assert len(set(pos)) == n_kept
            kl.append(ref.bitmask_hex(pos, n_pos))
            t, k, gg = tie_stats(s[0, h], idx[0, h], n_kept)
            tl.append(t)
            tkl.append(k)
            gl.append(gg)
        kept.append(kl)
        ties.append(tl)
        tk.append(tkl)
        gaps.append(gl)
    return kept, ties, tk, gaps


def run_pyramid(C, ratio):
    kw = {"compression_ratio": ratio, "window_size": 64, "kernel_size": 5, "beta": 20}
    press = PyramidKVPress(**kw)
    store = {}
    capture(press, store)
    cache, _ = prefill(C.eager, C.context, press)
    assert sorted(store) == list(range(C.L))
    budgets, fell_back = [], False
    for l in range(C.L):
        b, fb = pyramid_budget(N_CTX, ratio, 64, 20, C.L, l)
        assert b == press.get_layer_budget(C.eager.model.layers[l].self_attn, N_CTX), (l, b)
        budgets.append(b)
        fell_back = fb
    kept, ties, tk, gaps = score_topk_analysis(C, store, cache, budgets, N_CTX)
    snap = ref.snapshot(cache)
    # The question+answer forward with a per-layer-length mask (exact_mask_sdpa, no masked indices: causal over the
    # appended tokens, every kept slot of THAT layer visible), on the sdpa model (same weights) ...
    nll_pl = per_layer_mask_nll(C, snap, N_CTX)
    # ... and, independently, transformers' own sdpa fed one token at a time (q_len 1: transformers passes no mask)
    inc = incremental_rows(C.sdpa, clone_cache(snap), [], C.question + C.answer[:-1], N_CTX)
    nll_inc = ref.nll_from_logits(torch.stack(inc[N_Q - 1 :]), C.answer)
    d_pl = max(abs(a - b) for a, b in zip(nll_pl, nll_inc))
    assert d_pl < TOL, f"pyramid per-layer mask vs one-token sdpa: {d_pl}"
    C.checks["pyramidkv_max_per_layer_mask_vs_one_token_sdpa_nll_diff"] = max(
        C.checks.get("pyramidkv_max_per_layer_mask_vs_one_token_sdpa_nll_diff", 0.0), d_pl
    )
    greedy, method = None, "kvpress"
    try:
        nll, first_row, dinc = qa_nll(C.eager, snap, C.question, C.answer, N_CTX)
    except Exception as e:  # non-uniform budgets: the attention mask is sized from layer 0's cache length
        log(f"  pyramidkv {ratio}: question+answer forward fails: {type(e).__name__}: {e}")
        C.skipped.append(
            {
                "wrapper": "pyramidkv",
                "press": "snapkv",
                "ratio": ratio,
                "attn_implementation": "eager",
                "what": "the question+answer forward on the compressed cache (reference.py's setting) and kvpress's "
                "own pipeline (its question forward)",
                "why": f"{type(e).__name__}: {e}",
                "pipeline_why": None,
                "instead": "answer_nll from the per-layer-length mask (answer_nll_method per_layer_mask_sdpa); kept "
                "sets, budgets and the cache==gather check are recorded as usual",
            }
        )
        cache_p, err = pipeline_try(C.eager, C.tok, C.context, C.question, PyramidKVPress(**kw))
        assert err is not None, "kvpress's pipeline unexpectedly ran"
        C.skipped[-1]["pipeline_why"] = f"{type(err).__name__}: {err}"
        for l, (k, v) in enumerate(snap):  # its compressed prefix (before the failing forward) equals ours
            assert torch.equal(cache_p.layers[l].keys[:, :, : budgets[l]], k), f"pipeline prefix keys layer {l}"
            assert torch.equal(cache_p.layers[l].values[:, :, : budgets[l]], v), f"pipeline prefix values layer {l}"
        C.checks["pyramidkv_pipeline_compressed_prefix_equal"] = True
        nll, method = nll_pl, "per_layer_mask_sdpa"
    else:
        dp, greedy = pipeline_check(C.eager, C.tok, C.context, C.question, PyramidKVPress(**kw), snap, first_row)
        d_e = max(abs(a - b) for a, b in zip(nll, nll_pl))
        assert d_e < TOL, f"pyramid uniform budget: kvpress path vs per-layer mask {d_e}"
        C.checks["pyramidkv_uniform_kvpress_vs_per_layer_mask_nll_diff"] = d_e
        C.max_inc = max(C.max_inc, dinc)
        C.max_pipe = max(C.max_pipe, dp)
    # cross-check with kvpress_reference.json's snapkv when PyramidKV falls back to SnapKV
    if fell_back and C.reference is not None:
        r = C.reference.get(("snapkv", ratio))
        if r is not None:
            C.checks[f"pyramidkv_{ratio}_fallback_kept_equals_reference_snapkv"] = (
                r["kept"] == kept and r["n_kept"] == budgets[0]
            )
    return {
        "wrapper": "pyramidkv",
        "press": "snapkv",
        "kvpress_class": "PyramidKVPress",
        "ratio": ratio,
        "attn_implementation": "eager",
        "params": params_of(PyramidKVPress(**kw)),
        "n_kept": budgets,
        "budget_fell_back_to_snapkv": fell_back,
        "tie_summary": tie_summary(ties, tk),
        "kept": kept,
        "ties_at_cut": ties,
        "ties_at_cut_kept": tk,
        "cut_gap_rel": gaps,
        "answer_nll": nll,
        "answer_nll_method": method,
        "answer_nll_per_layer_mask": nll_pl,
        "question_positions_start": N_CTX,
        "pipeline_greedy_first_tokens": greedy,
    }


def per_layer_mask_nll(C, snap, start):
    orig = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = exact_mask_sdpa
    calls = EXACT_CALLS[0]
    try:
        for m in C.sdpa.model.layers:
            m.self_attn.masked_key_indices = None
        lg = forward_rows(C.sdpa, clone_cache(snap), C.question + C.answer, start)
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = orig
    assert EXACT_CALLS[0] == calls + C.L, "per-layer-mask attention was not used"
    return ref.nll_from_logits(lg[N_Q - 1 : N_Q - 1 + N_A], C.answer)


def pipeline_try(model, tok, ctx_ids, q_ids, press):
    """reference.run_pipeline, but keeping the cache and the exception when _forward fails."""
    pipe = object.__new__(ref.KVPressTextGenerationPipeline)
    pipe.model = model
    pipe.tokenizer = ref._TokShim(tok)
    cache = DynamicCache()
    try:
        pipe._forward(
            {"context_ids": torch.tensor([ctx_ids]), "questions_ids": [torch.tensor([q_ids])]},
            max_new_tokens=4,
            press=press,
            cache=cache,
        )
    except Exception as e:
        return cache, e
    return cache, None


def run_rerotation(C, name, ratio):
    press = KeyRerotationPress(press=inner(name, ratio))
    store = {}
    capture(press.press, store)
    cache, _ = prefill(C.eager, C.context, press)
    assert sorted(store) == list(range(C.L))
    n_kept = compute_n_kept(N_CTX, ratio)
    kept, ties, tk, gaps = [], [], [], []
    max_rope_abs, max_key_abs = 0.0, 0.0
    for l in range(C.L):
        st = store[l]
        keys_full, values_full, s = st["keys"], st["values"], st["scores"]
        attn = C.eager.model.layers[l].self_attn
        idx_topk = s.topk(n_kept, dim=-1).indices
        idx = torch.sort(idx_topk, dim=2).values  # kvpress sorts: ascending original position
        g = idx.unsqueeze(-1).expand(-1, -1, -1, keys_full.shape[-1])
        ck, cv = cache.layers[l].keys, cache.layers[l].values
        assert ck.shape[2] == n_kept
        assert torch.equal(cv, values_full.gather(2, g)), f"layer {l}: values != gather(sorted topk)"
        assert torch.equal(ck, KeyRerotationPress.rerotate_keys(attn, idx, keys_full)), f"layer {l}: keys"
        # independent: RoPE applied afresh to the pre-RoPE keys (k_proj of the layer's normed input) at 0..n_kept-1
        h = st["hidden"]
        pre = attn.k_proj(h).view(1, h.shape[1], -1, attn.head_dim).transpose(1, 2)
        pre_kept = pre.gather(2, g)
        cos, sin = C.eager.model.rotary_emb(pre_kept, torch.arange(n_kept).unsqueeze(0))
        _, fresh = apply_rotary_pos_emb(pre_kept, pre_kept, cos, sin)
        # and the captured (original-position) keys are RoPE(pre) at 0..511
        cos0, sin0 = C.eager.model.rotary_emb(pre, torch.arange(N_CTX).unsqueeze(0))
        _, orig = apply_rotary_pos_emb(pre, pre, cos0, sin0)
        assert float((orig - keys_full).abs().max()) < 1e-4 * float(keys_full.abs().max()) + 1e-5
        max_rope_abs = max(max_rope_abs, float((fresh - ck).abs().max()))
        max_key_abs = max(max_key_abs, float(ck.abs().max()))
        kl, tl, tkl, gl = [], [], [], []
        for hh in range(C.KV):
            kl.append(ref.bitmask_hex(idx[0, hh].tolist()))
            t, k, gg = tie_stats(s[0, hh], idx_topk[0, hh], n_kept)
            tl.append(t)
            tkl.append(k)
            gl.append(gg)
        kept.append(kl)
        ties.append(tl)
        tk.append(tkl)
        gaps.append(gl)
    assert max_rope_abs < 1e-4 * max_key_abs + 1e-4, (max_rope_abs, max_key_abs)
    C.checks["key_rerotation_max_abs_diff_vs_fresh_rope"] = max(
        C.checks.get("key_rerotation_max_abs_diff_vs_fresh_rope", 0.0), max_rope_abs
    )
    C.checks["key_rerotation_max_abs_key"] = max(C.checks.get("key_rerotation_max_abs_key", 0.0), max_key_abs)
    snap = ref.snapshot(cache)
    nll, first_row, dinc = qa_nll(C.eager, snap, C.question, C.answer, n_kept)
    dp, greedy = pipeline_check(
        C.eager, C.tok, C.context, C.question, KeyRerotationPress(press=inner(name, ratio)), snap, first_row
    )
    C.max_inc = max(C.max_inc, dinc)
    C.max_pipe = max(C.max_pipe, dp)
    # for comparison: the same rerotated cache with the question at the ORIGINAL positions 512.. (not what kvpress does)
    nll_orig = ref.nll_from_logits(
        forward_rows(C.eager, clone_cache(snap), C.question + C.answer, N_CTX)[N_Q - 1 : N_Q - 1 + N_A], C.answer
    )
    if C.reference is not None:
        r = C.reference.get((name, ratio))
        if r is not None:
            C.checks[f"key_rerotation_{name}_{ratio}_kept_equals_reference"] = r["kept"] == kept
    return {
        "wrapper": "key_rerotation",
        "press": name,
        "kvpress_class": "KeyRerotationPress(" + type(press.press).__name__ + ")",
        "ratio": ratio,
        "attn_implementation": "eager",
        "params": params_of(KeyRerotationPress(press=inner(name, ratio))),
        "n_kept": n_kept,
        "kept_order": "ascending original position; kept key i is re-rotated to RoPE position i",
        "tie_summary": tie_summary(ties, tk),
        "kept": kept,
        "ties_at_cut": ties,
        "ties_at_cut_kept": tk,
        "cut_gap_rel": gaps,
        "answer_nll": nll,
        "question_positions_start": n_kept,
        "answer_nll_if_question_at_512": nll_orig,
        "pipeline_greedy_first_tokens": greedy,
    }


EXACT_CALLS = [0]


def exact_mask_sdpa(module, query, key, value, attention_mask, dropout=0.0, scaling=None, is_causal=None, **kw):
    """Attention with a true -inf mask on module.masked_key_indices (what AdaKV means), for comparison with
    kvpress's fake-key implementation. Causal over the appended tokens; all earlier cache slots visible."""
    EXACT_CALLS[0] += 1
    b, H, q, d = query.shape
    k_len = key.shape[2]
    grp = H // key.shape[1]
    k = repeat_kv(key, grp)
    v = repeat_kv(value, grp)
    i = torch.arange(q).unsqueeze(1)
    j = torch.arange(k_len).unsqueeze(0)
    allowed = (j <= k_len - q + i).expand(b, H, q, k_len).clone()
    mki = getattr(module, "masked_key_indices", None)
    if q != k_len and mki is not None:
        bi, hi, si = mki
        for g_ in range(grp):
            allowed[bi, hi * grp + g_, :, si] = False
    out = F.scaled_dot_product_attention(query, k, v, attn_mask=allowed, scale=scaling)
    return out.transpose(1, 2).contiguous(), None


def run_adakv(C, name, ratio):
    press = AdaKVPress(press=inner(name, ratio), alpha_safeguard=0.2)
    store = {}
    capture(press.press, store)
    layers = C.sdpa.model.layers
    for m in layers:
        m.self_attn.masked_key_indices = None
    cache, _ = prefill(C.sdpa, C.context, press)
    assert sorted(store) == list(range(C.L))
    n_kept = compute_n_kept(N_CTX, ratio)
    n_safe = max(1, int(n_kept * 0.2))
    n_pruned = C.KV * (N_CTX - n_kept)
    kept, nk, ties, tk, gaps, key_mask = [], [], [], [], [], []
    for l in range(C.L):
        st = store[l]
        keys_full, values_full, pre, post = st["keys"], st["values"], st["scores"], st["scores_ref"]
        assert torch.equal(cache.layers[l].keys, keys_full) and torch.equal(cache.layers[l].values, values_full)
        # the safeguard: top n_safe per head set to finfo.max
        rec = pre.clone()
        rec.scatter_(-1, torch.topk(pre, n_safe, dim=-1).indices, torch.finfo(pre.dtype).max)
        assert torch.equal(rec, post), f"layer {l}: safeguard scatter mismatch"
        flat = post.reshape(1, -1)
        pruned = torch.topk(-flat, n_pruned, dim=1).indices.flatten()
        bi, hi, si = layers[l].self_attn.masked_key_indices
        assert torch.equal(hi, pruned // N_CTX) and torch.equal(si, pruned % N_CTX) and bool((bi == 0).all())
        mask = torch.ones(C.KV, N_CTX, dtype=torch.bool)
        mask[hi, si] = False
        assert int((~mask).sum()) == n_pruned, "duplicate masked indices"
        key_mask.append(mask.view(1, C.KV, N_CTX))
        kl, nl = [], []
        for h in range(C.KV):
            pos = mask[h].nonzero().flatten().tolist()
            kl.append(ref.bitmask_hex(pos))
            nl.append(len(pos))
        assert sum(nl) == C.KV * n_kept
        kept.append(kl)
        nk.append(nl)
        keep_flat = mask.flatten().nonzero().flatten()
        t, k, g = tie_stats(flat[0], keep_flat, C.KV * n_kept)
        ties.append(t)
        tk.append(k)
        gaps.append(g)
    snap = ref.snapshot(cache)
    # kvpress's behaviour: masked_key_indices stay on the modules; the patched sdpa writes fake keys there
    nll, first_row, dinc = qa_nll(C.sdpa, snap, C.question, C.answer, N_CTX)
    # the same with a true -inf mask
    orig = ALL_ATTENTION_FUNCTIONS["sdpa"]
    ALL_ATTENTION_FUNCTIONS["sdpa"] = exact_mask_sdpa
    calls = EXACT_CALLS[0]
    try:
        lg = forward_rows(C.sdpa, clone_cache(snap), C.question + C.answer, N_CTX)
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = orig
    assert EXACT_CALLS[0] == calls + C.L, "exact-mask attention was not used"
    nll_exact = ref.nll_from_logits(lg[N_Q - 1 : N_Q - 1 + N_A], C.answer)
    dex = max(abs(a - b) for a, b in zip(nll, nll_exact))
    assert dex < TOL, f"adakv fake-key vs exact mask NLL differ by {dex}"
    C.checks["adakv_max_fake_key_vs_exact_mask_nll_diff"] = max(
        C.checks.get("adakv_max_fake_key_vs_exact_mask_nll_diff", 0.0), dex
    )
    mine = [layers[l].self_attn.masked_key_indices for l in range(C.L)]
    dp, greedy = pipeline_check(
        C.sdpa, C.tok, C.context, C.question, AdaKVPress(press=inner(name, ratio), alpha_safeguard=0.2), snap,
        first_row, key_mask=key_mask,
    )
    for l in range(C.L):
        a, b_ = mine[l], layers[l].self_attn.masked_key_indices
        assert all(torch.equal(x, y) for x, y in zip(a, b_)), f"layer {l}: pipeline masked_key_indices differ"
    for m in layers:
        m.self_attn.masked_key_indices = None
    C.max_inc = max(C.max_inc, dinc)
    C.max_pipe = max(C.max_pipe, dp)
    return {
        "wrapper": "adakv",
        "press": name,
        "kvpress_class": "AdaKVPress(" + type(press.press).__name__ + ")",
        "ratio": ratio,
        "attn_implementation": "sdpa",
        "params": params_of(AdaKVPress(press=inner(name, ratio), alpha_safeguard=0.2)),
        "n_kept": nk,
        "n_kept_per_layer_total": C.KV * n_kept,
        "n_safe": n_safe,
        "n_pruned_per_layer": n_pruned,
        "tie_summary": tie_summary(ties, tk),
        "kept": kept,
        "ties_at_cut": ties,
        "ties_at_cut_kept": tk,
        "cut_gap_rel": gaps,
        "answer_nll": nll,
        "answer_nll_exact_mask": nll_exact,
        "question_positions_start": N_CTX,
        "pipeline_greedy_first_tokens": greedy,
    }


def run_query_aware(C, name, ratio):
    ids = C.context + C.question
    n_pos = len(ids)
    press = inner(name, ratio)
    store = {}
    capture(press, store)
    cache, last_h = prefill(C.eager, ids, press)
    assert sorted(store) == list(range(C.L))
    n_kept = compute_n_kept(n_pos, ratio)
    kept, ties, tk, gaps = score_topk_analysis(C, store, cache, [n_kept] * C.L, n_pos)
    snap = ref.snapshot(cache)
    nll, dinc, row1 = qa_query_aware(C, snap, last_h)
    dp, greedy = pipeline_check(C.eager, C.tok, ids, C.answer[:1], inner(name, ratio), snap, row1)
    C.max_inc = max(C.max_inc, dinc)
    C.max_pipe = max(C.max_pipe, dp)
    return {
        "wrapper": "query_aware",
        "press": name,
        "kvpress_class": type(press).__name__,
        "ratio": ratio,
        "attn_implementation": "eager",
        "params": params_of(inner(name, ratio)),
        "compressed_len": n_pos,
        "n_kept": n_kept,
        "tie_summary": tie_summary(ties, tk),
        "kept": kept,
        "ties_at_cut": ties,
        "ties_at_cut_kept": tk,
        "cut_gap_rel": gaps,
        "answer_nll": nll,
        "question_positions_start": n_pos,
        "pipeline_greedy_first_tokens": greedy,
    }


def qa_query_aware(C, snap, last_h):
    """answer[0] from the prefill's last row (lm_head of model.model's normed last hidden state); answer[1:]
    from one forward of answer[:-1] at positions 536..550. Returns (nll, incremental diff, logits row predicting
    answer[1])."""
    start = N_CTX + N_Q
    with torch.no_grad():
        row0 = C.eager.lm_head(last_h)[0]
    lg = forward_rows(C.eager, clone_cache(snap), C.answer[:-1], start)
    nll = ref.nll_from_logits(torch.cat([row0.unsqueeze(0), lg]), C.answer)
    inc_rows = incremental_rows(C.eager, clone_cache(snap), [], C.answer[:-1], start)
    inc = ref.nll_from_logits(torch.stack([row0] + inc_rows), C.answer)
    d = max(abs(a - b) for a, b in zip(nll, inc))
    assert d < TOL, f"query-aware incremental vs batched {d}"
    return nll, d, lg[0].clone()


def run_none(C, model, attn):
    cache, _ = prefill(model, C.context, None)
    snap = ref.snapshot(cache)
    nll, _, dinc = qa_nll(model, snap, C.question, C.answer, N_CTX)
    with torch.no_grad():
        full = model(input_ids=torch.tensor([C.context + C.question + C.answer])).logits[0]
    plain = ref.nll_from_logits(full[N_CTX + N_Q - 1 : N_CTX + N_Q - 1 + N_A], C.answer)
    d = max(abs(a - b) for a, b in zip(nll, plain))
    assert d < TOL, f"none {attn}: vs plain forward {d}"
    C.checks[f"none_{attn}_vs_plain_forward_max_abs_diff"] = d
    C.checks[f"none_{attn}_incremental_max_abs_diff"] = dinc
    log(f"none {attn}: mean nll {sum(nll) / N_A:.4f}; plain diff {d:.2e}; incremental {dinc:.2e}")
    return {"attn_implementation": attn, "answer_nll": nll, "plain_forward_answer_nll": plain}


def run_none_query_aware(C):
    ids = C.context + C.question
    cache, last_h = prefill(C.eager, ids, None)
    with torch.no_grad():
        plain_last = C.eager(input_ids=torch.tensor([ids])).logits[0, -1]
        row0 = C.eager.lm_head(last_h)[0]
    d0 = float((row0 - plain_last).abs().max())
    assert d0 < TOL, f"lm_head(last hidden) vs model() last logits: {d0}"
    C.checks["query_aware_lm_head_last_row_vs_plain_forward_max_abs_diff"] = d0
    nll, dinc, _ = qa_query_aware(C, ref.snapshot(cache), last_h)
    C.checks["none_query_aware_incremental_max_abs_diff"] = dinc
    log(f"none query_aware: mean nll {sum(nll) / N_A:.4f}; lm_head row diff {d0:.2e}")
    return {"attn_implementation": "eager", "answer_nll": nll, "question_positions_start": N_CTX + N_Q}


def main():
    t0 = time.time()
    torch.set_grad_enabled(False)
    only = os.environ.get("WRAPPERS")  # debugging: comma-separated subset of wrappers; the fixture is then not written
    C = Ctx()
    C.tok, C.context, C.question, C.answer = ref.tokens()
    C.eager = ref.load_model()
    C.sdpa = load_sdpa()
    assert C.eager.config._attn_implementation == "eager" and C.sdpa.config._attn_implementation == "sdpa"
    cfg = C.eager.config
    C.L, C.KV = cfg.num_hidden_layers, cfg.num_key_value_heads
    C.checks, C.skipped, C.runs = {}, [], []
    C.max_inc, C.max_pipe = 0.0, 0.0
    C.reference = None
    if REF_FIXTURE.exists():
        d = json.loads(REF_FIXTURE.read_text())
        if d["context"] == C.context:
            C.reference = {(r["press"], r["ratio"]): r for r in d["runs"]}
    # kvpress's attention patch must be what the sdpa model calls
    fn = ALL_ATTENTION_FUNCTIONS.get_interface("sdpa", None)
    patched = fn.__module__ == "kvpress.attention_patch" and fn.__qualname__ == "attention_patch.<locals>.wrapper"
    assert patched, (fn.__module__, fn.__qualname__)
    C.checks["sdpa_interface_is_kvpress_attention_patch"] = patched
    log(f"models loaded in {time.time() - t0:.1f}s: layers={C.L} kv_heads={C.KV}")

    none = {"eager": run_none(C, C.eager, "eager"), "sdpa": run_none(C, C.sdpa, "sdpa")}
    none["query_aware_eager"] = run_none_query_aware(C)

    def go(label, fn, *a):
        if only and label.split()[0] not in only.split(","):
            return
        t1 = time.time()
        try:
            r = fn(C, *a)
        except Exception as e:
            if isinstance(e, AssertionError) and not str(e).startswith("ChunkPress"):
                raise
            log(f"SKIP {label}: {type(e).__name__}: {e}")
            C.skipped.append({"wrapper": label.split()[0], "args": list(a), "why": f"{type(e).__name__}: {e}"})
            return
        C.runs.append(r)
        nk = r["n_kept"]
        flat = [x for y in nk for x in (y if isinstance(y, list) else [y])] if isinstance(nk, list) else [nk]
        log(
            f"{label:38s} n_kept {min(flat)}..{max(flat)} mean_nll={sum(r['answer_nll']) / N_A:.4f} "
            f"straddling={r['tie_summary']['heads_with_ties_straddling_cut']} ({time.time() - t1:.1f}s)"
        )

    for name in ["knorm", "snapkv", "streaming_llm", "expected_attention"]:
        for ratio in [0.25, 0.75]:
            go(f"chunkkv {name} {ratio}", run_chunkkv, name, ratio)
    for ratio in [0.25, 0.5, 0.75]:
        go(f"pyramidkv {ratio}", run_pyramid, ratio)
    for name, ratio in [("knorm", 0.5), ("knorm", 0.25), ("snapkv", 0.5)]:
        go(f"key_rerotation {name} {ratio}", run_rerotation, name, ratio)
    for name in ["knorm", "snapkv", "expected_attention"]:
        for ratio in [0.25, 0.5, 0.75]:
            go(f"adakv {name} {ratio}", run_adakv, name, ratio)
    for name in ["snapkv", "knorm", "tova"]:
        go(f"query_aware {name} 0.5", run_query_aware, name, 0.5)

    C.checks["max_incremental_vs_batched_nll_diff"] = C.max_inc
    C.checks["max_pipeline_first_logits_diff"] = C.max_pipe
    out = {
        "versions": {
            "kvpress": ref.kvpress_version(),
            "transformers": transformers.__version__,
            "torch": torch.__version__,
        },
        "model": ref.GGUF,
        "text": f"{ref.TEXT.name} from char {ref.TEXT_START}",
        "setting": "see scripts/kvpress/wrappers.py docstring; float32 CPU; attn_implementation per run",
        "kept_encoding": "ceil(n_positions/4) lowercase hex digits (128 for 512 positions, 134 for query_aware's "
        "536), big-endian integer sum(1<<p) over kept positions p",
        "context": C.context,
        "question": C.question,
        "answer": C.answer,
        "layers": C.L,
        "kv_heads": C.KV,
        "heads": cfg.num_attention_heads,
        "head_dim": getattr(cfg, "head_dim", cfg.hidden_size // cfg.num_attention_heads),
        "runtime_s": round(time.time() - t0, 1),
        "checks": C.checks,
        "runs": C.runs,
        "none": none,
        "skipped": C.skipped,
    }
    if only:
        log(f"WRAPPERS={only}: not writing {OUT}; checks: {C.checks}")
        return
    ref.OUT = OUT
    ref.write_json(out)
    log(f"wrote {OUT} ({OUT.stat().st_size} bytes) in {time.time() - t0:.1f}s")


if __name__ == "__main__":
    main()
