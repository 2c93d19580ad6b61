"""The Python package against the command line on real models: every table a call returns equals,
bit for bit, the Parquet file `sinkscope export --parquet` writes for the same command run by the
binary; tensors equal the binary's --save-tensors; bad input raises InputError with the binary's
message; the GIL is free while the model works."""

from __future__ import annotations

import hashlib
import json
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest

import sinkscope
from sinkscope._safetensors import read_safetensors

TEXT = (
    "It is a truth universally acknowledged, that a single man in possession of a good fortune, "
    "must be in want of a wife. However little known the feelings or views of such a man may be "
    "on his first entering a neighbourhood, this truth is so well fixed in the minds of the "
    "surrounding families, that he is considered the rightful property of some one or other of "
    "their daughters."
)


@pytest.fixture(scope="module")
def smol(smollm2):
    return sinkscope.load(smollm2)


def cli_tables(cli, run_dir: Path) -> dict[str, pl.DataFrame]:
    done = cli("export", run_dir, "--parquet")
    assert done.returncode == 0, done.stderr
    return {p.stem: pl.read_parquet(p) for p in sorted((run_dir / "tables").glob("*.parquet"))}


def assert_same_tables(py: sinkscope.Run, cli: dict[str, pl.DataFrame]):
    assert sorted(py) == sorted(cli), (sorted(py), sorted(cli))
    for name, frame in cli.items():
        assert py[name].schema == frame.schema, name
        assert py[name].equals(frame, null_equal=True), f"table {name} differs from the binary's"


def test_capture_equals_the_binary(smol, smollm2, cli, tmp_path):
    hook = "blocks.0.attn.hook_pattern,blocks.5.hook_resid_post"
    cap = smol.capture(TEXT, hooks=hook, max_tokens=64, out=tmp_path / "py")
    ran = cli("capture", "-m", smollm2, "-p", TEXT, "--max-tokens", 64, "--hooks", hook,
              "--save-tensors", tmp_path / "cli.safetensors", "-o", tmp_path / "cli")
    assert ran.returncode == 0, ran.stderr
    assert_same_tables(cap, cli_tables(cli, tmp_path / "cli"))
    # The Parquet bytes themselves are the exporter's.
    for name, data in sinkscope._native.run_tables_parquet(str(tmp_path / "py")):
        assert data == (tmp_path / "cli" / "tables" / f"{name}.parquet").read_bytes(), name
    tensors, _ = read_safetensors(tmp_path / "cli.safetensors")
    assert sorted(cap.tensors) == sorted(tensors) == ["blocks.0.attn.hook_pattern", "blocks.5.hook_resid_post"]
    for name, array in tensors.items():
        assert cap.tensors[name].dtype == array.dtype and np.array_equal(cap.tensors[name], array), name
    # Real numbers: SmolLM2 (9 heads, T = 64) sinks on position 0, rows of attention sum to 1.
    pattern = cap.tensors["blocks.0.attn.hook_pattern"]
    assert pattern.shape == (9, 64, 64)
    assert np.all(np.abs(pattern.sum(axis=-1) - 1.0) < 1e-4)
    alpha0 = cap.alphas.filter((pl.col("probe") == "capture") & (pl.col("key_pos") == 0))
    assert alpha0.height == 30 * 9 and alpha0["alpha"].max() > 0.9
    assert cap.sinks.height > 0 and cap.sinks["key_pos"].min() == 0
    nll = cap.nll
    assert nll.height == 64 and nll["nll"][0] is None
    mean = cap.record("capture")["nll"]["mean_nll"]
    assert abs(nll["nll"].drop_nulls().mean() - mean) < 1e-9
    assert nll["nll"].drop_nulls().is_finite().all()


def test_recommend_equals_the_binary(smol, smollm2, book, cli, tmp_path):
    opts = dict(cache=48, tokens=160, sinks=[0, 1, 4], no_recompute=True)
    run = smol.recommend(file=book, out=tmp_path / "py", **opts)
    ran = cli("recommend", "-m", smollm2, "-f", book, "--cache", 48, "--tokens", 160, "--sinks", "0,1,4",
              "--no-recompute", "-o", tmp_path / "cli")
    assert ran.returncode == 0, ran.stderr
    assert_same_tables(run, cli_tables(cli, tmp_path / "cli"))
    rec = run["recommend"]
    assert rec.height == 3 and rec["recommended"].sum() == 1
    # Evicting the first token costs SmolLM2 perplexity (the reason this tool exists).
    ppl = {r["sinks"]: r["ppl_after_eviction"] for r in rec.iter_rows(named=True)}
    assert ppl[0] > ppl[4]


def test_stream_needle_and_figures_on_stories(stories, book, cli, tmp_path):
    m = sinkscope.load(stories)
    run = m.stream(file=book, policy="sink", cache=32, sinks=4, tokens=120, out=tmp_path / "stream")
    ran = cli("stream", "-m", stories, "-f", book, "--policy", "sink", "--cache", 32, "--sinks", 4,
              "--tokens", 120, "-o", tmp_path / "stream-cli")
    assert ran.returncode == 0, ran.stderr
    assert_same_tables(run, cli_tables(cli, tmp_path / "stream-cli"))
    assert run["stream_nll"].height == 119
    needle = dict(lengths=[200], depths=[0.5], trials=2, policy=["sink", "keep"], cache=64, distractors=8)
    py = m.needle(out=tmp_path / "needle", **needle)
    ran = cli("needle", "-m", stories, "--lengths", 200, "--depths", 0.5, "--trials", 2, "--policy", "sink",
              "--policy", "keep", "--cache", 64, "--distractors", 8, "-o", tmp_path / "needle-cli")
    assert ran.returncode == 0, ran.stderr
    assert_same_tables(py, cli_tables(cli, tmp_path / "needle-cli"))
    assert py["needle_trials"].height == 2 * 2
    # Figures are the exporter's SVG.
    stems = [s for s, _ in run.figure_list()]
    assert "ppl-curves" in stems
    svg = run.figure("ppl-curves").svg
    assert cli("export", tmp_path / "stream-cli", "--svg").returncode == 0
    assert svg.startswith("<svg") and svg == (tmp_path / "stream-cli" / "figures" / "ppl-curves.svg").read_text()
    assert "<svg" in run._repr_html_()


def test_an_inline_text_is_recorded_as_what_it_is(stories, book, tmp_path):
    """A text passed as a string is named in the records and tables by its length and SHA-256,
    not by the temporary file it went through; the command line's flags become keywords."""
    m = sinkscope.load(stories)
    text = book.read_text(encoding="utf-8")[:3000]
    label = f"inline text ({len(text)} chars, sha256 {hashlib.sha256(text.encode()).hexdigest()})"
    run = m.stream(text, policy="sink", cache=32, sinks=4, tokens=100, out=tmp_path / "s", progress=False)
    assert run.record("stream")["text_source"] == label
    assert set(run["stream_nll"]["text"]) == {label}
    cap = m.capture(text[:200], out=tmp_path / "c", progress=False)
    assert cap.record("capture")["text_source"] == f"inline text (200 chars, sha256 {hashlib.sha256(text[:200].encode()).hexdigest()})"
    with pytest.raises(sinkscope.InputError, match='text="" is empty'):
        m.stream("", policy="sink", out=tmp_path / "e")
    assert not (tmp_path / "e").exists()


def test_read_run_reads_every_table(smol, tmp_path, cli, smollm2):
    smol.capture(TEXT, max_tokens=32, out=tmp_path / "run")
    run = sinkscope.read_run(tmp_path / "run")
    assert {"head_sinks", "layers", "massive", "tokens"} <= set(run)
    assert_same_tables(run, cli_tables(cli, tmp_path / "run"))


def test_bad_input_raises_the_binarys_message(smollm2, cli, tmp_path):
    missing = tmp_path / "nope.gguf"
    with pytest.raises(sinkscope.InputError) as raised:
        sinkscope.load(missing)
    ran = cli("capture", "-m", missing, "-p", "x", "-o", tmp_path / "out")
    assert ran.returncode == 2
    assert ran.stderr.strip() == f"error: {raised.value}"
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(smollm2.read_bytes()[:4096])
    with pytest.raises(sinkscope.InputError, match="corrupt.gguf"):
        sinkscope.load(corrupt)
    m = sinkscope.load(smollm2)
    # Refusals name the keyword argument, not the binary's flag.
    with pytest.raises(sinkscope.InputError, match='max_tokens="many" is not valid'):
        m.capture("x", max_tokens="many", out=tmp_path / "a")
    with pytest.raises(sinkscope.InputError, match="top_k=0 is not valid: 0 asks for nothing") as raised:
        m.capture("x", top_k=0, out=tmp_path / "a")
    assert "--" not in str(raised.value)
    with pytest.raises(sinkscope.InputError, match="cache=1 is too small"):
        m.recommend(TEXT, cache=1, out=tmp_path / "a")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01" * 64)
    with pytest.raises(sinkscope.InputError, match="binary.txt"):
        m.capture(file=binary, out=tmp_path / "b")
    with pytest.raises(sinkscope.InputError):
        m.stream("", policy="sink", out=tmp_path / "c")
    with pytest.raises(sinkscope.InputError, match="command line"):
        m.run("dash")
    # Nothing half-written, and no temporary run directory left behind by a failed call.
    assert not (tmp_path / "a").exists() and not (tmp_path / "b" / "capture.json").exists()
    temporary = lambda: set(Path(tempfile.gettempdir()).glob("sinkscope-*"))  # noqa: E731
    before = temporary()
    for call in (lambda: m.capture("x", max_tokens="many"), lambda: m.recommend(TEXT, cache=1), lambda: m.analyze(epsilon=2)):
        with pytest.raises(sinkscope.InputError):
            call()
    assert temporary() == before


def test_the_gil_is_free_while_the_model_works(smol, book):
    text = book.read_text(encoding="utf-8")[:6000]
    ticks = 0
    stop = threading.Event()

    def count():
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0)

    counter = threading.Thread(target=count)
    counter.start()
    time.sleep(0.05)
    before = ticks
    started = time.perf_counter()
    smol.capture(text, max_tokens=256, progress=False)
    elapsed = time.perf_counter() - started
    during = ticks - before
    stop.set()
    counter.join()
    # Held for the whole call, the counter could not run at all; released, it counts freely.
    assert elapsed > 0.2 and during > 1000, (elapsed, during)


def test_progress_reaches_python(smol, book, tmp_path):
    seen = []
    smol._native.run(["recommend", "--file", str(book), "--cache", "32", "--tokens", "96", "--sinks", "0,4",
                      "--no-recompute", "--out", str(tmp_path)], lambda *a: seen.append(a))
    kinds = {k for k, *_ in seen}
    assert "steps" in kinds, seen
    last = [s for s in seen if s[0] == "steps"][-1]
    assert last[2] == last[3] > 0


def test_sharded_survey_in_threads_equals_the_binarys_survey(stories, shared, cli, tmp_path):
    models = [stories, shared / "models" / "stories260K.bin"]
    settings = dict(cache=[32], tokens=160)

    def shard(k: int) -> Path:
        out = tmp_path / f"part-{k}"
        part = sinkscope.survey(models, out=out, shard=f"{k}/2", progress=False, **settings)
        assert part["shard"] == k and len(part["rows"]) == 1
        return out

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        parts = list(pool.map(shard, [1, 2]))
    merged = sinkscope.survey(merge=parts, out=tmp_path / "merged", progress=False)
    ran = cli("survey", "-m", models[0], "-m", models[1], "--cache", 32, "--tokens", 160, "-o", tmp_path / "one")
    assert ran.returncode == 0, ran.stderr
    for f in ["survey.json", "survey.md", "tables/survey.parquet"]:
        assert (tmp_path / "merged" / f).read_bytes() == (tmp_path / "one" / f).read_bytes(), f
    assert merged["survey"].height == 2
    assert merged["survey"].equals(pl.read_parquet(tmp_path / "one" / "tables" / "survey.parquet"))


def test_watch_equals_the_binary(cli, tmp_path):
    from conftest import REPO

    trace = REPO / "notebooks-data" / "smollm2-135m-canary" / "window" / "canary-trace.jsonl"
    py = sinkscope.watch(trace, out=tmp_path / "py", progress=False)
    ran = cli("watch", trace, "-o", tmp_path / "cli")
    assert py.status == ran.returncode
    assert (tmp_path / "py" / "watch.json").read_bytes() == (tmp_path / "cli" / "watch.json").read_bytes()
    assert py.record("watch")["sink_loss"] == (ran.returncode == 3)


def test_analyze_equals_the_binary(stories, cli, tmp_path):
    m = sinkscope.load(stories)
    py = m.analyze(out=tmp_path / "py", no_ablation=True, progress=False)
    ran = cli("analyze", "-m", stories, "--no-ablation", "-o", tmp_path / "cli")
    assert ran.returncode == 0, ran.stderr
    assert_same_tables(py, cli_tables(cli, tmp_path / "cli"))
    assert py["head_sinks"]["probe"].n_unique() > 1


def test_verify_equals_the_binary(stories, book, cli, tmp_path):
    m = sinkscope.load(stories)
    m.stream(file=book, policy="sink", cache=48, sinks=4, tokens=200, out=tmp_path / "run", progress=False)
    trace = tmp_path / "run" / "stream.json"
    same = m.verify(trace, policy="sink", cache=48, sinks=4, positions="slot", out=tmp_path / "py", progress=False)
    assert same.status == 0 and same.record("verify")["conformance"]["verdict"] == {"verdict": "conforms"}
    near_miss = m.verify(trace, policy="sink", cache=47, sinks=4, positions="slot", out=tmp_path / "py-miss", progress=False)
    ran = cli("verify", trace, "-m", stories, "--policy", "sink", "--cache", 47, "--sinks", 4, "--positions", "slot", "-o", tmp_path / "cli-miss")
    assert near_miss.status == ran.returncode == 3
    # The same verdict and numbers; only the wall-clock time differs.
    py, binary = near_miss.record("verify"), json.loads((tmp_path / "cli-miss" / "verify.json").read_text())
    assert py.pop("wall_seconds") > 0 and binary.pop("wall_seconds") > 0
    assert py == binary and py["conformance"]["verdict"]["verdict"] != "conforms"


def test_quantized_cache_keywords_equal_the_binary(stories, book, cli, tmp_path):
    """Cache types reach the binary as keywords: `stream`'s error by head and `recommend`'s
    frontier give the binary's tables (fp8: stories260K's 8-wide heads hold no 32-value block)."""
    m = sinkscope.load(stories)
    fmt = dict(cache_type_k="fp8-e5m2", cache_type_v="fp8-e5m2", kl=True)
    run = m.stream(file=book, policy="sink", cache=32, sinks=4, tokens=120, out=tmp_path / "py", **fmt)
    ran = cli("stream", "-m", stories, "-f", book, "--policy", "sink", "--cache", 32, "--sinks", 4, "--tokens", 120,
              "--cache-type-k", "fp8-e5m2", "--cache-type-v", "fp8-e5m2", "--kl", "-o", tmp_path / "cli")
    assert ran.returncode == 0, ran.stderr
    assert_same_tables(run, cli_tables(cli, tmp_path / "cli"))
    heads = run["cache_error_heads"]
    assert heads.height == 5 * 8 and heads["key_error_rest"].min() > 0
    assert run["stream_nll"]["kl_from_exact"].null_count() == 0
    frontier = m.recommend(file=book, cache=32, tokens=120, cache_types=["fp8-e4m3", "fp8-e5m2"],
                           unquantized_firsts=[0], memory_budget="60%", out=tmp_path / "frontier")
    table = frontier["cache_frontier"]
    assert table.height == 2 * 2 and table["chosen"].sum() == 1


def test_tasks_equals_the_binary(smol, smollm2, book, cli, tmp_path):
    """`m.tasks` writes the binary's record and table."""
    run = smol.tasks(file=book, task="passkey,multikey", length=300, trials=1, press="snapkv", ratio=0.5, sinks=4,
                     query_aware=True, out=tmp_path / "py", progress=False)
    ran = cli("tasks", "-m", smollm2, "-f", book, "--task", "passkey,multikey", "--length", 300, "--trials", 1, "--press", "snapkv",
              "--ratio", 0.5, "--sinks", 4, "--query-aware", "-o", tmp_path / "cli")
    assert ran.returncode == 0, ran.stderr
    binary = cli_tables(cli, tmp_path / "cli")
    assert sorted(run) == sorted(binary) and "task_trials" in binary
    for name, frame in binary.items():
        assert run[name].equals(frame), f"table {name} differs from the binary's"
    record = run.record("tasks")
    assert [a["label"] for a in record["arms"]] == ["none", "snapkv", "snapkv+aware", "snapkv+sinks4", "snapkv+sinks4+aware"]
    assert run["task_trials"].height == 5 * 2


def test_press_equals_the_binary(smol, smollm2, book, cli, tmp_path):
    """`m.press` writes the binary's record and tables (but the seconds each press took)."""
    opts = dict(file=book, start_char=100000, tokens=200, question="Who is she?", answer=" Elizabeth.", ratio=0.5)
    run = smol.press(press="snapkv,knorm", block=16, out=tmp_path / "py", progress=False, **opts)
    ran = cli("press", "-m", smollm2, "-f", book, "--start-char", 100000, "--tokens", 200, "--question", "Who is she?",
              "--answer", " Elizabeth.", "--press", "snapkv,knorm", "--ratio", 0.5, "--block", 16, "-o", tmp_path / "cli")
    assert ran.returncode == 0, ran.stderr
    binary = cli_tables(cli, tmp_path / "cli")
    assert sorted(run) == sorted(binary)
    for name, frame in binary.items():
        drop = ["seconds"] if name == "press" else []
        assert run[name].drop(drop).equals(frame.drop(drop)), f"table {name} differs from the binary's"
    record = run.record("press")
    assert [r["label"] for r in record["runs"]] == ["snapkv+block16", "knorm+block16"]
    assert run["press_answer"].height == 3 * len(record["answer"]["ids"])
