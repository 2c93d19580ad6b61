#!/usr/bin/env bash
# sinkscope capture vs HF transformers (eager, output_attentions=True, float32) on the same tokens
# of a book, for a model whose GGUF both load (default: the gemma3-270m alias; fetch it first).
# Each side loads the model once and times REPEAT forwards (sinkscope: `capture` with every
# layer's pattern reduced and all-position NLL; HF: attentions, all-position logits and their log-softmax NLL);
# ROUNDS rounds taking turns to go first, so machine drift hits both alike. Prints each side's
# JSON lines; compare medians and peak RSS.
#   bash benches/capture_vs_hf_gguf.sh [ALIAS=gemma3-270m] [TOKENS=512] [REPEAT=3] [ROUNDS=2]
set -euo pipefail
cd "$(dirname "$0")/.."
M=${1:-gemma3-270m}
T=${2:-512}
R=${3:-3}
ROUNDS=${4:-2}
PYTHON=${PYTHON:-/work/venv-ref/bin/python}
out=$(mktemp -d)
cargo build --release --benches --bins --quiet
gguf=$(./target/release/sinkscope models --json | "$PYTHON" -c "import json,sys; print(next(m['found'] for m in json.load(sys.stdin)['models'] if m['alias']=='$M'))")
cargo bench --bench capture --quiet -- --model "$M" --tokens "$T" --repeat 1 --tokens-out "$out/tokens.json" > /dev/null
for round in $(seq "$ROUNDS"); do
  ours() { echo -n "sinkscope: "; cargo bench --bench capture --quiet -- --model "$M" --tokens "$T" --repeat "$R"; }
  hf() { echo -n "hf: "; "$PYTHON" benches/hf_forward_gguf.py --gguf "$gguf" --tokens "$out/tokens.json" --repeat "$R" --threads "$(nproc)" 2>/dev/null | tail -1; }
  if (( round % 2 )); then ours; hf; else hf; ours; fi
done
