"""The project's own static checks run with the suite: lint, format, types, import contracts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    exe = BIN / tool if (BIN / tool).exists() else shutil.which(tool)
    if exe is None:
        pytest.fail(f"{tool} is not installed (it is in the test extra)")
    return subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean() -> None:
    done = run("ruff", "check", "gridctl", "tests", "benchmarks")
    assert done.returncode == 0, done.stdout + done.stderr


def test_core_is_formatted() -> None:
    done = run("ruff", "format", "--check", "gridctl")
    assert done.returncode == 0, done.stdout + done.stderr


def mypy_cache() -> Path:
    """mypy's incremental cache, kept outside the checkout (``GRIDCTL_MYPY_CACHE`` moves
    it) so a fresh clone does not check all 300-odd modules from nothing (about 10 s of
    CPU alone, twice that beside the rest of the suite). mypy re-checks every module
    whose source hash, options, mypy version or dependencies changed, so the cache
    changes only how long the check takes, never what it finds."""
    configured = os.environ.get("GRIDCTL_MYPY_CACHE")
    return Path(configured) if configured else Path.home() / ".cache" / "gridctl" / "mypy"


@pytest.mark.slow
def test_mypy_strict_on_the_core() -> None:
    # files and strictness come from pyproject.toml
    done = run("mypy", "--cache-dir", str(mypy_cache()))
    assert done.returncode == 0, done.stdout + done.stderr


def test_import_contracts() -> None:
    done = run("lint-imports")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "BROKEN" not in done.stdout
