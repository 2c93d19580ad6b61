"""Prints an executed notebook as text — each cell's source and outputs, figures as their kind and
size — so a CI log shows what the notebook computed (`.ci/run` runs it on target/notebooks/)."""

from __future__ import annotations

import re
import sys

import nbformat


def show(path: str) -> None:
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            print(f"--- [{i}] markdown: {cell.source.splitlines()[0] if cell.source else ''}")
            continue
        print(f"--- [{i}] code (execution {cell.execution_count}):")
        print("\n".join("    " + line for line in cell.source.splitlines()))
        for out in cell.outputs:
            if out.output_type == "stream":
                print("  >", out.text.rstrip().replace("\n", "\n  > "))
            elif out.output_type == "error":
                print(f"  ! {out.ename}: {out.evalue}")
            else:
                data = out.get("data", {})
                for kind, value in data.items():
                    text = "".join(value) if isinstance(value, list) else value
                    if kind == "image/svg+xml" or "<svg" in text:
                        figures = len(re.findall(r"<svg", text))
                        print(f"  > {kind}: {figures} inline SVG figure(s), {len(text):,} bytes")
                    elif kind == "text/plain":
                        print("  >", text.rstrip().replace("\n", "\n  > "))


if __name__ == "__main__":
    show(sys.argv[1])
