"""``gridctl plan --explain`` for every model of every shipped fleet against every snapshot.

Explanations have several states (rejected, scored, chosen without a search because
the incumbents already meet the target, staged behind a preemption, never
evaluated); each must print, none may raise. The steady office fleet is the state
that once crashed the command: its incumbents are listed as holding a replica.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gridctl.cli.main import main
from gridctl.cli.plan_cmd import explanation_lines
from gridctl.config import load_directory

ROOT = Path(__file__).resolve().parents[2]
FLEETS = (
    "policies",
    "examples/company",
    "examples/portfolio/desired",
    "tests/planner/fixtures/office",
)
SNAPSHOTS = (
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "examples/snapshots").glob("*.json")),
    "examples/portfolio/one-slot.json",
)


@pytest.mark.parametrize("snapshot", SNAPSHOTS)
@pytest.mark.parametrize("fleet", FLEETS)
def test_explain_prints_every_model_without_a_traceback(
    fleet: str, snapshot: str, capsys: pytest.CaptureFixture[str]
) -> None:
    models = sorted(p.name for p in load_directory(str(ROOT / fleet)).profiles)
    assert models, fleet
    for model in models:
        args = ["plan", str(ROOT / fleet), "--against", str(ROOT / snapshot), "--explain", model]
        assert main(args) == 0, (model, capsys.readouterr().err)
        out = capsys.readouterr().out
        assert f"Explain {model}: target " in out
        assert "None" not in out.split(f"Explain {model}:")[1]


def test_steady_fleet_lists_the_incumbents(capsys: pytest.CaptureFixture[str]) -> None:
    office = str(ROOT / "tests/planner/fixtures/office")
    steady = str(ROOT / "examples/snapshots/office-steady.json")
    assert main(["plan", office, "--against", steady, "--explain", "chat-small"]) == 0
    out = capsys.readouterr().out
    rows = out.split("Explain chat-small:")[1].splitlines()[1:]
    held = [row for row in rows if row.startswith("  * ")]
    assert held and all("holds a replica, not scored" in row for row in held), rows


def test_every_candidate_state_has_words() -> None:
    explanation = {
        "target_replicas": 1,
        "target_reason": "min_replicas",
        "demand_class": None,
        "candidates": [
            {"host_id": "a", "rejection": "data_tier", "detail": "", "chosen": False},
            {"host_id": "b", "rejection": None, "detail": "x", "score": None, "chosen": True},
            {"host_id": "c", "rejection": None, "detail": "", "score": None, "chosen": False},
            {"host_id": "d", "rejection": None, "score": 0.5, "components": {"fit": 0.5}},
        ],
    }
    lines = explanation_lines("m", explanation)
    assert lines == [
        "Explain m: target 1 (min_replicas); class none",
        "    a: rejected data_tier: no detail recorded",
        "  * b: holds a replica, not scored [x]",
        "    c: eligible, not scored",
        "    d: score 0.5 (fit +0.5)",
    ]
    assert explanation_lines("gone", None) == [
        "Explain gone: the plan holds no host rows for it (not placed by this plan)"
    ]
