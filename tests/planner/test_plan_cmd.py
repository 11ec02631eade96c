"""``gridctl plan``: the diff, JSON, --explain, --detailed-exitcode and error paths."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
OFFICE = str(ROOT / "tests/planner/fixtures/office")
BROKEN = str(ROOT / "tests/planner/fixtures/broken")
SNAPSHOTS = ROOT / "examples/snapshots"


def snap(name: str) -> str:
    return str(SNAPSHOTS / f"{name}.json")


def test_human_diff_places_and_summarises(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", OFFICE, "--against", snap("office")]) == 0
    out = capsys.readouterr().out
    assert "  + coder-32b on gpu-1 (vllm, 20480 MB): direct replica 1 of 2" in out
    assert "  ! coder-32b: insufficient_capacity, 1 missing" in out
    assert out.rstrip().endswith(
        "Plan: 1 to place, 0 to destroy, 0 to replace, 1 held, 1 unsatisfied."
    )


def test_saturated_fleet_shows_a_staged_preemption(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", OFFICE, "--against", snap("office-saturated")]) == 0
    out = capsys.readouterr().out
    assert "  -/+ batch-embed on gpu-1 for coder-32b: " in out
    assert "  ! coder-32b on gpu-1: preemption_staged" in out
    assert "Plan: 0 to place, 1 to destroy, 1 to replace," in out


def test_json_has_the_documented_shape(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", OFFICE, "--against", snap("office-saturated"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["input_digest"]) == 64
    assert isinstance(doc["timings"]["plan_ms"], float)
    assert {"model_id", "host_id", "runtime", "memory_mb", "reason"} <= set(doc["assignments"][0])
    assert doc["preemptions"] == [
        {
            "host_id": "gpu-1",
            "model_id": "batch-embed",
            "beneficiary": "coder-32b",
            "reason": doc["preemptions"][0]["reason"],
        }
    ]
    assert {"model_id", "code", "message"} <= set(doc["unsatisfied"][0])
    assert doc["explanations"] == {}  # host rows only with --explain
    assert doc["models"]["coder-32b"]["hosts_considered"] == 6
    main(
        ["plan", OFFICE, "--against", snap("office-saturated"), "--json", "--explain", "coder-32b"]
    )
    doc = json.loads(capsys.readouterr().out)
    hosts = [c["host_id"] for c in doc["explanations"]["coder-32b"]["candidates"]]
    assert hosts == sorted(hosts) and len(hosts) == 6


def test_json_is_byte_identical_apart_from_timings(capsys: pytest.CaptureFixture[str]) -> None:
    outputs = []
    for _ in range(2):
        main(["plan", OFFICE, "--against", snap("office"), "--json"])
        doc = json.loads(capsys.readouterr().out)
        del doc["timings"]
        outputs.append(json.dumps(doc, sort_keys=True))
    assert outputs[0] == outputs[1]


def test_explain_lists_every_host_with_a_reason(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", OFFICE, "--against", snap("office"), "--explain", "coder-32b"]) == 0
    out = capsys.readouterr().out
    assert "Explain coder-32b: target 2" in out
    assert "  * gpu-1: score" in out and "existing" not in out.split("gpu-1: score")[1][:20]
    assert "lap-1: rejected data_tier" in out
    assert "lap-2: rejected host_state" in out
    assert "lap-3: rejected heartbeat_stale" in out
    assert "ext-1: rejected host_unmanaged" in out


def test_explain_with_json_keeps_only_that_model(capsys: pytest.CaptureFixture[str]) -> None:
    main(["plan", OFFICE, "--against", snap("office"), "--json", "--explain", "chat-small"])
    doc = json.loads(capsys.readouterr().out)
    assert list(doc["explanations"]) == ["chat-small"]


# office-steady places nothing, but chat-small has two replicas for a target of one: the
# reconciler drains the excess, and a drain is a change (exit 2), as in `terraform plan`.
@pytest.mark.parametrize(
    ("snapshot", "code"), [("office-steady", 2), ("office", 2), ("office-saturated", 2)]
)
def test_detailed_exitcode(snapshot: str, code: int, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", OFFICE, "--against", snap(snapshot), "--detailed-exitcode"]) == code


def test_bad_desired_state_prints_each_issue(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", BROKEN, "--against", snap("office"), "--detailed-exitcode"]) == 1
    err = capsys.readouterr().err
    assert "models.yaml:6:3: ModelProfile/no-memory: /spec/memory_mb:" in err


def test_bad_snapshot_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"now": 1, "hosts": [{"host_id": "h"}]}))
    assert main(["plan", OFFICE, "--against", str(bad)]) == 1
    assert "resources" in capsys.readouterr().err
    bad.write_text("{not json")
    assert main(["plan", OFFICE, "--against", str(bad)]) == 1
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["plan", OFFICE, "--against", str(tmp_path / "missing.json")]) == 1


def test_unknown_explain_model_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", OFFICE, "--against", snap("office"), "--explain", "nope"]) == 1
    assert "no such model profile" in capsys.readouterr().err


def test_no_eligible_host_names_the_rejections(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A fleet drained by hand says so: "no host passes" alone hid that every host was
    draining."""
    snapshot = json.loads(Path(snap("office")).read_text())
    for host in snapshot["hosts"]:
        if host.get("kind", "managed") == "managed":
            host["allocator"]["state"] = "draining"
    path = tmp_path / "drained.json"
    path.write_text(json.dumps(snapshot))
    assert main(["plan", OFFICE, "--against", str(path), "--json"]) == 0
    unsatisfied = json.loads(capsys.readouterr().out)["unsatisfied"]
    messages = [u["message"] for u in unsatisfied if u["code"] == "no_eligible_nodes"]
    assert messages, unsatisfied
    for message in messages:
        assert message.startswith("no host passes the hard rules (6 hosts considered: ")
        assert "host_state (host is draining)" in message, message
