#!/usr/bin/env bash
# The two long-running paths issue 18 asked to speed up, timed with two builds in one run each:
# a T = 4,096 capture of SmolLM2 (reducers + heatmaps + NLL, as `capture` runs it) and the
# 160-token causal sweep (key 0 hidden from each of 270 heads and 30 whole layers) of `analyze`.
# BEFORE and AFTER are sinkscope binaries (e.g. one built at an older commit in a worktree:
#   git worktree add /tmp/before <rev> && (cd /tmp/before && cargo build --release)).
# Prints one JSON line per binary: capture wall seconds and peak RSS, sweep seconds.
#   bash benches/speed_before_after.sh BEFORE_BIN AFTER_BIN
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf
for bin in "$@"; do
  out=$(mktemp -d)
  "$bin" capture -m "$MODEL" -f ../shared/corpora/pg1342_pride_and_prejudice.txt --max-tokens 4096 -o "$out/capture" >/dev/null 2>&1
  "$bin" analyze -m "$MODEL" -f ../shared/corpora/pg84_frankenstein.txt --max-tokens 160 --ablate-keys 0 --ablation-tokens 160 --heatmap-bins 0 -o "$out/analyze" >/dev/null 2>&1
  python3 - "$bin" "$out" <<'PY'
import json, sys
c = json.load(open(sys.argv[2] + "/capture/capture.json"))
a = json.load(open(sys.argv[2] + "/analyze/report.json"))["ablation"]
print(json.dumps({"binary": sys.argv[1], "capture_4096_s": round(c["wall_seconds"], 2), "capture_peak_rss_mib": round(c["peak_rss_bytes"] / 2**20),
                  "perplexity": round(c["nll"]["perplexity"], 3), "sweep_160_s": round(a["wall_seconds"], 1), "variants": len(a["results"])}))
PY
  rm -rf "$out"
done
