#!/usr/bin/env bash
# What paged eviction costs against token-level at equal memory (docs/findings.md): `recommend`'s
# window/sink sweep (S = 0, 4, 16) on TOKENS tokens of Pride and Prejudice from character 100,000,
# at W = 128 and 256, token by token and in 16-token pages. Usage:
#   bash scripts/paged/cost.sh MODEL TOKENS     # e.g. smollm2-135m 1024
# prints one Markdown table: perplexity after the first eviction, token-level vs paged.
set -euo pipefail
model=$1 tokens=$2
bin=${SINKSCOPE_BIN:-target/release/sinkscope}
book=${SINKSCOPE_SHARED:-../shared}/corpora/pg1342_pride_and_prejudice.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for w in 128 256; do
  for page in 1 16; do
    "$bin" recommend -m "$model" -f "$book" --start-char 100000 --tokens "$tokens" --cache "$w" \
      --sinks 0,4,16 --page "$page" --no-recompute --json > "$tmp/w$w.p$page.json" 2>/dev/null
  done
done
python3 - "$tmp" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
print("| W | S | token-level | 16-token pages | paged / token |")
print("|---|---|---|---|---|")
for w in (128, 256):
    tok = json.loads((d / f"w{w}.p1.json").read_text())["table"]
    pag = json.loads((d / f"w{w}.p16.json").read_text())["table"]
    for a, b in zip(tok, pag):
        assert a["sinks"] == b["sinks"]
        x, y = a["ppl_after_eviction"], b["ppl_after_eviction"]
        print(f"| {w} | {a['sinks']} | {x:.2f} | {y:.2f} | {y / x:.3f} |")
PY
