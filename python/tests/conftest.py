"""Where the tests find the real models and texts (`$SINKSCOPE_SHARED`, else ../shared beside the
repository) and the `sinkscope` binary they hold the package against (`$SINKSCOPE_BIN`, else
target/release/sinkscope). Missing data is a failure under CI=true or SINKSCOPE_REQUIRE_MODELS=1,
a skip with its reason elsewhere."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _required() -> bool:
    return os.environ.get("CI") in ("true", "1") or os.environ.get("SINKSCOPE_REQUIRE_MODELS") == "1"


def need(path: Path) -> Path:
    if not path.exists():
        why = f"cannot test: {path} is missing (SINKSCOPE_SHARED=DIR must hold models/ and corpora/)"
        if _required():
            pytest.fail(why)
        pytest.skip(why)
    return path


@pytest.fixture(scope="session")
def shared() -> Path:
    return Path(os.environ.get("SINKSCOPE_SHARED", REPO.parent / "shared"))


@pytest.fixture(scope="session")
def smollm2(shared) -> Path:
    return need(shared / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="session")
def stories(shared) -> Path:
    return need(shared / "models" / "stories260K.gguf")


@pytest.fixture(scope="session")
def book(shared) -> Path:
    return need(shared / "corpora" / "pg1342_pride_and_prejudice.txt")


@pytest.fixture(scope="session")
def cli():
    """Runs the binary; returns the completed process (the test checks its status)."""
    binary = Path(os.environ.get("SINKSCOPE_BIN", REPO / "target" / "release" / "sinkscope"))
    need(binary)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(binary), *map(str, args)], capture_output=True, text=True, timeout=1800)

    return run
