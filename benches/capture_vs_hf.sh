#!/usr/bin/env bash
# sinkscope capture vs HF transformers (eager, output_attentions=True) on the same SmolLM2 tokens,
# in one run. Needs a Python venv with torch + transformers + gguf (default /work/venv; set PYTHON).
#   bash benches/capture_vs_hf.sh [TOKENS=512] [REPEAT=5]
# Prints both JSON lines and the ratios (HF time / sinkscope time; > 1 means sinkscope is faster).
set -euo pipefail
cd "$(dirname "$0")/.."
T=${1:-512}
R=${2:-5}
PYTHON=${PYTHON:-/work/venv/bin/python}
tok=$(mktemp --suffix=.json)
cargo bench --bench capture --quiet -- --tokens "$T" --repeat "$R" --tokens-out "$tok" > /tmp/sinkscope_bench_nll.json
cargo bench --bench capture --quiet -- --tokens "$T" --repeat "$R" --no-nll > /tmp/sinkscope_bench_nonll.json
"$PYTHON" benches/hf_capture_reference.py --tokens "$tok" --threads "$(nproc)" --repeat "$R" 2>/dev/null | tail -1 > /tmp/hf_bench.json
cat /tmp/sinkscope_bench_nll.json /tmp/sinkscope_bench_nonll.json /tmp/hf_bench.json
python3 - <<'PY'
import json
ours = json.load(open("/tmp/sinkscope_bench_nll.json"))
ours_nonll = json.load(open("/tmp/sinkscope_bench_nonll.json"))
hf = json.load(open("/tmp/hf_bench.json"))
for name, o in [("capture (with NLL; HF also computes all logits)", ours), ("capture --no-nll", ours_nonll)]:
    print(f"{name}: sinkscope {o['wall_s_median']:.3f}s median / {o['wall_s_min']:.3f}s min; "
          f"HF {hf['wall_s_median']:.3f}s / {hf['wall_s_min']:.3f}s -> "
          f"speed ratio {hf['wall_s_median']/o['wall_s_median']:.2f}x (median), {hf['wall_s_min']/o['wall_s_min']:.2f}x (min)")
print(f"peak RSS: sinkscope {ours['peak_rss_mb']:.0f} MB, HF {hf['peak_rss_mb']:.0f} MB "
      f"({hf['peak_rss_mb']/ours['peak_rss_mb']:.2f}x lower); load: sinkscope {ours['load_s']:.2f}s, HF {hf['load_s']:.2f}s")
print(f"sanity, mean attention on key 0 over layers and heads: sinkscope {ours['sink_mean']:.6f}, HF {hf['sink_mean']:.6f}")
PY
