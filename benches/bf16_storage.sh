#!/usr/bin/env bash
# What keeping weight matrices in bf16 saves on a 1B-parameter model: a seeded random Llama of
# Llama-3.2-1B's shape (benches/make_random_llama.py, bf16 safetensors), captured at T = 256 with
# the matrices kept as stored (--dtype auto → bf16) and widened at load (--dtype f32), one process
# each, in one run. Prints per dtype: the weights' bytes in memory, load+capture wall seconds and
# peak RSS (/usr/bin/time), the capture's own seconds, and perplexity (the same model either way).
#   bash benches/bf16_storage.sh [MODEL_DIR=/tmp/random-llama-1b] [TOKENS=256]
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-/tmp/random-llama-1b}
T=${2:-256}
BOOK=../shared/corpora/pg1342_pride_and_prejudice.txt
[ -f "$DIR/model.safetensors" ] || /work/venv-ref/bin/python benches/make_random_llama.py --out "$DIR" 2>/dev/null || python3 benches/make_random_llama.py --out "$DIR"
cargo build --release --quiet
for dtype in auto f32; do
  out=$(mktemp -d)
  /usr/bin/time -f "%e %M" -o "$out/time" ./target/release/sinkscope capture -m "$DIR" -f "$BOOK" --max-tokens "$T" --dtype "$dtype" -o "$out/run" >/dev/null 2>&1
  bytes=$(./target/release/sinkscope info "$DIR" --dtype "$dtype" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["weight_bytes"])')
  python3 - "$out/run/capture.json" "$out/time" "$dtype" "$bytes" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
wall, rss_kib = open(sys.argv[2]).read().split()[-2:]
print(json.dumps({"dtype": sys.argv[3], "weights_mib": round(int(sys.argv[4]) / 2**20), "tokens": r["n_tokens"],
                  "process_s": float(wall), "peak_rss_mib": round(int(rss_kib) / 1024), "capture_s": round(r["wall_seconds"], 2),
                  "perplexity": round(r["nll"]["perplexity"], 3)}))
PY
  rm -rf "$out"
done
