#!/usr/bin/env python3
"""HF transformers side of docs/findings.md's long-context capture table: forward time and peak memory of
SmolLM2-135M-Instruct (float32, eager attention) keeping every attention pattern, for growing T.

Run from the repository root:

    /work/venv-ref/bin/python benches/long_context_hf.py --tokens 512,1024,2048,4096,8192

    options: --text FILE (default ../shared/corpora/pg1342_pride_and_prejudice.txt)
             --out F.json (default /tmp/long_context_hf.json)   --threads N (default 2)
             --base-gib G (model + runtime memory added to the estimate, default 1.5)
             --no-memory-check (run every T even if the estimate says it will not fit)
             --mem-cap-gib G / --no-rlimit (the child's RLIMIT_DATA cap; default MemAvailable)
             --timeout S (seconds per T, default 3600)

sinkscope's side of the same table (one process per T, the peak RSS is "Maximum resident set size"):

    /usr/bin/time -v target/release/sinkscope capture -m MODEL -f TEXT --max-tokens T -o DIR

What it measures, per T, each in a FRESH child process (so the peak RSS belongs to that T alone):
  * load SmolLM2 exactly as tests/fixtures/make_reference.py does (its load_model/MODEL_SPECS: the
    Q4_1 GGUF in ../shared/models dequantized by transformers, float32, attn_implementation="eager");
  * take the first T token ids of the text, tokenized (raw bytes decoded as UTF-8, no newline
    translation, no BOS) with the tokenizer the reference uses; if the text has fewer than T tokens
    its ids are repeated;
  * run ONE forward under torch.no_grad() with output_attentions=True, output_hidden_states=True,
    use_cache=False, and reduce what a capture keeps per head: for every layer and head the mean
    over queries of the attention on key 0 (alpha_0), so the patterns are really produced and used.
Recorded: model-load seconds, forward wall seconds (the model call only; the alpha_0 reduction is
timed separately as reduce_s), and the child's peak RSS (ru_maxrss from os.wait4 on that child, KiB
-> MiB; the child's own getrusage(RUSAGE_SELF) at its end is kept too).

Before each T the memory it needs is estimated -- the patterns of every layer (n_layers x n_heads x
T^2 x 4 bytes) plus ~3x one layer's patterns for the softmax temporaries, plus the causal mask, the
logits (T x vocab x 4), the hidden states and --base-gib for the model -- and compared with
MemAvailable in /proc/meminfo. If it does not fit, the T is not run ("skipped: ..."). A child that
dies (allocation error, MemoryError, killed by the OOM killer, timeout) is recorded "failed: <reason>".
The child's writable data is capped (RLIMIT_DATA) at MemAvailable so an allocation fails in the
child instead of the OOM killer picking some other process; --no-rlimit drops the cap.

Prints one line per T, then a Markdown table `| T | HF forward s | HF peak RSS MiB | status |`, and
writes everything (machine memory, versions, per-T results with alpha_0 per layer and head) as JSON.
"""

import argparse
import json
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO / "tests" / "fixtures"))
from make_reference import MODEL_SPECS, MODELS, load_model  # noqa: E402

MODEL = "smollm2"
SPEC = MODEL_SPECS[MODEL]
DEFAULT_TEXT = REPO.parent / "shared" / "corpora" / "pg1342_pride_and_prejudice.txt"
GIB = 1024**3
RESULT_MARK = "LONG_CONTEXT_HF_RESULT "


def meminfo():
    """MemTotal / MemAvailable in bytes."""
    out = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            out[key] = int(rest.split()[0]) * 1024
    return out


def model_dims():
    """n_layers, n_heads, vocab, d_model from the GGUF's metadata (no weights loaded)."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(str(MODELS), gguf_file=SPEC["gguf"])
    return dict(n_layers=cfg.num_hidden_layers, n_heads=cfg.num_attention_heads, vocab=cfg.vocab_size,
                d_model=cfg.hidden_size, n_ctx=getattr(cfg, "max_position_embeddings", None))


def estimate(T, dims, base_gib):
    """Bytes a forward at T needs: (patterns + temporaries, everything)."""
    L, H = dims["n_layers"], dims["n_heads"]
    layer = H * T * T * 4
    patterns = L * layer
    temporaries = 3 * layer  # scores, scores + mask, softmax of the layer being computed
    mask = T * T * 4  # float causal mask [1, 1, T, T]
    logits = T * dims["vocab"] * 4
    hidden = (L + 1) * T * dims["d_model"] * 4
    return patterns + temporaries, patterns + temporaries + mask + logits + hidden + base_gib * GIB


def token_ids(text_path, n):
    """The first n ids of the text (repeated if it is shorter), with the reference's tokenizer."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(MODELS / SPEC["tokenizer"]))
    text = Path(text_path).read_bytes().decode("utf-8")  # as sinkscope reads it: no newline translation
    ids = tok.encode(text).ids
    n_text = len(ids)
    if not ids:
        raise SystemExit(f"{text_path}: no tokens")
    if n_text < n:
        ids = ids * math.ceil(n / n_text)
    return ids[:n], n_text


# ---------------------------------------------------------------- child: one T in a fresh process


def child(args):
    import faulthandler

    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 PID` prints where a stuck child is
    import torch

    try:
        torch.set_num_threads(args.threads)
        ids = json.loads(Path(args.ids_file).read_text())[: args.child]
        T = len(ids)
        assert T == args.child, f"only {T} ids for T={args.child}"
        print(f"[T={T}] loading model", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        model = load_model(SPEC)
        load_s = time.perf_counter() - t0
        x = torch.tensor([ids], dtype=torch.long)
        print(f"[T={T}] forward", file=sys.stderr, flush=True)
        with torch.no_grad():
            t1 = time.perf_counter()
            out = model(input_ids=x, output_attentions=True, output_hidden_states=True, use_cache=False)
            forward_s = time.perf_counter() - t1
            t2 = time.perf_counter()
            atts = out.attentions
            L, H = len(atts), atts[0].shape[1]
            assert all(a.shape == (1, H, T, T) for a in atts), [tuple(a.shape) for a in atts[:1]]
            assert len(out.hidden_states) == L + 1
            alpha0 = torch.stack([a[0, :, :, 0].mean(dim=-1) for a in atts])  # [L, H]
            row_sum_err = max((a[0, :, -1, :].sum(-1) - 1).abs().max().item() for a in atts)
            reduce_s = time.perf_counter() - t2
        del out, atts
        res = dict(
            status="ok",
            T=T,
            load_s=load_s,
            forward_s=forward_s,
            reduce_s=reduce_s,
            peak_rss_mib_self=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            n_layers=L,
            n_heads=H,
            alpha0_mean=float(alpha0.mean()),
            alpha0_heads_over_half=int((alpha0 > 0.5).sum()),
            last_row_sum_max_err=row_sum_err,
            alpha0=[[round(float(v), 6) for v in row] for row in alpha0],
        )
    except (MemoryError, RuntimeError) as e:  # torch's CPU allocator raises RuntimeError
        msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
        res = dict(status=f"failed: {type(e).__name__}: {msg}"[:300], T=args.child,
                   peak_rss_mib_self=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(RESULT_MARK + json.dumps(res), flush=True)
    return 0 if res["status"] == "ok" else 1


# ---------------------------------------------------------------- parent


def run_one(T, ids_file, args, mem_cap):
    """Run T in a fresh child; returns the child's result dict plus peak_rss_mib from wait4."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(T), "--ids-file", ids_file,
           "--threads", str(args.threads)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))

    def limit():
        if mem_cap:
            resource.setrlimit(resource.RLIMIT_DATA, (mem_cap, mem_cap))

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, preexec_fn=limit, cwd=str(REPO))
        t0 = time.perf_counter()
        timed_out = False
        while True:
            pid, status, ru = os.wait4(p.pid, os.WNOHANG)
            if pid:
                break
            if args.timeout and time.perf_counter() - t0 > args.timeout:
                timed_out = True
                p.kill()  # only our own child, by its pid
                pid, status, ru = os.wait4(p.pid, 0)
                break
            time.sleep(0.2)
        wall = time.perf_counter() - t0
        rc = os.waitstatus_to_exitcode(status)
        p.returncode = rc  # already reaped: keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()

    res = None
    for line in stdout.splitlines():
        if line.startswith(RESULT_MARK):
            res = json.loads(line[len(RESULT_MARK):])
    if res is None:
        tail = [l for l in stderr.strip().splitlines() if l.strip()][-1:] or [""]
        if timed_out:
            why = f"timeout after {args.timeout:.0f} s"
        elif rc < 0:
            name = signal.Signals(-rc).name
            why = f"killed by {name}" + (" (out of memory?)" if -rc == signal.SIGKILL else "")
        elif "MemoryError" in stderr or "can't allocate memory" in stderr:
            why = f"out of memory (exit {rc}): {tail[0].strip()}"
        else:
            why = f"exit {rc}: {tail[0].strip()}"
        res = dict(status=f"failed: {why}"[:300], T=T)
        res["stderr_tail"] = stderr[-2000:]
    res["peak_rss_mib"] = ru.ru_maxrss / 1024  # this child only
    res["child_wall_s"] = wall
    return res


def fmt(v, spec):
    return "—" if v is None else format(v, spec)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", default="512,1024,2048,4096,8192", help="comma-separated T values")
    ap.add_argument("--text", default=str(DEFAULT_TEXT))
    ap.add_argument("--out", default="/tmp/long_context_hf.json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--base-gib", type=float, default=1.5, help="model + runtime memory in the estimate")
    ap.add_argument("--no-memory-check", action="store_true")
    ap.add_argument("--no-rlimit", action="store_true", help="do not cap the child's data size")
    ap.add_argument("--mem-cap-gib", type=float, help="cap the child's data size (RLIMIT_DATA) at G GiB "
                    "(default: MemAvailable when the child starts)")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per T (0 = none)")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ids-file", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        return child(args)

    Ts = [int(t) for t in args.tokens.split(",") if t.strip()]
    assert Ts and all(t > 0 for t in Ts), "--tokens needs positive integers"
    import tokenizers
    import torch
    import transformers

    mem0 = meminfo()
    dims = model_dims()
    ids, n_text = token_ids(args.text, max(Ts))
    print(f"machine: MemTotal {mem0['MemTotal'] / GIB:.1f} GiB, MemAvailable {mem0['MemAvailable'] / GIB:.1f} GiB, "
          f"{os.cpu_count()} cpus; model {SPEC['gguf']} {dims}; text {args.text}: {n_text} tokens", flush=True)
    if dims["n_ctx"] and max(Ts) > dims["n_ctx"]:
        print(f"warning: T up to {max(Ts)} exceeds the model's context of {dims['n_ctx']}", flush=True)

    results = []
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(ids, f)
        ids_file = f.name
    try:
        for T in Ts:
            need_pat, need_all = estimate(T, dims, args.base_gib)
            avail = meminfo()["MemAvailable"]
            base = dict(T=T, est_patterns_gib=need_pat / GIB, est_total_gib=need_all / GIB,
                        mem_available_gib=avail / GIB, repeated_text=n_text < T)
            if not args.no_memory_check and need_all > avail:
                r = dict(base, status=f"skipped: needs ~{need_pat / GIB:.1f} GiB of patterns "
                                      f"(~{need_all / GIB:.1f} GiB in all), {avail / GIB:.1f} GiB available")
            else:
                cap = None if args.no_rlimit else int(args.mem_cap_gib * GIB) if args.mem_cap_gib else avail
                r = dict(base, **run_one(T, ids_file, args, cap))
            results.append(r)
            print(f"T={T}: {r['status']}  load {fmt(r.get('load_s'), '.2f')} s  forward {fmt(r.get('forward_s'), '.3f')} s"
                  f"  peak RSS {fmt(r.get('peak_rss_mib'), '.0f')} MiB  (estimate {need_all / GIB:.2f} GiB,"
                  f" available {avail / GIB:.1f} GiB)"
                  + (f"  mean alpha_0 {r['alpha0_mean']:.4f}" if "alpha0_mean" in r else ""), flush=True)
    finally:
        os.unlink(ids_file)

    print()
    print("| T | HF forward s | HF peak RSS MiB | status |")
    print("|---:|---:|---:|---|")
    for r in results:
        print(f"| {r['T']} | {fmt(r.get('forward_s'), '.2f')} | {fmt(r.get('peak_rss_mib'), '.0f')} | {r['status']} |")

    doc = dict(
        generator="benches/long_context_hf.py",
        model=MODEL, model_file=SPEC["gguf"], tokenizer_file=SPEC["tokenizer"], dims=dims,
        text=str(args.text), text_tokens=n_text, threads=args.threads,
        dtype="float32", attn_implementation="eager",
        machine=dict(mem_total_gib=mem0["MemTotal"] / GIB, mem_available_gib_at_start=mem0["MemAvailable"] / GIB,
                     cpus=os.cpu_count()),
        versions=dict(torch=torch.__version__, transformers=transformers.__version__,
                      tokenizers=tokenizers.__version__, python=sys.version.split()[0]),
        results=results,
    )
    Path(args.out).write_text(json.dumps(doc, indent=1))
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
