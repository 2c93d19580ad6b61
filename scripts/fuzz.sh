#!/usr/bin/env bash
# Coverage-guided fuzzing on stable Rust: builds examples/fuzz with LLVM SanitizerCoverage (inline
# 8-bit counters on every edge of sinkscope and its dependencies; tests/fuzzing/coverage.rs reads
# them) into target/fuzz-cov, then runs it. --target keeps the instrumentation off build scripts
# and proc macros (they run in the compiler, where the counters' callbacks do not exist).
#   scripts/fuzz.sh [TARGET|all] [--execs N] [--seed S]
set -euo pipefail
cd "$(dirname "$0")/.."
host=$(rustc -vV | sed -n 's/^host: //p')
export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=3 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table"
export CARGO_TARGET_DIR=target/fuzz-cov
cargo build --release --example fuzz --target "$host" --no-default-features 2>&1 | tail -2
exec "target/fuzz-cov/$host/release/examples/fuzz" "$@"
