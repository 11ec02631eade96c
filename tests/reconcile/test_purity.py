"""The reconciler is pure: importing it pulls in no I/O, clock or randomness module."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import gridctl.reconcile

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
    "datetime",
    "uuid",
    "secrets",
)

PROBE = """
import sys
forbidden = {forbidden!r}
# the standard library the core builds on (dataclasses -> inspect -> os) comes first
import collections.abc, dataclasses, enum, hashlib, re, typing  # noqa: E401,F401
# the interpreter preloads a few of these; forget them so a re-import would show
for name in forbidden:
    sys.modules.pop(name, None)
import gridctl.reconcile  # noqa: F401
print(",".join(sorted(n for n in forbidden if n in sys.modules)))
"""


def test_importing_the_reconciler_loads_no_io_module() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(forbidden=FORBIDDEN)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert out.stdout.strip() == ""


def test_no_module_of_the_reconciler_imports_an_io_module() -> None:
    package = Path(gridctl.reconcile.__file__).parent
    for path in sorted(package.glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
