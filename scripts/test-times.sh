#!/usr/bin/env bash
# Each test binary's wall time from a `cargo test` log (libtest's "finished in" after cargo's
# "Running"), slowest first, then their sum: `bash scripts/test-times.sh target/test-output.log`.
set -euo pipefail
awk '
    /^ *Running / { name = ($2 == "unittests") ? $3 : $2 }
    /^ *Doc-tests / { name = "doc-tests " $2 }
    /^test result:/ { t = $NF; sub(/s$/, "", t); printf "%9.1f s  %s\n", t, name }
' "$1" | sort -rn | awk '{ print "[ci] test time" $0; total += $1 } END { printf "[ci] test time%9.1f s  all %d test binaries\n", total, NR }'
