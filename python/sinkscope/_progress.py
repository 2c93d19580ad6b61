"""Progress of a long call: a tqdm bar per streamed run when tqdm is installed (a widget in notebooks
that have ipywidgets), stage lines on stderr; warnings go through Python's `warnings`."""

from __future__ import annotations

import sys
import warnings


def _tqdm():
    """tqdm's notebook widget where ipywidgets can draw it, its text bar otherwise, None without tqdm."""
    try:
        import ipywidgets  # noqa: F401

        from tqdm.auto import tqdm
    except ImportError:
        try:
            from tqdm import tqdm
        except ImportError:
            return None
    return tqdm


class Progress:
    """The callable the native module reports to: (kind, message, done, total)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled
        self._bar = None
        self._label = None
        self._tqdm = _tqdm() if enabled else None

    def __call__(self, kind: str, message: str, done: int, total: int) -> None:
        if kind == "warning":
            warnings.warn(message, stacklevel=2)
            return
        if not self.enabled:
            return
        if kind == "stage":
            self._close()
            print(message, file=sys.stderr, flush=True)
        elif kind == "steps":
            self._steps(message, done, total)

    def _steps(self, label: str, done: int, total: int) -> None:
        if self._tqdm is None:
            if label != self._label:
                self._label = label
                print(f"{label}: {total} steps", file=sys.stderr, flush=True)
            return
        if self._bar is None or label != self._label:
            self._close()
            self._label = label
            self._bar = self._tqdm(total=total, desc=label, unit="step", leave=False)
        self._bar.update(done - self._bar.n)

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None

    def close(self) -> None:
        self._close()
