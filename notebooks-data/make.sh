#!/bin/bash
# Regenerates notebooks-data/ from sinkscope's own outputs: the demo run (SmolLM2-135M) and the
# committed stories260K run. Copies tables/*.parquet, figures/*.png and index.md (without the SVG
# links; SVGs are not committed). Run from the repository root after `cargo build --release`.
set -euo pipefail
S=./target/release/sinkscope
copy() { # run-dir destination
  rm -rf "$2" && mkdir -p "$2/figures"
  cp -r "$1/tables" "$2/"
  cp "$1"/figures/*.png "$2/figures/"
  grep -v '^\[SVG\](figures/' "$1/index.md" > "$2/index.md"
}
$S demo -o /tmp/sinkscope-notebooks-demo
copy /tmp/sinkscope-notebooks-demo notebooks-data/smollm2-135m
rm -rf /tmp/sinkscope-notebooks-stories && cp -r tests/fixtures/run-stories260k /tmp/sinkscope-notebooks-stories
$S export /tmp/sinkscope-notebooks-stories
copy /tmp/sinkscope-notebooks-stories notebooks-data/stories260k
