"""``gridctl dash`` without a terminal refuses at once (exit 2, one line) instead of starting
Textual with no input to wait on, which spun a whole core forever."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [["dash"], ["dash", "--controller", "http://127.0.0.1:9"], ["dash", "--from-file", "x.json"]],
    ids=["context", "controller", "from-file"],
)
def test_dash_without_a_terminal_exits_2_instead_of_waiting(argv: list[str]) -> None:
    # the old defect waited forever on a core; the bound is the subprocess timeout
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", *argv],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,
        check=False,
    )
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a terminal" in lines[0], done.stderr
    assert "textual" not in done.stderr.lower()
