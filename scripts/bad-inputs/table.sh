#!/usr/bin/env bash
# The bad-input table of issue 43: every case of scripts/bad-inputs/cases.txt (kind | what the
# refusal must say | command line) run by one or two builds of sinkscope; prints a Markdown row
# per case with each build's exit code and the first line it wrote to stderr ("still running
# after 10 s: killed" when it blocked), and what it left behind. tests/bad_inputs.rs runs the same
# cases and holds the current build to them.
#
#   bash scripts/bad-inputs/table.sh [BEFORE_BINARY] AFTER_BINARY > table.md
#
# Needs ../shared/models (stories260K.gguf, stories260K.bin, tok512.bin), ../shared/corpora,
# python3, mkfifo and flock.
set -u
repo=$(cd "$(dirname "$0")/../.." && pwd)
binaries=("$@")
shared=${SINKSCOPE_SHARED:-$repo/../shared}
export SINKSCOPE_MODELS=$shared/models
work=$(mktemp -d /tmp/sinkscope-bad-inputs-XXXXXX)
trap 'rm -rf "$work"' EXIT
gguf=$shared/models/stories260K.gguf
python3 "$repo/scripts/bad-inputs/make_inputs.py" "$shared" "$repo/tests/fixtures/run-stories260k" "$work" || exit 2

# Replaces each @name of a case's words by that name under $work.
expand() {
  local w
  for w in "$@"; do
    case $w in
      @*) printf '%s\n' "$work/${w#@}" ;;
      *) printf '%s\n' "$w" ;;
    esac
  done
}

# One build on one case: "exit: first line [what it left]".
cell() {
  local b=$1; shift
  rm -rf "$work/out" "$work/other" "$work/held" "$work/no"
  python3 "$repo/scripts/bad-inputs/make_inputs.py" --runs "$work" "$repo/tests/fixtures/run-stories260k" || exit 2
  "$b" capture -m "$gguf" -p "Once upon a time" -o "$work/other" >/dev/null 2>&1
  "$b" capture -m "$work/stories260K.bin" -p "Once upon a time" -o "$work/held" >/dev/null 2>&1
  local before_other before_held
  before_other=$(ls -l --time-style=full-iso "$work/other" | md5sum)
  before_held=$(ls -l --time-style=full-iso "$work/held" | md5sum)
  mapfile -t args < <(expand "$@")
  flock "$work/held" -c "timeout 10 \"$b\" $(printf '%q ' "${args[@]}") >/dev/null 2>\"$work/err\" </dev/null"
  local rc=$?
  local first
  # The error line when there is one (progress may come first), else the first line.
  first=$( (grep '^error:' "$work/err" || grep -v '^\s*$' "$work/err") | head -1 | sed "s|$work/||g; s|$shared/||g; s|$repo/||g" | cut -c1-150)
  [ $rc -eq 124 ] && first="(still running after 10 s: killed)"
  [ -e "$work/out" ] && first="$first [left $(ls -A "$work/out" | wc -l) entries in -o]"
  [ -e "$work/no" ] && first="$first [left no/]"
  [ "$(ls -l --time-style=full-iso "$work/other" | md5sum)" != "$before_other" ] && first="$first [changed the other model's run]"
  [ "$(ls -l --time-style=full-iso "$work/held" | md5sum)" != "$before_held" ] && first="$first [wrote into the held run]"
  for r in ppl alpha trunc needle quant kl; do [ -e "$work/$r/tables" ] && first="$first [published tables]"; done
  printf '%s' "$rc: ${first//|/\\|}"
}

if [ ${#binaries[@]} -eq 2 ]; then
  echo '| kind | command | before (exit: first line) | after (exit: first line) |'
  echo '|---|---|---|---|'
else
  echo '| kind | command | exit: first line |'
  echo '|---|---|---|'
fi
while IFS='|' read -r kind _ command; do
  kind=$(echo "$kind" | sed 's/ *$//')
  read -ra words <<< "$command"
  cells=""
  for b in "${binaries[@]}"; do cells="$cells $(cell "$b" "${words[@]}") |"; done
  printf '| %s | `%s` |%s\n' "$kind" "$(echo "$command" | sed 's/^ *//')" "$cells"
done < "$repo/scripts/bad-inputs/cases.txt"
