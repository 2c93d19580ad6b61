#!/usr/bin/env bash
# The census across designs on every model the tests have (docs/findings.md): a `survey` of the
# three real models (stories260K, SmolLM2-135M, Gemma 3 270M) and every tiny seeded family under
# tests/fixtures/arch, with short sweeps (160 tokens, W = 64) since the census comes from the
# probe-set diagnosis. Usage:
#   bash scripts/census/all.sh OUT     # writes OUT/survey.md (its "Census across designs" table)
set -euo pipefail
out=$1
bin=${SINKSCOPE_BIN:-target/release/sinkscope}
models=(-m stories260k -m smollm2-135m -m gemma3-270m)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
for d in tests/fixtures/arch/*/; do
  case "$d" in *llama_bf16*|*llama_f16*|*qwen3_f16*) continue ;; esac  # the same weights as llama_f32 / qwen3
  # A model analyze refuses is left out, and said so.
  if err=$("$bin" analyze -m "${d%/}" --no-ablation -o "$tmp/$(basename "$d")" 2>&1 >/dev/null); then
    models+=(-m "${d%/}")
  else
    echo "left out ${d%/}: ${err##*error: }" >&2
  fi
done
"$bin" survey "${models[@]}" --tokens 160 --cache 64 --sinks 0,4 -o "$out"
sed -n '/## Census across designs/,/^Sink_0\^ε:/p' "$out/survey.md"
