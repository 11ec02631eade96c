"""Qualification evidence in placement: a host that reports it offers only qualified runtimes.

A host reporting ``qualified_runtimes`` rejects a profile none of whose runtimes
passed there (``runtime_not_qualified``, in the plan's explanation and in
``gridctl plan --explain``); a host that does not report the field (an older
node, or one never qualified) places exactly as before. With several
compatible runtimes, a new placement picks only among the qualified ones.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.cli.main import main
from gridctl.domain import FleetSnapshot, HostSnapshot, ModelProfile
from gridctl.planner.planning import plan_placement

from .builders import baseline, fleet, host

ROOT = Path(__file__).resolve().parents[2]
RUNTIMES = ("llama.cpp", "llama.cpp-router", "vllm")


def _candidate(snapshot: FleetSnapshot, profiles: list[ModelProfile], model: str, host_id: str):
    plan = plan_placement(profiles, snapshot)
    explanation = next(e for e in plan.explanations if e.model_id == model)
    return plan, next(c for c in explanation.candidates if c.host_id == host_id)


def test_a_host_without_evidence_for_the_runtime_is_rejected_by_name() -> None:
    snapshot = fleet(host("box-1", 16384, qualified_runtimes=()))
    plan, row = _candidate(snapshot, [baseline("chat", 2048)], "chat", "box-1")
    assert plan.assignments == ()
    assert row.rejection == "runtime_not_qualified"
    assert "llama.cpp" in row.detail
    assert [u.code.value for u in plan.unsatisfied] == ["no_eligible_nodes"]


def test_a_host_that_reports_nothing_places_as_before() -> None:
    for reported in (None, ("llama.cpp",)):
        snapshot = fleet(host("box-1", 16384, qualified_runtimes=reported))
        plan, row = _candidate(snapshot, [baseline("chat", 2048)], "chat", "box-1")
        assert [(a.host_id, a.runtime) for a in plan.assignments] == [("box-1", "llama.cpp")]
        assert row.rejection is None and row.chosen


def test_only_the_qualified_runtime_is_chosen_among_compatible_ones() -> None:
    # llama.cpp-router has the smaller footprint, but only llama.cpp passed here
    chat = baseline(
        "chat",
        2048,
        runtimes=("llama.cpp", "llama.cpp-router"),
        runtime_memory_mb={"llama.cpp-router": 1024},
    )
    both = ("llama.cpp", "llama.cpp-router")
    qualified = host("box-1", 16384, runtimes=both, qualified_runtimes=("llama.cpp",))
    plan = plan_placement([chat], fleet(qualified))
    assert [a.runtime for a in plan.assignments] == ["llama.cpp"]
    unclaimed = host("box-1", 16384, runtimes=both)
    assert [a.runtime for a in plan_placement([chat], fleet(unclaimed)).assignments] == [
        "llama.cpp-router"
    ]


def _office_with(tmp_path: Path, qualified: list[str]) -> str:
    doc = json.loads((ROOT / "examples/snapshots/office.json").read_text("utf-8"))
    for entry in doc["hosts"]:
        if entry["host_id"] == "gpu-1":
            entry["resources"]["qualified_runtimes"] = qualified
    snapshot = tmp_path / f"office-{len(qualified)}.json"
    snapshot.write_text(json.dumps(doc), "utf-8")
    return str(snapshot)


def test_the_rejection_shows_in_plan_explain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    office = str(ROOT / "tests/planner/fixtures/office")
    nothing_passed = _office_with(tmp_path, [])
    assert main(["plan", office, "--against", nothing_passed, "--explain", "coder-32b"]) == 0
    out = capsys.readouterr().out
    assert "gpu-1: rejected runtime_not_qualified: no passing qualification for" in out
    # only llama.cpp passed on gpu-1: coder-32b (vllm or llama.cpp) goes there on llama.cpp
    llama_only = _office_with(tmp_path, ["llama.cpp"])
    assert main(["plan", office, "--against", llama_only, "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)["assignments"]
    coder = [(a["host_id"], a["runtime"]) for a in placed if a["model_id"] == "coder-32b"]
    assert ("gpu-1", "llama.cpp") in coder and ("gpu-1", "vllm") not in coder


@st.composite
def hosts_and_profiles(draw: st.DrawFn) -> tuple[list[HostSnapshot], list[ModelProfile]]:
    hosts = []
    for index in range(draw(st.integers(1, 4))):
        offered = tuple(sorted(draw(st.sets(st.sampled_from(RUNTIMES), min_size=1))))
        claimed = draw(st.none() | st.sets(st.sampled_from(RUNTIMES)).map(sorted).map(tuple))
        hosts.append(
            host(
                f"h-{index}",
                draw(st.sampled_from((4096, 16384))),
                runtimes=offered,
                qualified_runtimes=claimed,
            )
        )
    profiles = []
    for index in range(draw(st.integers(1, 3))):
        runtimes = tuple(sorted(draw(st.sets(st.sampled_from(RUNTIMES), min_size=1))))
        replicas = draw(st.integers(1, 3))
        profiles.append(baseline(f"m-{index}", 1024, replicas, runtimes=runtimes))
    return hosts, profiles


@settings(max_examples=60, deadline=None)
@given(hosts_and_profiles())
def test_no_placement_on_a_runtime_without_evidence(
    case: tuple[list[HostSnapshot], list[ModelProfile]],
) -> None:
    """A host that reports qualification never receives a runtime that did not pass there,
    and a host that reports nothing is never rejected for qualification."""
    hosts, profiles = case
    plan = plan_placement(profiles, fleet(*hosts))
    by_id = {h.host_id: h for h in hosts}
    for assignment in plan.assignments:
        claimed = by_id[assignment.host_id].resources.qualified_runtimes
        assert claimed is None or assignment.runtime in claimed
    for explanation in plan.explanations:
        for row in explanation.candidates:
            if row.rejection == "runtime_not_qualified":
                assert by_id[row.host_id].resources.qualified_runtimes is not None


@pytest.mark.parametrize("qualified", [None, ("llama.cpp",)])
@pytest.mark.parametrize("listed", ["denied_models", "allowed_models"])
def test_allow_and_deny_lists_hold_beside_qualification(
    qualified: tuple[str, ...] | None, listed: str
) -> None:
    """Qualification joins the host's shape without moving the allow and deny lists the
    class search reads: a model a host denies (or does not allow) never goes there."""
    names = ("chat",) if listed == "denied_models" else ("other",)
    hosts = (
        host("listed", 16384, qualified_runtimes=qualified, **{listed: names}),
        host("open", 16384, qualified_runtimes=qualified),
    )
    plan = plan_placement([baseline("chat", 2048, replicas=2)], fleet(*hosts))
    assert [a.host_id for a in plan.assignments] == ["open"]
