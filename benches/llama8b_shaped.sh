#!/usr/bin/env bash
# A model as large as users run: a seeded random-weight GGUF shaped like Llama-3.1-8B (Q4_0,
# 4.5 GB, benches/make_llama8b_gguf.py, generated into $DIR and never committed), captured at
# T = 512 with --quantized and with --dtype bf16, and with no flag (sinkscope picks what fits and
# says so before loading). Prints each run's note, load and capture time, tokens/s and peak RSS.
#   bash benches/llama8b_shaped.sh [DIR]      (default /tmp; needs numpy and gguf-py)
set -euo pipefail
cd "$(dirname "$0")/.."
dir="${1:-/tmp}"
model="$dir/llama8b-q4_0.gguf"
text=tests/data/corpora/pg1342_pride_and_prejudice.txt
[ -f "$text" ] || text=../shared/corpora/pg1342_pride_and_prejudice.txt
cargo build --release --locked 2>&1 | tail -1
if [ ! -f "$model" ]; then
    llama_cpp="${XDG_CACHE_HOME:-$HOME/.cache}/sinkscope/llama-cpp-python-0.3.36/src/vendor/llama.cpp"
    py=python3; [ -x /work/venv-ref/bin/python ] && py=/work/venv-ref/bin/python
    $py benches/make_llama8b_gguf.py --out "$model" $([ -d "$llama_cpp" ] && echo --gguf-py "$llama_cpp")
fi
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores; MemAvailable $(awk '/MemAvailable/ {printf "%.1f GiB", $2/1048576}' /proc/meminfo)"
echo "| flags | note before loading | wall s | capture s | tokens/s | peak RSS GiB |"
for flags in "--quantized" "--dtype bf16" ""; do
    out=$(mktemp -d)
    log="$out/log"
    if ! /usr/bin/time -f "%e %M" -o "$out/time" ./target/release/sinkscope capture -m "$model" -f "$text" --max-tokens 512 $flags -o "$out/run" >"$log" 2>&1; then
        echo "| ${flags:-(none)} | failed: $(grep -v '^Command exited' "$log" | tail -1) | | | | |"
        rm -rf "$out"
        continue
    fi
    read -r wall rss_kib < <(tail -1 "$out/time")
    capture_s=$(grep -o 'captured [0-9]* tokens in [0-9.]*s' "$log" | grep -o '[0-9.]*s$' | tr -d s)
    note=$(grep -o '^note: .*' "$log" | sed 's/^note: [^:]*: //' || true)
    tps=$(awk -v s="$capture_s" 'BEGIN { printf "%.1f", 512 / s }')
    echo "| ${flags:-(none)} | ${note:--} | $wall | $capture_s | $tps | $(awk -v k="$rss_kib" 'BEGIN { printf "%.2f", k / 1048576 }') |"
    rm -rf "$out"
done
