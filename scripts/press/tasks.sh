#!/usr/bin/env bash
# Every press ± 4 pinned sinks, token by token vs 16-token blocks, query-agnostic vs aware, at two
# ratios, on the RULER-style tasks (3 prompts each) of Pride and Prejudice (docs/findings.md).
# Usage:
#   bash scripts/press/tasks.sh MODEL LENGTH OUT_DIR    # e.g. smollm2-135m 480 /tmp/tasks-smollm2
# writes OUT_DIR (tasks.json, tasks.md, tables/) and prints the command's summary.
set -euo pipefail
model=$1 length=$2 out=$3
bin=${SINKSCOPE_BIN:-target/release/sinkscope}
book=${SINKSCOPE_SHARED:-../shared}/corpora/pg1342_pride_and_prejudice.txt
"$bin" tasks -m "$model" -f "$book" --length "$length" --trials 3 \
  --press knorm,streaming_llm,snapkv,tova,observed_attention,keydiff,expected_attention,pyramidkv \
  --ratio 0.5,0.75 --sinks 4 --block 16 --query-aware -o "$out" --replace
