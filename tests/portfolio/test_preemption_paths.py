"""Ranked preemption paths, the victim's ready-replica floor and the 1.5x replacement rule."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gridctl.demand import OutcomeScore
from gridctl.domain import ModelProfile
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_types import (
    AdmissionState,
    CandidateRow,
    PortfolioInputs,
    PortfolioResult,
)
from tests.portfolio.builders import POLICY, box, inputs, model, resident, workload


def row(result: PortfolioResult, workload: str, model_id: str) -> CandidateRow:
    return next(c for c in result.candidates if c.workload == workload and c.model_id == model_id)


def coder(replicas: int = 1) -> ModelProfile:
    return replace(model("coder-7b", {"coding": 1.0}, priority=60), max_replicas=replicas)


def test_scan_keeps_up_to_sixteen_ranked_paths() -> None:
    for hosts, expected in ((3, 3), (16, 16), (18, 16)):
        fleet = tuple(
            box(f"b{i:02d}", residencies=(resident(f"idle-{i:02d}"),)) for i in range(hosts)
        )
        profiles = (coder(), *(model(f"idle-{i:02d}", {}) for i in range(hosts)))
        result = plan_portfolio(inputs(profiles, fleet, (workload("coding", 20),)))
        paths = row(result, "coding", "coder-7b").preemption_paths
        assert len(paths) == expected == min(hosts, POLICY.preemption_path_limit)
        assert [p.host_id for p in paths] == [f"b{i:02d}" for i in range(expected)]
        assert all(len(p.victims) == 1 and not p.replacement for p in paths)
        # the controller takes the first path, and only that one
        assert [(p.host_id, p.beneficiary) for p in result.plan.preemptions] == [
            ("b00", "coder-7b")
        ]


def scarce(
    pressure: float,
    *,
    spare_host: bool = False,
    coding_requests: int = 20,
    rate: float | None = None,
    coder_replicas: int = 1,
) -> PortfolioInputs:
    """research served by the only ready copy of ``research-7b`` (pressure 1.0); coding
    wants ``coder-7b`` (higher priority) with ``pressure`` x that pressure."""
    profiles = (
        coder(coder_replicas),
        model("research-7b", {"research": 1.0}),
        model("idle-7b", {}),
    )
    hosts = [box("b1", residencies=(resident("research-7b"),))]
    if spare_host:
        hosts.append(box("b2", residencies=(resident("idle-7b"),)))
    work = (
        workload("coding", coding_requests, concurrency=pressure)
        if rate is None
        else workload("coding", coding_requests, concurrency=pressure, requests_per_minute=rate),
        workload("research", 20, concurrency=1.0),
    )
    return inputs(profiles, tuple(hosts), work)


def test_replacement_needs_one_and_a_half_times_the_incumbents_pressure() -> None:
    below = plan_portfolio(scarce(1.49))
    candidate = row(below, "coding", "coder-7b")
    assert candidate.preemption_paths == () and not candidate.usable
    assert candidate.rejection == (
        "no authorized path (b1: pressure 1.49 < 1.5 x 1.00 of research-7b)"
    )
    assert below.plan.preemptions == ()
    rows = {r.workload: r for r in below.admission}
    assert rows["research"].state is AdmissionState.READY
    assert rows["coding"].state is AdmissionState.CAPACITY_CONTENDED
    assert "1.49 < 1.5 x 1.00" in rows["coding"].reason

    at = plan_portfolio(scarce(1.5))
    (path,) = row(at, "coding", "coder-7b").preemption_paths
    assert (path.host_id, path.victims, path.replacement) == ("b1", ("research-7b",), True)
    assert path.victim_pressure == 1.0
    assert dict(at.mapping) == {"coding": "coder-7b", "research": None}
    assert [(p.host_id, p.model_id, p.beneficiary) for p in at.plan.preemptions] == [
        ("b1", "research-7b", "coder-7b")
    ]
    assert at.preemption_model == "coder-7b"
    rows = {r.workload: r for r in at.admission}
    assert rows["coding"].state is AdmissionState.PLANNED
    assert rows["coding"].reason == "preemption staged: research-7b on b1"
    assert rows["research"].state is AdmissionState.DEFERRED


def test_an_unvalidated_replacement_is_capped_at_one_canary() -> None:
    def coder_demand(outcomes: tuple[OutcomeScore, ...]) -> float:
        base = scarce(30.0, rate=120.0, coder_replicas=3)
        result = plan_portfolio(replace(base, outcomes=outcomes))
        assert [p.beneficiary for p in result.plan.preemptions] == ["coder-7b"]
        (demand,) = [d for d in result.demand if d.model_id == "coder-7b"]
        return demand.requests_per_minute

    one_replica = 60.0 * 0.7 / POLICY.demand_headroom / 2.0  # requests per minute
    assert coder_demand(()) < one_replica
    validated = OutcomeScore(
        "coder-7b", "coding", "", 20.0, 1.0, 1.0, 4.0, 0.0, None, 0.0, 0.0, None, 0.0
    )
    assert coder_demand((validated,)) == 120.0


def test_a_floor_preserving_path_is_selected_before_a_replacement() -> None:
    for pressure in (1.0, 1.49, 1.5, 30.0):
        result = plan_portfolio(scarce(pressure, spare_host=True))
        paths = row(result, "coding", "coder-7b").preemption_paths
        assert paths[0].host_id == "b2" and not paths[0].replacement
        assert [p.replacement for p in paths[1:]] == ([True] if pressure >= 1.5 else [])
        assert [(p.host_id, p.model_id) for p in result.plan.preemptions] == [("b2", "idle-7b")], (
            pressure
        )
        assert dict(result.mapping) == {"coding": "coder-7b", "research": "research-7b"}


@pytest.mark.parametrize("pressure", [1.5, 100.0])
def test_a_canary_never_takes_a_speculative_models_only_active_copy(pressure: float) -> None:
    # one request: the concurrency gate admits a canary only, however large the pressure
    result = plan_portfolio(scarce(pressure, coding_requests=1))
    gate = next(g for g in result.gates if g.workload == "coding")
    assert gate.admitted and gate.canary_only
    candidate = row(result, "coding", "coder-7b")
    assert candidate.preemption_paths == ()
    assert "would remove the only ready copy of research-7b" in (candidate.rejection or "")
    assert result.plan.preemptions == ()
