#!/usr/bin/env bash
# Builds the llama.cpp reference engine once per machine into a cache outside the repository:
# the llama.cpp vendored by the package registry's `llama-cpp-python` source distribution (pinned
# below, checked against its SHA-256), compiled on CPU with CMake into a shared `libllama` (which
# the sdist's own Python bindings load), `llama-server`, `llama-perplexity` and `llama-bench` (the
# speed table, benches/speed_vs_llama_cpp.sh), plus a Python venv
# holding those bindings and their dependencies. A no-op when the cache is complete; prints the
# cache directory last (callers read it with `tail -1`).
#
#   scripts/llama-cpp/build.sh          # build when missing
#   scripts/llama-cpp/build.sh --check  # print the cache directory if built, else exit 1
#   SINKSCOPE_LLAMA_CPP=DIR             # where the cache lives (default: user cache)
set -euo pipefail
check_only=false
[ "${1:-}" = "--check" ] && check_only=true

version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e

cache="${SINKSCOPE_LLAMA_CPP:-${XDG_CACHE_HOME:-$HOME/.cache}/sinkscope/llama-cpp-python-$version}"
# CPU code for AVX2 + FMA + F16C, the instruction set sinkscope's own kernels use, not `-march=native`:
# on this project's machines -march=native enables AMX, whose tile instructions fault (SIGILL) in
# ggml's worker threads, and a cache built for one host must run on the next.
flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
    -DGGML_F16C=ON -DGGML_BMI2=ON -DGGML_OPENMP=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
    -DLLAMA_BUILD_APP=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON)
targets=(llama llama-server llama-perplexity llama-bench)
stamp="$cache/complete"
if [ -e "$stamp" ] && [ "$(cat "$stamp")" = "${flags[*]} ${targets[*]}" ]; then
    echo "$cache"
    exit 0
fi
if $check_only; then
    echo "llama.cpp is not built in $cache: run scripts/llama-cpp/build.sh (once per machine, ~15 min on 2 cores)" >&2
    exit 1
fi
rm -f "$stamp"
start=$SECONDS
mkdir -p "$cache"
cd "$cache"

say() { echo "[llama.cpp] $*" >&2; }

if [ ! -x venv/bin/cmake ]; then
    say "creating the Python environment (cmake, ninja, the bindings' dependencies) from the registry"
    rm -rf venv
    python3 -m venv venv
    venv/bin/pip install -q cmake ninja numpy typing-extensions diskcache jinja2
fi
if [ ! -d src ]; then
    say "fetching llama-cpp-python $version's source distribution (77 MB) through pip"
    rm -rf sdist.part && mkdir sdist.part
    venv/bin/pip download -q --no-deps --no-binary llama-cpp-python "llama-cpp-python==$version" -d sdist.part
    got=$(sha256sum sdist.part/llama_cpp_python-$version.tar.gz | cut -d' ' -f1)
    if [ "$got" != "$sha256" ]; then
        echo "llama-cpp-python sdist: SHA-256 $got, expected $sha256; not using it" >&2
        exit 1
    fi
    rm -rf src.part && mkdir src.part
    tar xzf sdist.part/llama_cpp_python-$version.tar.gz -C src.part --strip-components=1
    mv src.part src
    rm -rf sdist.part
fi
# The sdist's bindings, used as they are: they load libllama from LLAMA_CPP_LIB_PATH.
site=$(venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
rm -rf "$site/llama_cpp" && cp -r src/llama_cpp "$site/llama_cpp"

say "building llama.cpp (CPU: AVX2, FMA, F16C) with $(nproc) jobs; this takes a while once per machine"
export PATH="$cache/venv/bin:$PATH"
cmake -S src/vendor/llama.cpp -B build -G Ninja "${flags[@]}" >build.log 2>&1 || { tail -20 build.log >&2; exit 1; }
cmake --build build -j "$(nproc)" --target "${targets[@]}" >>build.log 2>&1 || {
    tail -30 build.log >&2
    exit 1
}
LLAMA_CPP_LIB_PATH="$cache/build/bin" venv/bin/python -c 'import llama_cpp; llama_cpp.llama_backend_init()' || {
    say "the bindings cannot load the built libllama"
    exit 1
}
echo "${flags[*]} ${targets[*]}" >"$stamp"
say "built in $((SECONDS - start)) s"
echo "$cache"
