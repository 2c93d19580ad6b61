#!/usr/bin/env bash
# sinkscope stream / recommend vs a plain PyTorch token-by-token loop (benches/hf_stream_reference.py,
# HF transformers' modules, a hand-managed cache) on the same SmolLM2 tokens, in one run:
#   1. sinkscope stream --policy sink (block replay, the default)
#   2. the PyTorch loop, same policy, same tokens
#   3. sinkscope stream --token-by-token (one decode step per token, as the PyTorch loop)
#   4. sinkscope recommend --sinks SWEEP --no-recompute (the sweep) vs the PyTorch loop once per policy
#      (its loop costs the same for every S, so: step 2's wall x the number of policies)
# Needs a Python venv with torch + transformers + gguf (default /work/venv; set PYTHON).
#   bash benches/stream_vs_hf.sh [TOKENS=1000] [W=256] [S=4] [SWEEP=0,1,2,4,8]
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
W=${2:-256}
S=${3:-4}
SWEEP=${4:-0,1,2,4,8}
PYTHON=${PYTHON:-/work/venv/bin/python}
BOOK=../shared/corpora/pg1342_pride_and_prejudice.txt
START=249383   # a third into the book, past the Gutenberg header
out=$(mktemp -d)
cargo build --release --quiet
bin=target/release/sinkscope
timed() { /usr/bin/time -f '{"process_wall_s": %e, "peak_rss_mb": %M}' -o "$1" "${@:2}"; }
stream=(-m smollm2-135m -f "$BOOK" --start-char "$START" --tokens "$N" --cache "$W")

timed "$out/ours.time" "$bin" stream "${stream[@]}" --policy sink --sinks "$S" --json -o "$out/run" > "$out/ours.json"
"$PYTHON" -c 'import json,sys; json.dump([t["id"] for t in json.load(open(sys.argv[1]))["tokens"]], open(sys.argv[2], "w"))' "$out/run/stream.json" "$out/tokens.json"
timed "$out/hf.time" "$PYTHON" benches/hf_stream_reference.py --model smollm2 --tokens "$out/tokens.json" --policy sink --sinks "$S" \
  --cache "$W" --positions slot --threads "$(nproc)" 2>/dev/null | tail -1 > "$out/hf.json"
timed "$out/tbt.time" "$bin" stream "${stream[@]}" --policy sink --sinks "$S" --token-by-token --json > "$out/tbt.json"
timed "$out/sweep.time" "$bin" recommend "${stream[@]}" --sinks "$SWEEP" --no-recompute --json > "$out/sweep.json"

python3 - "$out" "$SWEEP" <<'PY'
import json, sys
out, sweep = sys.argv[1], sys.argv[2].split(",")
j = lambda name: json.load(open(f"{out}/{name}"))
ours, hf, tbt, rec = j("ours.json"), j("hf.json"), j("tbt.json"), j("sweep.json")
t_ours, t_hf, t_tbt, t_sweep = j("ours.time"), j("hf.time"), j("tbt.time"), j("sweep.time")
mb = lambda t: t["peak_rss_mb"] / 1024
print(f"tokens {ours['tokens']}; ppl sinkscope {ours['ppl']:.4f}, PyTorch {hf['ppl']:.4f}, token-by-token {tbt['ppl']:.4f} (same tokens, same policy)")
print(f"sink S={ours['policy']['sinks']} W={ours['policy']['cache']}: sinkscope {ours['tokens_per_s']:.1f} tok/s, PyTorch loop {hf['tokens_per_s']:.1f} tok/s "
      f"-> {ours['tokens_per_s'] / hf['tokens_per_s']:.2f}x; peak RSS {mb(t_ours):.0f} MB vs {hf['peak_rss_mb']:.0f} MB")
print(f"sinkscope --token-by-token: {tbt['tokens_per_s']:.1f} tok/s -> {tbt['tokens_per_s'] / hf['tokens_per_s']:.2f}x the PyTorch loop")
n = len(sweep)
ref = n * hf["wall_s"]
print(f"sweep S={','.join(sweep)} (no recompute): sinkscope recommend {t_sweep['process_wall_s']:.1f} s (process, load included) vs PyTorch "
      f"{n} x {hf['wall_s']:.1f} s = {ref:.1f} s (loops only) -> {ref / t_sweep['process_wall_s']:.1f}x; recommended S = {rec['recommended_sinks']}")
PY
