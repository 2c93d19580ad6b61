#!/usr/bin/env bash
# Real-terminal smoke test of `sinkscope dash`: runs the binary in a detached tmux session at
# 160×48, sends keys through every view (help, zoom, focus, Enter on the grid, export, resize,
# quit), captures the pane after each, and checks the expected text is on screen. Exits non-zero
# naming the view that failed; prints SKIP and exits 0 when tmux is absent.
#
#   scripts/tui_smoke.sh [RUN_DIR]          (default: tests/fixtures/run-stories260k)
#   SINKSCOPE_BIN=path/to/sinkscope         (default: target/release/sinkscope)
set -u

RUN=${1:-tests/fixtures/run-stories260k}
BIN=${SINKSCOPE_BIN:-target/release/sinkscope}

if ! command -v tmux >/dev/null 2>&1; then
    echo "SKIP: tmux is not installed, so the real-terminal smoke test cannot run (apt-get install tmux)"
    exit 0
fi
if [ ! -x "$BIN" ]; then
    echo "FAIL: no sinkscope binary at $BIN (cargo build --release, or set SINKSCOPE_BIN)"
    exit 1
fi
if [ ! -d "$RUN" ]; then
    echo "FAIL: $RUN is not a run directory"
    exit 1
fi

# A private tmux server (never the user's sessions) and a scratch copy of the run, so the export
# key writes there and not into a committed fixture.
SOCK="sinkscope-smoke-$$"
WORK=$(mktemp -d)
cleanup() { tmux -L "$SOCK" kill-server >/dev/null 2>&1; rm -rf "$WORK"; }
trap cleanup EXIT
cp -r "$RUN" "$WORK/run"
HAS_STREAM=0; [ -f "$WORK/run/stream.json" ] && HAS_STREAM=1
HAS_ANALYSIS=0; [ -f "$WORK/run/report.json" ] && HAS_ANALYSIS=1

t() { tmux -L "$SOCK" "$@"; }
t -f /dev/null new-session -d -s dash -x 160 -y 48 "$BIN dash '$WORK/run'; echo DASH-EXITED \$?; sleep 30"

PANE=""
# expect VIEW PATTERN...: waits (≤10 s) until every fixed-string PATTERN is on screen.
expect() {
    local view=$1; shift
    local pat missing
    for _ in $(seq 1 100); do
        PANE=$(t capture-pane -p -t dash 2>/dev/null)
        missing=""
        for pat in "$@"; do
            grep -qF -- "$pat" <<<"$PANE" || { missing=$pat; break; }
        done
        [ -z "$missing" ] && { echo "PASS: $view"; return 0; }
        sleep 0.1
    done
    echo "FAIL: view '$view': expected \"$missing\" on screen; the pane shows:"
    echo "$PANE"
    exit 1
}
# absent VIEW PATTERN: checks PATTERN is no longer on screen (after the screen settles).
absent() {
    local view=$1 pat=$2
    for _ in $(seq 1 50); do
        PANE=$(t capture-pane -p -t dash 2>/dev/null)
        grep -qF -- "$pat" <<<"$PANE" || { echo "PASS: $view"; return 0; }
        sleep 0.1
    done
    echo "FAIL: view '$view': \"$pat\" still on screen:"
    echo "$PANE"
    exit 1
}
keys() { t send-keys -t dash "$@"; }

expect "overview" "1 Overview" "6 Streaming" "Model · text · run" "Findings" "Sink-count recommendation"

keys 2
expect "grid" "α_0 per head" "Selected head" "Enter: open in heatmap"
keys Right Down .
expect "grid (k = 1)" "α_1 per head" "k=1"
keys c
if [ "$HAS_ANALYSIS" = 1 ]; then expect "grid (by class)" "head class (report.json)" " sink "; else expect "grid (by class)" "no head classes"; fi
keys c ,
expect "grid (back to α_0)" "α_0 per head"

keys Enter
expect "heatmap (Enter on the grid)" "query ↓ × key →" "Legend · cursor" "zoom ×1" "full map"
keys +
expect "heatmap (zoom in)" "zoom ×2"
keys + + -
expect "heatmap (×2, ×4, ×8, back to ×4)" "zoom ×4"
keys f l
expect "heatmap (focus, log)" "focus: first 16 keys" "log ·" "log scale, 4 decades"
keys Left Up S-Up 0
expect "heatmap (cursor, reset zoom)" "zoom ×1" "query" "key"
keys ']'
expect "heatmap (next head)" "Legend · cursor"

keys 4
expect "tokens" "Receives most" "Token " "scope"
keys Right Right Down a
expect "tokens (scope: layer)" "mean of layer"
keys a m
expect "tokens (all heads, mass)" "mean of all heads" "column mass / T"

keys 5
expect "activations" "Per layer (resid_post)" "Massive dims and positions" "layer"
keys Down
expect "activations (next layer)" "▶"

keys 6
if [ "$HAS_STREAM" = 1 ]; then
    expect "streaming" "Policies" "Recommendation" "rolling 32 tokens"
    keys Down w
    expect "streaming (window 8)" "rolling 8 tokens"
else
    expect "streaming (no stream.json)" "No stream.json in this run" "sinkscope recommend"
fi

keys '?'
expect "help overlay" "Keys (? or Esc to close)" "Everywhere" "Heatmap" "quit"
keys Escape
absent "help closed" "Keys (? or Esc to close)"

keys 2 e
expect "export (grid)" "exported" "grid-alpha.csv"
[ -s "$WORK/run/exports/grid-alpha.csv" ] || { echo "FAIL: view 'export': $WORK/run/exports/grid-alpha.csv was not written"; exit 1; }

t resize-window -t dash -x 100 -y 30 >/dev/null 2>&1
keys 3
expect "resize to 100×30" "Heatmap" "query ↓ × key →"

keys 1 q
expect "quit" "DASH-EXITED 0"
echo "PASS: all views ($RUN)"
