"""The split core stays pure: no I/O modules get imported, and the public API is exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import gridctl.split

REPO_ROOT = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "time",
    "random",
    "socket",
    "subprocess",
    "httpx",
    "sqlite3",
    "asyncio",
    "threading",
    "selectors",
    "select",
    "signal",
    "shutil",
    "tempfile",
    "pathlib",
    "glob",
    "datetime",
    "uuid",
    "secrets",
    "logging",
    "psutil",
    "textual",
    "urllib",
    "http",
}

PROBE = """
import json, sys
before = set(sys.modules)
import gridctl.split
print(json.dumps(sorted(set(sys.modules) - before)))
"""


def test_importing_split_pulls_in_no_io_modules() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    added = set(json.loads(result.stdout))
    assert "gridctl.split" in added
    top_level = {name.split(".")[0] for name in added}
    assert not top_level & FORBIDDEN
    assert not any(name == "os" or name.startswith("os.") for name in added)
    assert not {name for name in added if name.startswith("gridctl.")} - {
        name for name in added if name.startswith("gridctl.split")
    }


def test_public_api_is_exactly_the_exported_names() -> None:
    public = {
        name
        for name, value in vars(gridctl.split).items()
        if not name.startswith("_") and not isinstance(value, ModuleType) and name != "annotations"
    }
    assert public == set(gridctl.split.__all__)
    assert len(gridctl.split.__all__) == len(set(gridctl.split.__all__))
    assert callable(gridctl.split.quorum)
    assert callable(gridctl.split.context_candidates)


def test_surface_used_by_other_code() -> None:
    from gridctl.split import Claim, ClaimRegistry, StageLoad, quorum

    assert {"accept", "check_load", "check_stop"} <= set(vars(ClaimRegistry))
    assert callable(quorum)
    assert list(Claim.__dataclass_fields__) == [
        "model_id",
        "package_ref",
        "manifest_sha256",
        "coordinator_id",
        "coordinator_term",
        "topology_id",
        "run_id",
        "participant_set_hash",
        "topology_hash",
        "lease_until_unix_ms",
    ]
    assert list(StageLoad.__dataclass_fields__) == [
        "model_id",
        "package_ref",
        "manifest_sha256",
        "coordinator_id",
        "coordinator_term",
        "topology_id",
        "run_id",
    ]
