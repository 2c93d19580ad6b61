"""notebooks/sink-story.ipynb executed headless (nbclient) against the installed package: every cell
runs without an error, the figures come out inline as SVG, and the executed notebook is written to
$SINKSCOPE_NOTEBOOK_OUT (default target/notebooks/) so a CI run's cells and outputs can be read."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from conftest import REPO, need

NOTEBOOK = REPO / "notebooks" / "sink-story.ipynb"


def test_the_notebook_runs_and_shows_its_figures(smollm2, book):
    need(smollm2)
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    out_dir = Path(os.environ.get("SINKSCOPE_NOTEBOOK_OUT", REPO / "target" / "notebooks"))
    out_dir.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out_dir / NOTEBOOK.name)
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    svgs = [o for o in outputs if "text/html" in o.get("data", {}) and "<svg" in o["data"]["text/html"]]
    svgs += [o for o in outputs if "image/svg+xml" in o.get("data", {})]
    # The capture's α0 grid and heatmap (one HTML output) and the recommendation's figure.
    assert len(svgs) >= 2, [list(o.get("data", {})) for o in outputs]
    every_cell_ran = all(c.execution_count for c in nb.cells if c.cell_type == "code")
    assert every_cell_ran
