#!/bin/bash
# `stream --policy h2o` against the independent PyTorch loop (tests/fixtures/make_score_stream_reference.py)
# on the same tokens, in one run: SmolLM2-135M, 1,000 tokens of Pride and Prejudice, W = 128, 2 threads.
# Prints both tokens/s, their ratio, and the largest per-token NLL gap. Run after `cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-/work/venv-ref/bin/python}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
RAYON_NUM_THREADS=2 ./target/release/sinkscope stream -m smollm2-135m -f ../shared/corpora/pg1342_pride_and_prejudice.txt \
  --start-char 100000 --tokens ${TOKENS:-1000} --cache 128 --policy ${POLICY:-h2o} -o "$OUT/run" > /dev/null
"$PY" tests/fixtures/make_score_stream_reference.py --speed "$OUT/run/stream.json" smollm2
