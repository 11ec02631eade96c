"""``gridctl plan``: hosts folded per model by default, every host's row with ``--explain``.

The folded summary must agree with the rows ``--explain`` prints (counts add up,
each example is one of its group's hosts, the chosen hosts are the starred
rows), ``--explain`` must list every host of the snapshot, ``--explain-all``
every model, and the JSON must be byte-identical from run to run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gridctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
OFFICE = str(ROOT / "tests/planner/fixtures/office")
COMPANY = str(ROOT / "examples/company")
SNAPSHOT = str(ROOT / "examples/snapshots/office.json")
SATURATED = str(ROOT / "examples/snapshots/office-saturated.json")


def plan_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    assert main(["plan", *args, "--json"]) == 0, capsys.readouterr().err
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def snapshot_hosts(path: str) -> list[str]:
    return sorted(h["host_id"] for h in json.loads(Path(path).read_text())["hosts"])


@pytest.mark.parametrize("snapshot", [SNAPSHOT, SATURATED], ids=["office", "saturated"])
@pytest.mark.parametrize("fleet", [OFFICE, COMPANY], ids=["office", "company"])
def test_the_summary_adds_up_to_the_rows(
    fleet: str, snapshot: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folded = plan_json(capsys, fleet, "--against", snapshot)
    assert folded["explanations"] == {}
    rows = plan_json(capsys, fleet, "--against", snapshot, "--explain-all")["explanations"]
    assert sorted(rows) == sorted(folded["models"])
    hosts = snapshot_hosts(snapshot)
    for model, summary in folded["models"].items():
        candidates = rows[model]["candidates"]
        assert sorted(c["host_id"] for c in candidates) == hosts
        assert summary["hosts_considered"] == len(hosts)
        assert summary["chosen"] == sorted(c["host_id"] for c in candidates if c["chosen"])
        groups = summary["rejected"] + summary["eligible"]
        assert sum(g["hosts"] for g in groups) + len(summary["chosen"]) == len(hosts)
        for group in groups:
            members = [
                c["host_id"]
                for c in candidates
                if not c["chosen"]
                and c["rejection"] == group.get("reason")
                and c["detail"] == group["detail"]
            ]
            assert len(members) == group["hosts"] and group["example_host"] in members, group
        for target in ("target_replicas", "target_reason", "demand_class"):
            assert summary[target] == rows[model][target]


def test_explain_shows_every_host_of_each_model_asked_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["plan", OFFICE, "--against", SNAPSHOT, "--explain", "coder-32b", "--explain"]
    assert main([*args, "chat-small"]) == 0
    out = capsys.readouterr().out
    for model in ("chat-small", "coder-32b"):
        section = out.split(f"Explain {model}: target ")[1].split("\nExplain ")[0]
        listed = sorted(line.split(":")[0][4:] for line in section.splitlines()[1:] if line)
        assert listed == snapshot_hosts(SNAPSHOT), (model, section)
    assert "Explain batch-embed" not in out
    shown = plan_json(capsys, OFFICE, "--against", SNAPSHOT, "--explain", "coder-32b")
    assert list(shown["explanations"]) == ["coder-32b"]
    assert len(shown["explanations"]["coder-32b"]["candidates"]) == len(snapshot_hosts(SNAPSHOT))


def test_an_unknown_model_is_refused_before_planning(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", OFFICE, "--against", SNAPSHOT, "--explain", "chat-small", "--explain", "nope"]
    assert main(args) == 1
    captured = capsys.readouterr()
    assert captured.err.strip() == "error: --explain nope: no such model profile"
    assert captured.out == ""


def test_json_is_byte_identical_run_to_run(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for _ in range(2):
        for extra in ([], ["--explain-all"]):
            document = plan_json(capsys, COMPANY, "--against", SATURATED, *extra)
            del document["timings"]
            outputs.append(json.dumps(document, sort_keys=True))
    assert outputs[:2] == outputs[2:]


def test_the_saved_plan_keeps_what_apply_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "plan.json"
    assert main(["plan", OFFICE, "--against", SNAPSHOT, "--out", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert saved["format"] == "gridctl.plan/v1"
    assert {"actions", "deferred", "desired", "inputs", "mode"} <= set(saved)
    assert saved["plan"]["explanations"] == {}
    assert set(saved["plan"]["models"]) == {"batch-embed", "chat-small", "coder-32b"}
