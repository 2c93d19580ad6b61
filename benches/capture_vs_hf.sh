#!/usr/bin/env bash
# sinkscope capture vs HF transformers (eager, output_attentions=True) on the same SmolLM2 tokens,
# in one run, interleaved over ROUNDS rounds so machine noise hits both sides alike. Two pairings:
#   with logits:    sinkscope capture (scores the text: all-position logits) vs HF forward (all logits)
#   without logits: sinkscope capture --no-nll vs HF forward with logits_to_keep=1
# Needs a Python venv with torch + transformers + gguf (default /work/venv; set PYTHON).
#   bash benches/capture_vs_hf.sh [TOKENS=512] [REPEAT=5] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-512}
R=${2:-5}
ROUNDS=${3:-2}
PYTHON=${PYTHON:-/work/venv/bin/python}
out=$(mktemp -d)
tok="$out/tokens.json"
cargo build --release --benches --quiet
for round in $(seq "$ROUNDS"); do
  cargo bench --bench capture --quiet -- --tokens "$T" --repeat "$R" --tokens-out "$tok" > "$out/ours_nll_$round.json"
  "$PYTHON" benches/hf_capture_reference.py --tokens "$tok" --threads "$(nproc)" --repeat "$R" 2>/dev/null | tail -1 > "$out/hf_full_$round.json"
  cargo bench --bench capture --quiet -- --tokens "$T" --repeat "$R" --no-nll > "$out/ours_nonll_$round.json"
  "$PYTHON" benches/hf_capture_reference.py --tokens "$tok" --threads "$(nproc)" --repeat "$R" --logits-to-keep 1 2>/dev/null | tail -1 > "$out/hf_keep1_$round.json"
done
cat "$out"/ours_*.json "$out"/hf_*.json
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{out}/{name}_{r}.json")) for r in range(1, rounds + 1)]
def wall(runs, key):
    return statistics.median(r[key] for r in runs)
for title, ours, hf in [("with all-position logits", load("ours_nll"), load("hf_full")),
                        ("without logits (capture --no-nll vs logits_to_keep=1)", load("ours_nonll"), load("hf_keep1"))]:
    o, h = wall(ours, "wall_s_median"), wall(hf, "wall_s_median")
    omin, hmin = min(r["wall_s_min"] for r in ours), min(r["wall_s_min"] for r in hf)
    rss_o, rss_h = max(r["peak_rss_mb"] for r in ours), max(r["peak_rss_mb"] for r in hf)
    print(f"{title}: sinkscope {o:.3f}s, HF {h:.3f}s (medians over {rounds} rounds) -> {h/o:.2f}x; "
          f"best runs {omin:.3f}s vs {hmin:.3f}s -> {hmin/omin:.2f}x; peak RSS {rss_o:.0f} MB vs {rss_h:.0f} MB ({rss_h/rss_o:.2f}x lower)")
o = load("ours_nll")[0]; h = load("hf_full")[0]
print(f"sanity, mean attention on key 0 over layers and heads: sinkscope {o['sink_mean']:.6f}, HF {h['sink_mean']:.6f}")
PY
