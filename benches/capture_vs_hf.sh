#!/usr/bin/env bash
# sinkscope capture vs HF transformers (eager, output_attentions=True) on the same SmolLM2 tokens,
# in one run, so machine drift hits both sides alike.
# Forward only: each process loads the model once, then times REPEAT captures with all-position
#   logits (sinkscope scores the text; HF returns them) and REPEAT without (sinkscope --no-nll
#   equivalent; HF logits_to_keep=1), alternating; ROUNDS rounds of one sinkscope and one HF process,
#   taking turns to go first. HF loads the GGUF's float32 weights from a safetensors copy made once
#   (same values, faster start).
# Whole command (what a user waits for; each process timed from start to exit, E2E_ROUNDS rounds):
#   `sinkscope capture -m smollm2-135m -f BOOK --max-tokens TOKENS -o DIR` vs benches/hf_capture_e2e.py
#   doing the same job, loading from the same GGUF and from the safetensors copy.
# Needs a Python venv with torch + transformers + gguf (default /work/venv; set PYTHON).
#   bash benches/capture_vs_hf.sh [TOKENS=512] [REPEAT=5] [ROUNDS=6] [E2E_ROUNDS=3]
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-512}
R=${2:-5}
ROUNDS=${3:-6}
E2E_ROUNDS=${4:-3}
BOOK=../shared/corpora/pg1342_pride_and_prejudice.txt
PYTHON=${PYTHON:-/work/venv/bin/python}
out=$(mktemp -d)
tok="$out/tokens.json"
cargo build --release --benches --bins --quiet
"$PYTHON" benches/hf_capture_e2e.py --convert "$out/hf-model" 2>/dev/null
ours() { cargo bench --bench capture --quiet -- --tokens "$T" --repeat "$R" > "$out/ours_$1.json"; }
hf() { "$PYTHON" benches/hf_capture_reference.py --tokens "$tok" --threads "$(nproc)" --repeat "$R" --model-dir "$out/hf-model" 2>/dev/null | tail -1 > "$out/hf_$1.json"; }
cargo bench --bench capture --quiet -- --tokens "$T" --repeat 1 --tokens-out "$tok" > /dev/null  # the shared tokens
for round in $(seq "$ROUNDS"); do
  if (( round % 2 )); then ours "$round"; hf "$round"; else hf "$round"; ours "$round"; fi
done
cat "$out"/ours_*.json "$out"/hf_*.json
python3 - "$out" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda name: [json.load(open(f"{out}/{name}_{r}.json")) for r in range(1, rounds + 1)]
ours, hf = load("ours"), load("hf")
for key, title in [("with_logits", "with all-position logits"), ("without_logits", "without logits (sinkscope no NLL, HF logits_to_keep=1)")]:
    o = statistics.median(r[key]["wall_s_median"] for r in ours)
    h = statistics.median(r[key]["wall_s_median"] for r in hf)
    ratios = sorted(b[key]["wall_s_median"] / a[key]["wall_s_median"] for a, b in zip(ours, hf))
    omin, hmin = min(r[key]["wall_s_min"] for r in ours), min(r[key]["wall_s_min"] for r in hf)
    print(f"{title}: sinkscope {o:.3f}s, HF {h:.3f}s (medians over {rounds} rounds) -> {h/o:.2f}x; "
          f"per-round ratios {ratios[0]:.2f}-{ratios[-1]:.2f}x; best runs {omin:.3f}s vs {hmin:.3f}s -> {hmin/omin:.2f}x")
rss_o, rss_h = max(r["peak_rss_mb"] for r in ours), max(r["peak_rss_mb"] for r in hf)
print(f"peak RSS {rss_o:.0f} MB vs {rss_h:.0f} MB ({rss_h/rss_o:.2f}x lower)")
print(f"sanity, mean attention on key 0 over layers and heads: sinkscope {ours[0]['sink_mean']:.6f}, HF {hf[0]['sink_mean']:.6f}")
PY

# Whole command, process start to exit, imports and model loading included.
timed() { /usr/bin/time -f "%e %M" -o "$1" "${@:2}" > /dev/null 2>&1; }
for round in $(seq "$E2E_ROUNDS"); do
  timed "$out/e2e_ours_$round" target/release/sinkscope capture -m smollm2-135m -f "$BOOK" --max-tokens "$T" -o "$out/ours-capture"
  timed "$out/e2e_hfgguf_$round" "$PYTHON" benches/hf_capture_e2e.py --text "$BOOK" --max-tokens "$T" --out "$out/hf-gguf.json"
  timed "$out/e2e_hfdir_$round" "$PYTHON" benches/hf_capture_e2e.py --text "$BOOK" --max-tokens "$T" --out "$out/hf-dir.json" --model-dir "$out/hf-model"
done
python3 - "$out" "$E2E_ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def runs(name):
    rows = [open(f"{out}/e2e_{name}_{r}").read().split() for r in range(1, rounds + 1)]
    return statistics.median(float(w) for w, _ in rows), max(int(m) for _, m in rows) / 1024
ours_s, ours_mb = runs("ours")
print(f"whole command, median of {rounds}: sinkscope capture {ours_s:.2f}s, peak RSS {ours_mb:.0f} MB")
for name, title in [("hfgguf", "HF from the same GGUF"), ("hfdir", "HF from the float32 safetensors copy")]:
    s, mb = runs(name)
    print(f"  vs {title}: {s:.2f}s -> {s/ours_s:.2f}x; peak RSS {mb:.0f} MB ({mb/ours_mb:.2f}x lower)")
ours = json.load(open(f"{out}/ours-capture/capture.json"))
hf = json.load(open(f"{out}/hf-dir.json"))
print(f"sanity: tokens {ours['n_tokens']} vs {hf['tokens']}, perplexity {ours['nll']['perplexity']:.3f} vs {hf['perplexity']:.3f}; "
      f"HF inside its process: load+tokenize {hf['load_and_tokenize_s']}s, forward+reduce {hf['forward_and_reduce_s']}s")
PY
