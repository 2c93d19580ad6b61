#!/usr/bin/env python3
"""Independent PyTorch reference for sinkscope's KV-cache streaming simulator (DESIGN.md §7).

    /work/venv/bin/python benches/hf_stream_reference.py --model smollm2 --tokens FILE.json \
        --policy sink --sinks 4 --cache 256 --positions slot --threads 2 [--out NLL.json] [--check]

FILE.json is a JSON list of token ids for the chosen model. The model is loaded exactly as
tests/fixtures/make_reference.py loads it (its `load_model`: GGUF dequantized to float32 by HF
transformers, eager attention; stories260K with pad_token_id=None). Only the HF modules' weights and
sub-modules are used (embed_tokens, input/post-attention RMSNorms, q/k/v/o projections, MLP, final norm,
lm_head, and the model's rotary embedding for cos/sin); the token loop, the KV cache, RoPE application,
GQA and the attention itself are written here by hand. No HF cache class is used.

Protocol (StreamingLLM style). Budget W counts every key a query can see, including its own.
For t = 0 .. N-2: feed token t (its key/value are appended to the cache), compute the next-token
distribution from that position, record NLL_t = -log p(token_{t+1}) (natural log, log_softmax in float64
of the float32 logits); then, if the cache holds W entries, evict so it holds W-1 (the next query sees
at most W keys).
  dense      never evict (W ignored; positions are the absolute token indices).
  window     evict the oldest entry.
  sink S     keep the first S tokens of the stream forever (S < W, S is inside the budget W);
             evict the oldest non-sink entry.
  recompute  no cache: at step t run the model from scratch (one HF forward, use_cache=False) on tokens
             max(0, t-W+1) .. t with positions 0 .. len-1; take the last position's distribution.
Position modes for the cached policies:
  slot       keys cached BEFORE RoPE; every step rotates the cached keys by their slot 0..n-1 in the
             current cache and the query by its own slot n-1 (StreamingLLM).
  original   keys and query rotated by their absolute stream position t (keys cached after RoPE).
  delta      keys cached AFTER RoPE, rotated at the slot where they were inserted (n-1); on each eviction
             every surviving key that sat after an evicted entry is re-rotated in place by -D positions
             (D = number of evicted entries before it), in float32, so rounding accumulates
             (llama.cpp context shift / HF SinkCache). The query uses its slot n-1.
In exact arithmetic slot == delta; the difference is float32 rounding only.

Output: one JSON line {policy, sinks, cache, positions, tokens (N), scored (N-1), ppl (exp of the mean NLL
over all scored steps), ppl_after_eviction (over steps t >= W, the steps whose query no longer sees the whole
prefix; null if none), first_eviction_step (= W, the first such step; null if none; the cached policies
perform their first eviction at the end of step W-1), tokens_per_s (scored steps / wall seconds of the
loop, model load excluded), wall_s, load_s, peak_rss_mb, threads, torch, transformers}.
With --out FILE the same object plus "nll" (the per-step NLL list, float64) is written to FILE.
With --check one batched HF forward over all N tokens is also run and max |NLL_t - batched_t| is reported
over the steps t < W (all steps for dense), where every policy must agree with the full-prefix forward.
"""

import argparse
import json
import math
import os
import resource
import sys
import time
from pathlib import Path

import torch
import transformers

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from make_reference import MODEL_SPECS, load_model  # noqa: E402

POLICIES = ("dense", "window", "sink", "recompute")
POSITION_MODES = ("slot", "original", "delta")


def rotate_half(x):
    """HF Llama half-split convention: (x1, x2) -> (-x2, x1) over the two halves of head_dim."""
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class Streamer:
    """Hand-written single-token Llama step over an HF-loaded LlamaForCausalLM's modules."""

    def __init__(self, model):
        self.model = model
        cfg = model.config
        self.cfg = cfg
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        assert self.n_heads % self.n_kv == 0
        self.n_rep = self.n_heads // self.n_kv
        self.scaling = self.head_dim ** -0.5
        self._rope_cache = {}

    def cos_sin(self, positions):
        """cos/sin [len, head_dim] (float32) from the model's own rotary embedding for integer positions."""
        pos = torch.as_tensor(positions, dtype=torch.long).reshape(1, -1)
        dummy = torch.zeros(1, dtype=torch.float32)
        cos, sin = self.model.model.rotary_emb(dummy, position_ids=pos)
        return cos[0], sin[0]

    def table(self, n):
        """cos/sin for positions 0..n-1 (grown on demand; identical values to per-position calls)."""
        have = self._rope_cache.get("n", 0)
        if n > have:
            m = max(n, 2 * have, 64)
            self._rope_cache["cos"], self._rope_cache["sin"] = self.cos_sin(torch.arange(m))
            self._rope_cache["n"] = m
        return self._rope_cache["cos"][:n], self._rope_cache["sin"][:n]

    @staticmethod
    def rope(x, cos, sin):
        # x [heads, n, hd]; cos/sin [n, hd]
        return x * cos + rotate_half(x) * sin

    @torch.no_grad()
    def stream(self, ids, policy, W=None, S=0, positions="slot"):
        """Per-step NLL list (float64) for the cached policies (dense / window / sink)."""
        assert policy in ("dense", "window", "sink")
        if policy == "dense":
            W, S, positions = None, 0, "original"
        elif policy == "window":
            S = 0
        assert positions in POSITION_MODES
        if policy != "dense":
            assert W is not None and W >= 1 and 0 <= S < W, (W, S)
        m = self.model.model
        L, Hkv, hd = self.n_layers, self.n_kv, self.head_dim
        K = [torch.empty(Hkv, 0, hd) for _ in range(L)]  # slot: pre-RoPE; original/delta: post-RoPE
        V = [torch.empty(Hkv, 0, hd) for _ in range(L)]
        n = 0  # entries in the cache (same for every layer)
        nll = []
        N = len(ids)
        ids_t = torch.tensor(ids, dtype=torch.long)
        if positions == "delta":
            cos_m1, sin_m1 = self.cos_sin([-1])  # rotation by -1 (one eviction per step in these policies)
        for t in range(N - 1):
            n += 1
            slot = n - 1
            qpos = t if positions == "original" else slot
            cq, sq = self.table(max(qpos, n) + 1)
            cos_q, sin_q = cq[qpos : qpos + 1], sq[qpos : qpos + 1]
            if positions == "slot":
                cos_k, sin_k = cq[:n], sq[:n]
            x = m.embed_tokens(ids_t[t : t + 1].reshape(1, 1))  # [1, 1, d]
            for l, layer in enumerate(m.layers):
                att = layer.self_attn
                h = layer.input_layernorm(x)
                q = att.q_proj(h).view(self.n_heads, 1, hd)
                k = att.k_proj(h).view(Hkv, 1, hd)
                v = att.v_proj(h).view(Hkv, 1, hd)
                if positions != "slot":
                    k = self.rope(k, cos_q, sin_q)  # original: at t; delta: at insertion slot n-1
                K[l] = torch.cat((K[l], k), dim=1)
                V[l] = torch.cat((V[l], v), dim=1)
                keys = self.rope(K[l], cos_k, sin_k) if positions == "slot" else K[l]
                qr = self.rope(q, cos_q, sin_q)
                if self.n_rep > 1:  # GQA: query head j uses kv head j // n_rep (HF repeat_kv)
                    keys_r = keys.repeat_interleave(self.n_rep, dim=0)
                    vals_r = V[l].repeat_interleave(self.n_rep, dim=0)
                else:
                    keys_r, vals_r = keys, V[l]
                scores = torch.matmul(qr, keys_r.transpose(1, 2)) * self.scaling  # [H, 1, n]
                probs = torch.softmax(scores, dim=-1, dtype=torch.float32)
                o = torch.matmul(probs, vals_r)  # [H, 1, hd]
                o = o.transpose(0, 1).reshape(1, 1, self.n_heads * hd)
                x = x + att.o_proj(o)
                x = x + layer.mlp(layer.post_attention_layernorm(x))
            logits = self.model.lm_head(m.norm(x))[0, -1]  # float32 [V]
            lp = torch.log_softmax(logits.double(), dim=-1)
            nll.append(-float(lp[ids[t + 1]]))
            # eviction: keep at most W-1 so the next query sees at most W keys
            if policy != "dense" and n == W:
                e = S  # window: S = 0 -> oldest; sink: oldest non-sink
                for l in range(L):
                    K[l] = torch.cat((K[l][:, :e], K[l][:, e + 1 :]), dim=1)
                    V[l] = torch.cat((V[l][:, :e], V[l][:, e + 1 :]), dim=1)
                    if positions == "delta" and K[l].shape[1] > e:
                        # survivors after the evicted entry shift back one slot: re-rotate by -1 in place
                        tail = K[l][:, e:]
                        K[l] = torch.cat((K[l][:, :e], self.rope(tail, cos_m1, sin_m1)), dim=1)
                n -= 1
        return nll

    @torch.no_grad()
    def recompute(self, ids, W):
        """Per-step NLL list: at step t one fresh HF forward over tokens max(0, t-W+1) .. t (positions 0..)."""
        nll = []
        for t in range(len(ids) - 1):
            ctx = ids[max(0, t - W + 1) : t + 1]
            logits = self.model(input_ids=torch.tensor([ctx], dtype=torch.long), use_cache=False).logits[0, -1]
            lp = torch.log_softmax(logits.float().double(), dim=-1)
            nll.append(-float(lp[ids[t + 1]]))
        return nll

    @torch.no_grad()
    def batched(self, ids):
        """Per-position NLL list from one batched HF forward (use_cache=False) over all tokens."""
        logits = self.model(input_ids=torch.tensor([ids], dtype=torch.long), use_cache=False).logits[0]
        lp = torch.log_softmax(logits.float().double(), dim=-1)
        tgt = torch.tensor(ids[1:], dtype=torch.long)
        return (-lp[:-1].gather(1, tgt[:, None])[:, 0]).tolist()

    def run(self, ids, policy, W=None, S=0, positions="slot"):
        if policy == "recompute":
            return self.recompute(ids, W)
        return self.stream(ids, policy, W=W, S=S, positions=positions)


def ppl(xs):
    return math.exp(sum(xs) / len(xs)) if xs else None


def summarize(nll, policy, W):
    """(ppl, ppl_after_eviction, first_eviction_step) per the protocol above."""
    first = None
    if policy != "dense" and W is not None and len(nll) > W:
        first = W  # first step whose query no longer sees the whole prefix
    after = ppl(nll[first:]) if first is not None else None
    return ppl(nll), after, first


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(MODEL_SPECS), required=True)
    ap.add_argument("--tokens", required=True, help="JSON list of token ids")
    ap.add_argument("--policy", choices=POLICIES, required=True)
    ap.add_argument("--sinks", type=int, default=4, help="S for --policy sink (inside the budget W)")
    ap.add_argument("--cache", type=int, default=None, help="budget W (window / sink / recompute)")
    ap.add_argument("--positions", choices=POSITION_MODES, default="slot")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=None, help="also write the result with the per-step NLL list here")
    ap.add_argument("--check", action="store_true", help="compare with one batched HF forward (steps t < W)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    ids = json.loads(Path(args.tokens).read_text())
    assert isinstance(ids, list) and len(ids) >= 2 and all(isinstance(i, int) for i in ids), "need a JSON list of >= 2 ints"
    if args.policy != "dense" and args.cache is None:
        ap.error(f"--policy {args.policy} needs --cache W")
    if args.policy == "sink" and not (0 <= args.sinks < args.cache):
        ap.error("need 0 <= --sinks < --cache")

    t0 = time.perf_counter()
    model = load_model(MODEL_SPECS[args.model])
    load_s = time.perf_counter() - t0
    V = model.config.vocab_size
    assert all(0 <= i < V for i in ids), f"token id out of range for vocab {V}"
    st = Streamer(model)

    W = None if args.policy == "dense" else args.cache
    S = args.sinks if args.policy == "sink" else 0
    t1 = time.perf_counter()
    nll = st.run(ids, args.policy, W=W, S=S, positions=args.positions)
    wall_s = time.perf_counter() - t1
    p, p_after, first = summarize(nll, args.policy, W)

    res = {
        "model": args.model,
        "policy": args.policy,
        "sinks": S if args.policy in ("sink", "window") else None,
        "cache": W,
        "positions": None if args.policy == "recompute" else ("original" if args.policy == "dense" else args.positions),
        "tokens": len(ids),
        "scored": len(nll),
        "ppl": p,
        "ppl_after_eviction": p_after,
        "first_eviction_step": first,
        "tokens_per_s": len(nll) / wall_s,
        "wall_s": round(wall_s, 4),
        "load_s": round(load_s, 4),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }
    if args.check:
        ref = st.batched(ids)
        m = len(nll) if W is None else min(len(nll), W)
        res["check_steps"] = m
        res["check_max_abs_dnll_vs_batched"] = max(abs(a - b) for a, b in zip(nll[:m], ref[:m]))
    print(json.dumps(res))
    if args.out:
        Path(args.out).write_text(json.dumps(dict(res, nll=nll)) + "\n")


if __name__ == "__main__":
    main()
