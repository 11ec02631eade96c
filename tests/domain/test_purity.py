"""The domain package does no I/O: importing it pulls in no I/O, clock or random module."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = (
    "httpx",
    "sqlite3",
    "textual",
    "psutil",
    "subprocess",
    "socket",
    "uvicorn",
    "starlette",
    "watchfiles",
    "random",
    "requests",
    "yaml",
    "jsonschema",
)


def imported_by(module: str) -> set[str]:
    code = (
        "import sys, json; before = set(sys.modules); "
        f"import {module}; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return set(json.loads(out.stdout))


def test_domain_imports_no_io() -> None:
    new = imported_by("gridctl.domain")
    leaked = sorted(m for m in new if m.split(".")[0] in FORBIDDEN or m == "time")
    assert leaked == []


def test_lab_imports_no_io() -> None:
    """The scenario lab is pure too: simulated clock, seeded streams, no I/O."""
    new = imported_by(
        "gridctl.lab.scenario, gridctl.lab.graduation, gridctl.lab.oracle, gridctl.lab.optimality"
    )
    leaked = sorted(m for m in new if m.split(".")[0] in FORBIDDEN or m == "time")
    assert leaked == []
