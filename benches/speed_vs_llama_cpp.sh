#!/usr/bin/env bash
# docs/findings.md's speed table ("Speed"): sinkscope beside llama.cpp on the same GGUF files and token ids, one
# run of each item, 2 threads each. sinkscope: `cargo bench --bench speed` (bare forward, capture
# with every reducer and all-position NLL, f32 and --quantized, decoding, the stream simulator,
# --quantized's error); llama.cpp: the build of scripts/llama-cpp/build.sh (AVX2, what the tests
# use) and, where the CPU has AVX-512 VNNI, scripts/llama-cpp/build-avx512.sh (what a native pip
# install builds here), each through the Python bindings (benches/llama_cpp_speed.py: prompts
# with all or only the last logits, decoding) and its own llama-bench (pp at each length, tg128).
# Ratios are against the faster llama.cpp build of each row. Prints each side's JSON, then the table.
#   bash benches/speed_vs_llama_cpp.sh [MODELS=smollm2-135m,gemma3-270m] [LENGTHS=512,2048]
set -euo pipefail
cd "$(dirname "$0")/.."
MODELS=${1:-smollm2-135m,gemma3-270m}
LENGTHS=${2:-512,2048}
THREADS=${THREADS:-2}
export RAYON_NUM_THREADS=$THREADS
cache=$(bash scripts/llama-cpp/build.sh | tail -1)
builds=("avx2:$cache/build/bin")
if avx512=$(bash scripts/llama-cpp/build-avx512.sh 2>/dev/null | tail -1); then builds+=("avx512:$avx512"); fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
cargo build --release --benches --bins --quiet
for m in ${MODELS//,/ }; do
  gguf=$(./target/release/sinkscope models --json | python3 -c "import json,sys; print(next(x['found'] for x in json.load(sys.stdin)['models'] if x['alias']=='$m'))")
  cargo bench --bench speed --quiet -- --model "$m" --tokens "$LENGTHS" --tokens-out "$out/$m.ids.json" > "$out/$m.sinkscope.json"
  echo "$m sinkscope: $(cat "$out/$m.sinkscope.json")"
  for b in "${builds[@]}"; do
    isa=${b%%:*} bin=${b#*:}
    LLAMA_CPP_LIB_PATH="$bin" "$cache/venv/bin/python" benches/llama_cpp_speed.py --model "$gguf" \
      --ids "$out/$m.ids.json" --lengths "$LENGTHS" --threads "$THREADS" > "$out/$m.llama-$isa.json"
    "$bin/llama-bench" -m "$gguf" -p "$LENGTHS" -n 128 -t "$THREADS" -r 1 -o json 2>/dev/null \
      | python3 -c "import json,sys; print(json.dumps({f\"{b['n_prompt']},{b['n_gen']}\": b['avg_ts'] for b in json.load(sys.stdin)}))" > "$out/$m.llama-bench-$isa.json"
    echo "$m llama.cpp $isa: $(cat "$out/$m.llama-$isa.json") llama-bench $(cat "$out/$m.llama-bench-$isa.json")"
  done
done
python3 - "$out" "$MODELS" "$LENGTHS" "${builds[@]%%:*}" <<'EOF'
import json, sys
out, models, lengths, isas = sys.argv[1], sys.argv[2].split(","), sys.argv[3].split(","), sys.argv[4:]
def r(x):
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"
for m in models:
    s = json.load(open(f"{out}/{m}.sinkscope.json"))
    ll = {i: json.load(open(f"{out}/{m}.llama-{i}.json")) for i in isas}
    lb = {i: json.load(open(f"{out}/{m}.llama-bench-{i}.json")) for i in isas}
    print(f"\n{m} (tokens/s, {s['threads']} threads; ratio = sinkscope / the faster llama.cpp build)\n")
    print("| | sinkscope f32 | sinkscope --quantized | " + " | ".join(f"llama.cpp {i}" for i in isas) + " | f32 ratio | --quantized ratio |")
    print("|---|---:|---:|" + "---:|" * len(isas) + "---:|---:|")
    def row(name, a, b, theirs):
        best = max(theirs)
        print(f"| {name} | {r(a)} | {r(b)} | " + " | ".join(r(c) for c in theirs) + f" | {a / best:.2f}× | {b / best:.2f}× |")
    for t in lengths:
        f, q = s["prompt"]["f32"][t], s["prompt"]["quantized"][t]
        pp = ", ".join(f"{i} {r(lb[i].get(f'{t},0', float('nan')))}" for i in isas)
        row(f"prompt {t}: forward without the output head / llama.cpp last logits (llama-bench pp{t}: {pp})", f["forward_tok_s"], q["forward_tok_s"], [ll[i]["prompt"][t]["last_logits_tok_s"] for i in isas])
        row(f"prompt {t}: every position scored (capture: every reducer + NLL / all logits)", f["capture_tok_s"], q["capture_tok_s"], [ll[i]["prompt"][t]["all_logits_tok_s"] for i in isas])
    d = s["decode_tok_s"]
    tg = ", ".join(f"{i} {r(lb[i].get('0,128', float('nan')))}" for i in isas)
    row(f"decode, one token at a time with its logits (llama-bench tg128: {tg})", d["f32"], d["quantized"], [ll[i]["decode_tok_s"] for i in isas])
    print(f"| stream simulator, sink S = 4, W = 256, {max(map(int, lengths))} tokens (f32) | {r(s['stream_sink4_w256_tok_s'])} | | " + " | " * len(isas) + " |")
    e = s["quantized_error"]
    print(f"\n--quantized against f32 ({e['tokens']} tokens): perplexity {e['ppl_quantized']:.3f} vs {e['ppl_f32']:.3f}, "
          f"max |Δlogit| {e['max_abs_logit_gap']:.3f}, α_0 per head |Δ| max {e['alpha0_max_abs_gap']:.4f} mean {e['alpha0_mean_abs_gap']:.4f} "
          f"({e['heads']} heads); llama.cpp's own perplexity on these tokens: " + ", ".join(f"{i} {ll[i]['perplexity']['ppl']:.3f}" for i in isas) + f"; weights {s['weight_bytes']['quantized'] / 2**20:,.0f} MiB vs {s['weight_bytes']['f32'] / 2**20:,.0f} MiB")
EOF
