"""sinkscope from Python: where a transformer parks its attention, and what a KV cache loses by
evicting those positions — the same library as the `sinkscope` command line, with a model kept
loaded across calls, results as polars DataFrames and numpy arrays, and figures inline in notebooks.

    import sinkscope
    m = sinkscope.load("SmolLM2-135M-Instruct.Q4_1.gguf")
    cap = m.capture("The quick brown fox jumps over the lazy dog.", hooks="blocks.0.attn.hook_pattern")
    cap.alphas                      # per-head α_k (polars)
    cap.tensors["blocks.0.attn.hook_pattern"].shape     # (heads, T, T) numpy
    m.recommend(file="book.txt", cache=128)["recommend"]

Every call runs the command of the same name exactly as the binary does: keyword arguments are its
long flags (`max_tokens=64` is `--max-tokens 64`, `no_ablation=True` is `--no-ablation`, a list
repeats the flag), with the same defaults, checks and numbers; it writes a run directory (`out=`, or
a temporary one that lives as long as the result) and returns it as a `Run`: a mapping of table
name → DataFrame with the Parquet files' schemas (notebooks-data/README.md). Bad input raises
`InputError` with the command line's one-line message. Long calls release the GIL and report
progress (a tqdm bar when tqdm is installed; `progress=False` silences them).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from pathlib import Path

from . import _native
from ._native import InputError, SinkscopeError
from ._progress import Progress
from ._run import Capture, Figure, Run

__all__ = [
    "Capture",
    "Figure",
    "InputError",
    "Model",
    "Run",
    "SinkscopeError",
    "load",
    "read_run",
    "survey",
    "watch",
    "__version__",
]

__version__ = _native.version()


def flags(**options) -> list[str]:
    """Keyword arguments as command-line flags: `max_tokens=64` → `--max-tokens 64`; True → the
    switch alone; False and None → nothing; a list or tuple repeats the flag per item."""
    argv: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, os.fspath(value) if isinstance(value, os.PathLike) else str(value)]
    return argv


def _out_dir(out) -> tuple[Path, bool]:
    """The run directory: the caller's, or a temporary one the result owns."""
    if out is not None:
        return Path(out), False
    return Path(tempfile.mkdtemp(prefix="sinkscope-")), True


def _check_text(text: str | None, file) -> None:
    """Refuses what no command can use, naming the arguments."""
    if text is not None and file is not None:
        raise InputError("give the text either as a string or as file=, not both")
    if text == "":
        raise InputError('text="" is empty; give some text, or file=')


@contextlib.contextmanager
def _text_file(text: str | None, file):
    """The flags that give a command its text: a file as it is, or a text given as a string
    written to a temporary file (removed after the call, so a refused call leaves nothing in the
    run directory) and marked inline, so the records name it by its length and SHA-256."""
    _check_text(text, file)
    if text is None:
        yield [] if file is None else ["--file", os.fspath(file)]
        return
    with tempfile.TemporaryDirectory(prefix="sinkscope-text-") as scratch:
        path = Path(scratch) / "input.txt"
        path.write_text(text, encoding="utf-8")
        yield ["--file", str(path), "--inline-text"]


# Flags the methods fill from arguments of other names (`text` → `--prompt`); every other flag is
# its keyword argument with `-` for `_`.
_KEYWORD_OF_FLAG = {"-p": "text", "--prompt": "text", "-f": "file", "-o": "out", "--save-tensors": "hooks", "-m": "model"}
_INVALID = re.compile(r"invalid value '([^']*)' for '(--?[a-z][a-z0-9-]*)(?: <[A-Z_]+>)?'")
# The cache policy's refusals speak of its symbols (the value names `--help` shows: `--cache <W>`).
_FLAG_OF_SYMBOL = {"W": "--cache", "S": "--sinks", "R": "--recent", "N": "--observe"}
_SYMBOL = re.compile(r"\b([WSRN]) = ([0-9]+)\b")
_FLAG = re.compile(r"(?<![\w-])(--?[a-z][a-z0-9-]*)(?:( <[A-Z_]+>(?:\.\.\.)?)|( \S+))?")


def _keyword(flag: str) -> str:
    return _KEYWORD_OF_FLAG.get(flag, flag.lstrip("-").replace("-", "_"))


def _assignment(flag: str, value: str) -> str:
    """`cache=0`, `text=""`: a keyword argument as the caller wrote it."""
    shown = value if re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?", value) else f'"{value}"'
    return f"{_keyword(flag)}={shown}"


def _as_keywords(message: str, argv: list[str]) -> str:
    """The binary's one-line message with each flag named as the keyword argument that set it:
    `--cache 0` → `cache=0`, `invalid value 'many' for '--max-tokens <N>'` → `max_tokens="many"
    is not valid`, `-p` → `text`, a policy's `W = 1` → `cache=1` (when `cache` was given)."""
    given = {flag: value for flag, value in zip(argv, argv[1:]) if flag.startswith("-")}
    trim = "'\"`,;:"

    def flag_named(match: re.Match) -> str:
        flag, value = match.group(1), match.group(3)
        if value is not None and value.strip().strip(trim) == given.get(flag):
            return _assignment(flag, given[flag]) + value[len(value.rstrip(trim)):]
        return _keyword(flag) + (value or "")

    message = message.replace(" For more information, try '--help'.", "")

    def symbol(match: re.Match) -> str:
        flag = _FLAG_OF_SYMBOL[match.group(1)]
        return f"{_keyword(flag)}={match.group(2)}" if flag in given else match.group(0)

    message = _SYMBOL.sub(symbol, message)
    message = _INVALID.sub(lambda m: f"{_assignment(m.group(2), m.group(1))} is not valid", message)
    return _FLAG.sub(flag_named, message)


def _call(run, argv: list[str], progress: bool, owned: Path | None = None) -> int:
    """Runs a command line; a temporary run directory (`owned`) goes away when the command fails.
    A refusal names keyword arguments, not the command line's flags."""
    bar = Progress(progress)
    try:
        try:
            return run(argv, bar)
        except InputError as refused:
            raise InputError(_as_keywords(str(refused), argv)) from None
    except BaseException:
        if owned is not None:
            shutil.rmtree(owned, ignore_errors=True)
        raise
    finally:
        bar.close()


def _run_in(run, argv: list[str], directory: Path, owned: bool, progress: bool) -> int:
    """Runs a command line that writes into `directory` (its `--out`); a temporary directory
    (`owned`) goes away when the command fails."""
    return _call(run, [*argv, "--out", str(directory)], progress, directory if owned else None)


class Model:
    """A model loaded once for many calls (`sinkscope.load`)."""

    def __init__(self, native: _native.Model, spec: str | None):
        self._native = native
        self.spec = spec

    @property
    def name(self) -> str:
        return self._native.name()

    @property
    def info(self) -> dict:
        """The model's architecture, sizes, tokenizer and weights' SHA-256 (`sinkscope info --json`)."""
        import json

        return json.loads(self._native.info_json())

    def __repr__(self) -> str:
        return f"<sinkscope.Model {self.name}>"

    def run(self, command: str, *args: str, progress: bool = True, **options) -> int:
        """Runs any command on this model with flags as keyword arguments; returns its exit status."""
        return _call(self._native.run, [command, *args, *flags(**options)], progress)

    def _tables_of(self, command: str, out, progress: bool, options: dict) -> Run:
        """A command whose flags are all keyword arguments, into `out` (or a temporary directory)."""
        directory, owned = _out_dir(out)
        _run_in(self._native.run, [command, *flags(**options)], directory, owned, progress)
        return Run(directory, owned=owned)

    def capture(self, text: str | None = None, *, file=None, hooks: str | list[str] | None = None, out=None,
                progress: bool = True, **options) -> Capture:
        """`sinkscope capture`: the text through the model with the streaming reducers — per-head
        α_k, sink positions, activations, NLL per token — and, with `hooks` (TransformerLens names or
        patterns such as `blocks.*.attn.hook_pattern`), those hooks' full tensors as numpy arrays."""
        directory, owned = _out_dir(out)
        argv = ["capture"]
        _check_text(text, file)
        argv += ["--prompt", text] if text is not None else []
        argv += ["--file", os.fspath(file)] if file is not None else []
        tensors = None
        if hooks is not None:
            tensors = directory / "tensors.safetensors"
            spec = hooks if isinstance(hooks, str) else ",".join(hooks)
            argv += ["--hooks", spec, "--save-tensors", str(tensors)]
        _run_in(self._native.run, argv + flags(**options), directory, owned, progress)
        return Capture(directory, tensors, owned=owned)

    def analyze(self, *, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope analyze`: sink positions, Sink_k^ε, head classes, massive activations and the
        causal sweep over a probe set (`probes=`) or a text (`file=`)."""
        return self._tables_of("analyze", out, progress, options)

    def _streamed(self, command: str, text, file, out, progress, options) -> Run:
        directory, owned = _out_dir(out)
        with _text_file(text, file) as given:
            _run_in(self._native.run, [command, *given, *flags(**options)], directory, owned, progress)
        return Run(directory, owned=owned)

    def stream(self, text: str | None = None, *, policy: str, file=None, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope stream`: the text under one cache policy (`sink`, `window`, `h2o`, …) with
        `cache=W`, `sinks=S`; the `stream_nll` table holds every step's NLL and cache length."""
        return self._streamed("stream", text, file, out, progress, {"policy": policy, **options})

    def recommend(self, text: str | None = None, *, cache: int, file=None, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope recommend`: the sink-count sweep at budget `cache` and how many sink tokens
        this model needs (`recommend` table; `stream_nll` per policy and step)."""
        return self._streamed("recommend", text, file, out, progress, {"cache": cache, **options})

    def heads(self, text: str | None = None, *, file=None, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope heads`: which KV heads retrieve and which stream; `heads.json` is
        `run.record("heads")`."""
        directory, owned = _out_dir(out)
        with _text_file(text, file) as given:
            _run_in(self._native.run, ["heads", *given, *flags(**options)], directory, owned, progress)
        return _Records(directory, owned=owned)

    def needle(self, *, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope needle`: pass-key retrieval under every cache policy (`needle`,
        `needle_trials`, and with `retrieval_heads=True` `needle_heads`)."""
        return self._tables_of("needle", out, progress, options)

    def press(self, *, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope press`: one prompt compressed as kvpress compresses it (`press="snapkv"`,
        `ratio=0.5`, `file=` or `context_ids=`, `question=`, `answer=`): the tables `press`,
        `press_kept`, `press_answer`, `press_heads`; the record is `run.record("press")`."""
        return self._tables_of("press", out, progress, options)

    def tasks(self, *, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope tasks`: RULER-style tasks generated from a text (`file=`) under presses
        (`press="snapkv,knorm"`, `ratio=0.5`, `sinks=4`, `block=16`, `query_aware=True`): the
        table `task_trials`; the record is `run.record("tasks")`."""
        return self._tables_of("tasks", out, progress, options)

    def quant(self, *, out=None, progress: bool = True, **options) -> Run:
        """`sinkscope quant`: activation fake-quantization and its cost at the sink positions."""
        return self._tables_of("quant", out, progress, options)

    def verify(self, trace, *, out=None, progress: bool = True, **options) -> "_Records":
        """`sinkscope verify`: a serving engine's trace held against the exact simulator; the
        verdict is `run.record("verify")`, `run.status` is 3 when it diverges."""
        directory, owned = _out_dir(out)
        status = _run_in(self._native.run, ["verify", os.fspath(trace), *flags(**options)], directory, owned, progress)
        return _Records(directory, owned=owned, status=status)


class _Records(Run):
    """A run directory whose results are records rather than tables (heads, verify, watch)."""

    def __init__(self, directory, *, owned=False, status: int = 0):
        self.status = status
        try:
            super().__init__(directory, owned=owned)
        except InputError:
            # Run set the directory and ownership before it found no tables.
            self._tables, self._records = {}, False


def load(model: str | os.PathLike | None = None, *, dtype: str | None = None, quantized: bool = False,
         tokenizer=None, offline: bool = False) -> Model:
    """Loads a model as every command does: a .gguf file, a llama2.c .bin, an HF directory, a hub
    id or an alias (fetched and verified on first use); `None` is the command line's default model."""
    spec = None if model is None else os.fspath(model)
    argv = ([] if spec is None else ["--model", spec]) + flags(dtype=dtype, quantized=quantized, tokenizer=tokenizer, offline=offline)
    return Model(_native.Model(argv), spec)


def read_run(directory: str | os.PathLike) -> Run:
    """Every table of a run directory (capture, analyze, stream, recommend, needle, quant, a
    survey's comparison) as polars DataFrames, with the Parquet files' schemas."""
    return Run(directory)


def watch(trace: str | os.PathLike, *, out=None, progress: bool = True, **options) -> "_Records":
    """`sinkscope watch`: sink loss in a serving trace's per-token logprobs; the report is
    `run.record("watch")`, `run.status` 3 when sink loss is found."""
    directory, owned = _out_dir(out)
    status = _run_in(_native.run, ["watch", os.fspath(trace), *flags(**options)], directory, owned, progress)
    return _Records(directory, owned=owned, status=status)


def survey(models=(), *, out: str | os.PathLike, shard: str | None = None, merge=None, progress: bool = True,
           **options):
    """`sinkscope survey`: several models side by side into `out` (resumable), returned as a `Run`
    whose `survey` table compares them. `shard="K/N"` runs only every N-th model (round robin) into
    `out` and returns its part record (a dict); `merge=[dirs]` checks the parts are one whole survey
    and builds the comparison one process would have (docs/cluster/README.md)."""
    argv = ["survey"] + [a for m in models for a in ("--model", os.fspath(m))]
    argv += flags(shard=shard, merge=[os.fspath(d) for d in merge or ()], **options) + ["--out", os.fspath(out)]
    _call(_native.run, argv, progress)
    if shard is None:
        return Run(out)
    k, n = (int(x) for x in shard.split("/"))
    import json

    return json.loads((Path(out) / "survey-parts" / f"part-{k}-of-{n}.json").read_text(encoding="utf-8"))
