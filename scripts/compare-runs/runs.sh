#!/usr/bin/env bash
# Runs one sinkscope binary ($1) over small capture/analyze/recommend/stream/needle/canary/export
# runs into $2, so two builds can be compared with compare.py (docs/findings.md, "Refactors").
set -euo pipefail
B=$1; D=$2; S=${SINKSCOPE_SHARED:-$(cd "$(dirname "$0")/../../.." && pwd)/shared}
rm -rf "$D"; mkdir -p "$D"
T=$S/corpora/tinystories_val_subset.txt; P=$S/corpora/pg1342_pride_and_prejudice.txt
st=$S/models/stories260K.gguf; smol=$S/models/SmolLM2-135M-Instruct.Q4_1.gguf
export SINKSCOPE_MODELS=$S/models
$B capture -m $st -f $T --max-tokens 128 -o $D/st > $D/st-capture.txt
$B analyze -m $st --probes default --ablation-tokens 64 -o $D/st > $D/st-analyze.txt
$B recommend -m $st -f $T --tokens 300 --cache 64 -o $D/st > $D/st-recommend.txt
$B recommend -m $st -f $T --tokens 300 --cache 64 --policy h2o --recent 16 --sinks 0,2 > $D/st-recommend-h2o.txt
$B stream -m $st -f $T --tokens 300 --cache 64 --policy snapkv --observe 8 --json > $D/st-stream-snapkv.json
$B needle -m $st --lengths 200 --depths 0,0.5 --trials 1 --policy dense,sink,tova --cache 64 -o $D/needle > $D/needle.txt
$B canary -m $st -p "Once upon a time" -n 80 --cache 32 -o $D/canary > $D/canary.txt
$B export $D/st > $D/st-export.txt 2>&1 || true
$B analyze -m $smol -f $P --max-tokens 200 --ablation-tokens 64 -o $D/smol > $D/smol-analyze.txt
$B stream -m $smol -f $P --start-char 2000 --tokens 400 --cache 128 --policy sink -o $D/smol > $D/smol-stream.txt
$B capture -m $smol -f $P --max-tokens 160 -o $D/smol > $D/smol-capture.txt
$B export $D/smol > $D/smol-export.txt 2>&1 || true
