"""The pure core imports no I/O module (checked in a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

FORBIDDEN = (
    "time",
    "random",
    "os",
    "subprocess",
    "socket",
    "httpx",
    "sqlite3",
    "textual",
    "psutil",
    "uvicorn",
    "starlette",
    "watchfiles",
)

PROBE = f"""
import json, sys
before = set(sys.modules)
import gridctl.planner, gridctl.demand
added = sorted(set(sys.modules) - before)
print(json.dumps(sorted(m for m in added if m.split('.')[0] in {FORBIDDEN!r})))
"""


def test_planner_and_demand_import_no_io_module() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True
    )
    assert json.loads(result.stdout) == []


def test_planner_sources_do_not_name_io_modules() -> None:
    import ast
    from pathlib import Path

    import gridctl.demand
    import gridctl.planner

    roots = [Path(gridctl.planner.__file__).parent, Path(gridctl.demand.__file__).parent]
    offenders = []
    for root in roots:
        for path in sorted(root.glob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] in FORBIDDEN]
    assert offenders == []
