#!/usr/bin/env bash
# Long-input capture: SmolLM2 on 8,192 tokens of a Gutenberg book with reducers only (no T×T
# pattern is ever held), reporting wall time and peak RSS from capture.json.
#   bash benches/capture_8k.sh [BOOK] [TOKENS=8192]
set -euo pipefail
cd "$(dirname "$0")/.."
BOOK=${1:-../shared/corpora/pg1342_pride_and_prejudice.txt}
T=${2:-8192}
out=$(mktemp -d)
cargo build --release --quiet
./target/release/sinkscope capture -m smollm2-135m -f "$BOOK" --max-tokens "$T" -o "$out"
python3 - "$out/capture.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({"tokens": r["n_tokens"], "wall_s": round(r["wall_seconds"], 2),
                  "peak_rss_mib": round(r["peak_rss_bytes"] / 2**20), "estimate_mib": round(r["memory_estimate"]["total"] / 2**20),
                  "perplexity": round(r["nll"]["perplexity"], 3)}))
PY
