#!/usr/bin/env bash
# What paged eviction costs the score-based rules (docs/findings.md): `stream` under h2o, tova and
# snapkv with S = 4 on TOKENS tokens of Pride and Prejudice from character 100,000, at W = 128 and
# 256, token by token (each KV head chooses its key) and in 16-token pages (each layer chooses a
# page for all its KV heads). Usage:
#   bash scripts/paged/scored.sh MODEL TOKENS     # e.g. smollm2-135m 1024
# prints one Markdown table: perplexity after the first eviction, token-level vs paged.
set -euo pipefail
model=$1 tokens=$2
bin=${SINKSCOPE_BIN:-target/release/sinkscope}
book=${SINKSCOPE_SHARED:-../shared}/corpora/pg1342_pride_and_prejudice.txt
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for w in 128 256; do
  for policy in h2o tova snapkv; do
    for page in 1 16; do
      "$bin" stream -m "$model" -f "$book" --start-char 100000 --tokens "$tokens" --cache "$w" \
        --policy "$policy" --sinks 4 $([ "$page" = 1 ] || echo --page "$page") --json \
        > "$tmp/w$w.$policy.p$page.json" 2>/dev/null
    done
  done
done
python3 - "$tmp" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1])
def one(name):
    v = json.loads((d / name).read_text())
    return v[0] if isinstance(v, list) else v
print("| W | policy | token-level | 16-token pages | paged / token | first 4 kept, paged |")
print("|---|---|---|---|---|---|")
for w in (128, 256):
    for policy in ("h2o", "tova", "snapkv"):
        tok, pag = one(f"w{w}.{policy}.p1.json"), one(f"w{w}.{policy}.p16.json")
        x, y = tok["ppl_after_eviction"], pag["ppl_after_eviction"]
        kept = min(pag["kept"]["kept_first_share"])
        print(f"| {w} | {policy} S=4 | {x:.2f} | {y:.2f} | {y / x:.3f} | {kept:.0%} |")
PY
