"""The shipped examples agree with each other: every example desired state planned against
every example snapshot finds the hosts it pins (gpu-1 in both, not gpu-01 in one)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
DESIRED = ["examples/company", "examples/portfolio/desired"]
SNAPSHOTS = sorted(
    p.relative_to(ROOT).as_posix() for p in (ROOT / "examples/snapshots").glob("*.json")
)


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
@pytest.mark.parametrize("desired", DESIRED)
def test_every_example_plans_against_every_snapshot_without_a_pin_error(
    desired: str, snapshot: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(ROOT)
    assert main(["plan", desired, "--against", snapshot, "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    codes = sorted({row["code"] for row in plan["unsatisfied"]})
    assert "pinned_node_unavailable" not in codes, (desired, snapshot, plan["unsatisfied"])
    assert "no_eligible_nodes" not in codes, (desired, snapshot, plan["unsatisfied"])
