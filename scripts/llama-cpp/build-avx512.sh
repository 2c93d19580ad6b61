#!/usr/bin/env bash
# A second llama.cpp build for the speed table only (benches/speed_vs_llama_cpp.sh): the same
# source as scripts/llama-cpp/build.sh (run that first), compiled for AVX-512 with VNNI, VBMI and
# BF16 — what `pip install llama-cpp-python` (GGML_NATIVE) gives on a CPU that has them — without
# AMX (whose tiles fault in ggml's threads on this project's machines). Into
# $CACHE/build-avx512; a no-op once built; prints that directory's bin/ last. Refuses (exit 1) on
# a CPU without AVX-512 VNNI. The tests keep using the AVX2 build.
set -euo pipefail
grep -qw avx512_vnni /proc/cpuinfo || { echo "this CPU has no AVX-512 VNNI: no AVX-512 build of llama.cpp here" >&2; exit 1; }
cache=$(bash "$(dirname "$0")/build.sh" | tail -1)
flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
    -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON
    -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON
    -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_APP=OFF)
stamp="$cache/build-avx512/complete"
if [ ! -e "$stamp" ] || [ "$(cat "$stamp")" != "${flags[*]}" ]; then
    echo "[llama.cpp] building the AVX-512 variant with $(nproc) jobs" >&2
    export PATH="$cache/venv/bin:$PATH"
    cmake -S "$cache/src/vendor/llama.cpp" -B "$cache/build-avx512" -G Ninja "${flags[@]}" >"$cache/build-avx512.log" 2>&1 || { tail -20 "$cache/build-avx512.log" >&2; exit 1; }
    cmake --build "$cache/build-avx512" -j "$(nproc)" --target llama llama-bench >>"$cache/build-avx512.log" 2>&1 || { tail -30 "$cache/build-avx512.log" >&2; exit 1; }
    echo "${flags[*]}" >"$stamp"
fi
echo "$cache/build-avx512/bin"
