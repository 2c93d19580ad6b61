"""A run directory seen from Python: its tables as polars DataFrames (the bytes `export --parquet`
writes, so the schemas are the Parquet files' — notebooks-data/README.md documents them once for
both), its figures as the SVG the exporter draws, its JSON records, and how a notebook shows it."""

from __future__ import annotations

import html
import io
import json
import shutil
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from . import _native
from ._safetensors import read_safetensors

# The run's record files (`report::run`'s names).
RECORDS = {
    "capture": "capture.json",
    "analysis": "report.json",
    "stream": "stream.json",
    "per_head": "per_head.json",
    "quant": "quant.json",
    "needle": "needle.json",
    "press": "press.json",
    "tasks": "tasks.json",
    "survey": "survey.json",
    "watch": "watch.json",
    "verify": "verify.json",
    "canary": "canary.json",
    "heads": "heads.json",
}


class Figure:
    """One of the run's figures as SVG; a notebook shows it inline."""

    def __init__(self, stem: str, caption: str, svg: str):
        self.stem, self.caption, self.svg = stem, caption, svg

    def _repr_svg_(self) -> str:
        return self.svg

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.svg, encoding="utf-8")
        return path

    def __repr__(self) -> str:
        return f"<Figure {self.stem}: {self.caption}>"


class Run(Mapping):
    """Every table of a run directory, by name (`run["head_sinks"]`), as polars DataFrames.

    `read_run(dir)` opens one; every call of a `Model` returns one for the directory it wrote.
    """

    def __init__(self, directory: str | Path, *, owned: bool = False):
        self.dir = Path(directory)
        # A temporary directory the run owns is removed with it.
        self._owned = owned
        try:
            found = _native.run_tables_parquet(str(self.dir))
            self._records = True
        except _native.InputError:
            # A directory of exported tables alone (as in notebooks-data/): its Parquet files.
            exported = sorted((self.dir / "tables").glob("*.parquet"))
            if not exported:
                raise
            found = [(p.stem, p.read_bytes()) for p in exported]
            self._records = False
        self._tables = {name: pl.read_parquet(io.BytesIO(data)) for name, data in found}

    def __getitem__(self, name: str) -> pl.DataFrame:
        try:
            return self._tables[name]
        except KeyError:
            raise KeyError(f"{name!r}: this run has the tables {', '.join(self._tables) or 'none'}") from None

    def __iter__(self):
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def __del__(self):
        if getattr(self, "_owned", False):
            shutil.rmtree(self.dir, ignore_errors=True)

    def record(self, kind: str) -> dict:
        """A JSON record of the run (`capture`, `analysis`, `stream`, `needle`, `watch`, …) as a dict."""
        name = RECORDS.get(kind)
        if name is None:
            raise KeyError(f"{kind!r}: the records are {', '.join(RECORDS)}")
        path = self.dir / name
        if not path.is_file():
            raise FileNotFoundError(f"{path}: this run has no {kind} record")
        return json.loads(path.read_text(encoding="utf-8"))

    def figure_list(self) -> list[tuple[str, str]]:
        """The figures this run has data for: (file stem, caption), as `export` names them."""
        return _native.run_figure_list(str(self.dir)) if self._records else []

    def figure(self, stem: str) -> Figure:
        """One figure by its file stem (`alpha-grid-k0`, `heatmap-L3-H1-log`, `ppl-curves`, …)."""
        found = _native.run_figures_svg(str(self.dir), [stem])
        if not found:
            stems = ", ".join(s for s, _ in self.figure_list())
            raise KeyError(f"{stem!r}: this run's figures are {stems or 'none'}")
        return Figure(*found[0])

    def figures(self) -> list[Figure]:
        """Every figure `export` would draw, as SVG."""
        return [Figure(*f) for f in _native.run_figures_svg(str(self.dir), None)] if self._records else []

    def _display_stems(self) -> list[str]:
        """What a notebook shows: the α_0 grid and one head's heatmap, else the first two figures."""
        stems = [s for s, _ in self.figure_list()]
        grid = [s for s in stems if s == "alpha-grid-k0"]
        heat = [s for s in stems if s.startswith("heatmap-") and s.endswith("-log")][:1]
        return (grid + heat) or stems[:2]

    def _repr_html_(self) -> str:
        parts = [f"<p><b>sinkscope run</b> <code>{html.escape(str(self.dir))}</code></p>"]
        stems = self._display_stems()
        if stems:
            for stem, caption, svg in _native.run_figures_svg(str(self.dir), stems):
                parts.append(f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>")
        rows = "".join(
            f"<tr><td><code>{html.escape(n)}</code></td><td>{t.height}</td><td>{t.width}</td></tr>"
            for n, t in self._tables.items()
        )
        parts.append(f"<table><tr><th>table</th><th>rows</th><th>columns</th></tr>{rows}</table>")
        return "\n".join(parts)

    def __repr__(self) -> str:
        tables = ", ".join(f"{n} ({t.height})" for n, t in self._tables.items())
        return f"<sinkscope.Run {self.dir}: {tables}>"


class Capture(Run):
    """A capture: the reductions as tables, and the saved hooks' tensors as numpy arrays."""

    def __init__(self, directory: str | Path, tensors_file: Path | None, *, owned: bool = False):
        super().__init__(directory, owned=owned)
        self.tensors: dict[str, np.ndarray] = {}
        if tensors_file is not None:
            self.tensors, _ = read_safetensors(tensors_file)

    @property
    def alphas(self) -> pl.DataFrame:
        """Per head and early key position k: α_k and whether k is a sink (`head_sinks`)."""
        return self["head_sinks"]

    @property
    def sinks(self) -> pl.DataFrame:
        """The (layer, head, key position) rows whose α_k exceeds ε."""
        return self["head_sinks"].filter(pl.col("is_sink"))

    @property
    def activations(self) -> pl.DataFrame:
        """Per layer: the largest |h|, its position and dimension, the median |h| (`layers`)."""
        return self["layers"]

    @property
    def massive(self) -> pl.DataFrame:
        """Every massive activation (Sun et al. 2024's criterion, `massive`)."""
        return self["massive"]

    @property
    def nll(self) -> pl.DataFrame:
        """The text token by token with each token's NLL given its prefix (`tokens`)."""
        return self["tokens"]
