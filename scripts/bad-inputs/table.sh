#!/usr/bin/env bash
# The bad-input table of issue 43: each kind of bad input through the commands that take it, run
# by two builds of sinkscope; prints a Markdown row per case with each build's exit code and the
# first line it wrote to stderr ("(blocks)" when it was still running after the time limit).
#
#   bash scripts/bad-inputs/table.sh BEFORE_BINARY AFTER_BINARY > table.md
#
# Needs ../shared/models (stories260K.gguf, stories260K.bin, tok512.bin) and ../shared/corpora.
set -u
before=$1 after=$2
repo=$(cd "$(dirname "$0")/../.." && pwd)
shared=${SINKSCOPE_SHARED:-$repo/../shared}
export SINKSCOPE_MODELS=$shared/models
work=$(mktemp -d /tmp/sinkscope-bad-inputs-XXXXXX)
trap 'rm -rf "$work"' EXIT
gguf=$shared/models/stories260K.gguf bin=$shared/models/stories260K.bin tok=$shared/models/tok512.bin
text=$shared/corpora/tinystories_val_subset.txt

# Inputs: a GGUF with one metadata value replaced, a llama2.c file with a 3e38 embedding row, a
# FIFO, traces with a bad record after a good one, a run of another model.
patch_gguf() { # name key struct-format value
  python3 - "$gguf" "$work/$1" "$2" "$3" "$4" <<'PY'
import struct, sys
src, dst, key, fmt, value = sys.argv[1:]
b = bytearray(open(src, 'rb').read())
at = b.index(key.encode()) + len(key) + 4
v = float(value) if fmt == 'f' else int(value)
b[at:at + struct.calcsize('<' + fmt)] = struct.pack('<' + fmt, v)
open(dst, 'wb').write(b)
PY
}
patch_gguf eps.gguf llama.attention.layer_norm_rms_epsilon f inf
patch_gguf bos.gguf tokenizer.ggml.bos_token_id I 100000
patch_gguf kv0.gguf llama.attention.head_count_kv I 0
python3 - "$bin" "$work/big.bin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], 'rb').read())
dim = struct.unpack('<i', b[:4])[0]
row = 28 + dim * 4
b[row:row + 4 * dim] = struct.pack('<f', 3e38) * dim
open(sys.argv[2], 'wb').write(b)
PY
mkfifo "$work/fifo"
: > "$work/empty.jsonl"
printf '{"logprob": -0.5, "cache_len": 4}\n{"logprob": -0.3, "cache_len": -2}\n' > "$work/negative.jsonl"
printf 'token,logprob\na,-0.1\nb,-0.2,7\nc,-0.3\n' > "$work/ragged.csv"
printf '%s\n' '{"id": "c", "choices": [{"delta": {"content": "a"}, "logprobs": {"content": [{"token": "a", "logprob": -0.5}]}}]}' \
  '{"id": "c", "choices": [{"delta": {"content": " the"}, "logprobs": null}]}' > "$work/chunk.jsonl"
printf '   \n' > "$work/blank.txt"
mkdir -p "$work/badrun"
for f in capture.json report.json stream.json; do cp "$repo/tests/fixtures/run-stories260k/$f" "$work/badrun/"; done
python3 - "$work/badrun/capture.json" <<'PY'
import json, sys
record = json.load(open(sys.argv[1]))
record["nll"]["perplexity"] = -5.0
json.dump(record, open(sys.argv[1], "w"))
PY

row() { # kind, then the command line (OUT: a fresh output directory per build)
  local kind=$1; shift
  local cells=()
  for b in "$before" "$after"; do
    rm -rf "$work/out" "$work/other" "$work/runcopy"
    cp -r "$work/badrun" "$work/runcopy"
    "$before" capture -m stories260k -p "Once upon a time" -o "$work/other" >/dev/null 2>&1
    local args=("${@//OUT/$work/out}")
    args=("${args[@]//OTHER/$work/other}")
    args=("${args[@]//RUNCOPY/$work/runcopy}")
    timeout 10 "$b" "${args[@]}" >/dev/null 2>"$work/err" </dev/null
    local rc=$?
    local first
    first=$(grep -v '^\s*$' "$work/err" | head -1 | sed "s|$work/||g; s|$shared/||g" | cut -c1-150)
    [ $rc -eq 124 ] && first="(still running after 10 s: killed)"
    [ -e "$work/out" ] && first="$first [left $(ls -A "$work/out" | wc -l) entries in -o]"
    [ -e "$work/runcopy/tables" ] && first="$first [published tables]"
    cells+=("$rc: ${first//|/\\|}")
  done
  local shown="${*//$work\//}"
  printf '| %s | `%s` | %s | %s |\n' "$kind" "${shown//$shared\//}" "${cells[0]}" "${cells[1]}"
}

echo '| kind | command | before (exit: first line) | after (exit: first line) |'
echo '|---|---|---|---|'
row "GGUF value out of range" info "$work/eps.gguf"
row "GGUF value out of range" capture -m "$work/eps.gguf" -p "Once upon a time" -o OUT
row "GGUF id outside the vocabulary" capture -m "$work/bos.gguf" -p "Once upon a time" -o OUT
row "GGUF count of 0" info "$work/kv0.gguf"
row "overflow (3e38 embedding row)" capture -m "$work/big.bin" --tokenizer "$tok" -p "Once upon a time" --no-nll -o OUT
row "FIFO as a model" info "$work/fifo"
row "FIFO as a text" capture -m stories260k -f "$work/fifo" -o OUT
row "device as a text" capture -m stories260k -f /dev/zero -o OUT
row "count flag of 0" capture -m stories260k -p x --top-k 0 -o OUT
row "count flag of 0" heads -m stories260k -f "$text" --recent 0 -o OUT
row "size beyond memory" needle -m stories260k --lengths 99999999 -o OUT
row "--save-tensors into no directory" capture -m stories260k -p x -o OUT --save-tensors "$work/no/such/t.safetensors"
row "empty trace, --follow" watch "$work/empty.jsonl" --follow --idle-exit 1
row "record out of range mid-trace" watch "$work/negative.jsonl"
row "ragged CSV" watch "$work/ragged.csv"
row "chunk without logprobs mid-trace" watch "$work/chunk.jsonl"
row "another model's directory" stream -m "$bin" -f "$text" --tokens 300 --policy dense -o OTHER
row "another model's directory" heads -m "$bin" -f "$text" --tokens 300 -o OTHER
row "another model's directory" quant -m "$bin" -f "$text" -o OTHER
row "record out of range" export RUNCOPY
row "empty filler text" needle -m stories260k --filler "$work/blank.txt" --lengths 200 -o OUT
