#!/usr/bin/env bash
# Every press ± pinned sinks, token by token vs 16-token blocks, query-agnostic vs aware, at two
# ratios, on one prompt of Pride and Prejudice (docs/findings.md). Usage:
#   bash scripts/press/sweep.sh MODEL TOKENS OUT_DIR    # e.g. smollm2-135m 512 /tmp/sweep
# prints one Markdown table: press × setting → ΔNLL of the answer (nats per token). Settings
# already in OUT_DIR are reused.
set -euo pipefail
model=$1 tokens=$2 out=$3
bin=${SINKSCOPE_BIN:-target/release/sinkscope}
book=${SINKSCOPE_SHARED:-../shared}/corpora/pg1342_pride_and_prejudice.txt
presses=knorm,streaming_llm,snapkv,tova,observed_attention,keydiff,expected_attention,pyramidkv
for sinks in default 4; do
  for block in 1 16; do
    for aware in no yes; do
      dir="$out/sinks-$sinks.block-$block.aware-$aware"
      [ -f "$dir/press.json" ] && continue  # done by an earlier run: only the table is redone
      args=(press -m "$model" -f "$book" --start-char 100000 --tokens "$tokens"
            --question " Question: what did Elizabeth think of Mr. Darcy at first? Answer:"
            --answer " She thought him the proudest, most disagreeable man in the world."
            --press "$presses" --ratio 0.5,0.75 -o "$dir" --replace)
      [ "$sinks" = 4 ] && args+=(--sinks 4)
      [ "$block" = 16 ] && args+=(--block 16)
      [ "$aware" = yes ] && args+=(--query-aware)
      # pyramidkv does not combine with blocks: run the rest there.
      if [ "$block" = 16 ]; then args=("${args[@]/$presses/${presses%,pyramidkv}}"); fi
      "$bin" "${args[@]}" > /dev/null
    done
  done
done
python3 - "$out" <<'PY'
import json, sys, pathlib
rows, cols = {}, []
for f in sorted(pathlib.Path(sys.argv[1]).glob("*/press.json")):
    r = json.loads(f.read_text()); base = sum(r["uncompressed_nll"]) / len(r["uncompressed_nll"])
    setting = f.parent.name.replace("sinks-default", "own sinks").replace("sinks-4", "S=4").replace(".block-16", " B=16").replace(".block-1", "").replace(".aware-no", "").replace(".aware-yes", " aware")
    for run in r["runs"]:
        col = f'{setting} r={run["press"]["ratio"]}'
        cols += [col] if col not in cols else []
        name = run["press"]["kind"] if run["press"]["budget"]["rule"] == "uniform" else "pyramidkv"
        rows.setdefault(name, {})[col] = sum(run["answer_nll"]) / len(run["answer_nll"]) - base
print(f"uncompressed answer NLL {base:.3f} nats/token")
print("| press | " + " | ".join(cols) + " |")
print("|---" * (len(cols) + 1) + "|")
for name, v in rows.items():
    print(f"| {name} | " + " | ".join(f"{v[c]:+.3f}" if c in v else "" for c in cols) + " |")
PY
