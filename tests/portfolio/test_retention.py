"""A below-gate workload keeps the ready model that serves it, in spare capacity only.

A sparse workload (a video job every half hour) never reaches the evidence gate, so a
model loaded for it used to go as soon as its scale-down cooldown passed, and the next
job found nothing ready. With the fleet's spare-capacity proof, a workload that has an
observation in the demand window keeps the READY model the router answers it with, as one
correlation-only canary: it fills spare capacity and never preempts. Without the proof,
without an observation or without a ready model, nothing is kept; and thin evidence
never loads a different model.
"""

from __future__ import annotations

from gridctl.domain import ModelDemand, ModelProfile, ResidencyState
from gridctl.planner.portfolio import plan_portfolio
from tests.portfolio.builders import box, inputs, model, resident, workload

VIDEO = model("video-gen", {"video": 0.8})
BETTER = model("video-pro", {"video": 0.95})  # scores higher, not resident


def roomy(*residents: str, state: ResidencyState = ResidencyState.READY) -> tuple:
    loaded = box("b1", slots=2, residencies=tuple(resident(m, state) for m in residents))
    return (loaded, *(box(f"b{i}", slots=2) for i in range(2, 6)))


def decide(profiles: tuple[ModelProfile, ...], hosts: tuple, requests: int) -> tuple:
    result = plan_portfolio(inputs(profiles, hosts, (workload("video", requests, 0.0),)))
    gate = next(g for g in result.gates if g.workload == "video")
    return gate, dict(result.mapping), dict(result.plan.targets)


def test_a_ready_model_of_a_sparse_workload_stays_in_spare_capacity() -> None:
    gate, mapping, targets = decide((VIDEO,), roomy("video-gen"), requests=1)
    assert gate.admitted and gate.path == "resident" and gate.canary_only
    assert "video-gen is ready and serves it" in gate.reason
    assert mapping == {"video": "video-gen"}
    assert targets.get("video-gen") == 1


def test_no_observation_in_the_window_keeps_nothing() -> None:
    gate, mapping, targets = decide((VIDEO,), roomy("video-gen"), requests=0)
    assert not gate.admitted and mapping == {}
    assert targets.get("video-gen", 0) == 0


def test_without_the_spare_capacity_proof_nothing_is_kept() -> None:
    scarce = (box("b1", slots=1, residencies=(resident("video-gen"),)), box("b2", slots=1))
    gate, _mapping, targets = decide((VIDEO, model("other", {"coding": 1.0})), scarce, 1)
    assert not gate.admitted and gate.path == "none"
    assert targets.get("video-gen", 0) == 0


def test_a_model_that_is_not_ready_is_not_kept() -> None:
    gate, _mapping, targets = decide(
        (VIDEO,), roomy("video-gen", state=ResidencyState.DRAINING), requests=1
    )
    assert not gate.admitted
    assert targets.get("video-gen", 0) == 0


def test_thin_evidence_never_loads_a_better_model() -> None:
    """The only candidate of a kept workload is the model already serving it."""
    gate, mapping, targets = decide((VIDEO, BETTER), roomy("video-gen"), requests=1)
    assert gate.path == "resident"
    assert mapping == {"video": "video-gen"}
    assert targets.get("video-pro", 0) == 0


def rhythm(gap_minutes: float, age_minutes: float) -> tuple:
    """A video workload with nothing in the demand window, whose last arrivals came up
    to ``gap_minutes`` apart, the last ``age_minutes`` ago."""
    demand = workload(
        "video",
        0,
        0.0,
        recurrence_gap_seconds=gap_minutes * 60.0,
        last_arrival_age_seconds=age_minutes * 60.0,
    )
    result = plan_portfolio(inputs((VIDEO,), roomy("video-gen"), (demand,)))
    gate = next(g for g in result.gates if g.workload == "video")
    return gate, dict(result.mapping), dict(result.plan.targets)


def test_a_workload_whose_next_arrival_is_expected_keeps_its_model() -> None:
    """Video jobs 34 minutes apart: 40 minutes after the last (nothing in the window,
    and the next is not overdue: 1.5 x 34 = 51) the model stays."""
    gate, mapping, targets = rhythm(34, 40)
    assert gate.admitted and gate.path == "resident" and gate.canary_only
    assert "arrivals come up to 34 min apart and the last was 40 min ago" in gate.reason
    assert mapping == {"video": "video-gen"} and targets.get("video-gen") == 1


def test_an_overdue_rhythm_keeps_nothing() -> None:
    gate, mapping, targets = rhythm(34, 52)
    assert not gate.admitted and mapping == {}
    assert targets.get("video-gen", 0) == 0


def test_a_rhythm_slower_than_the_policys_bound_keeps_nothing() -> None:
    gate, _mapping, targets = rhythm(61, 40)  # the default bound is 60 minutes
    assert not gate.admitted and targets.get("video-gen", 0) == 0


def rhythm_on(hosts: tuple, profiles: tuple[ModelProfile, ...], demand: tuple = ()) -> tuple:
    video = workload(
        "video", 0, 0.0, recurrence_gap_seconds=34 * 60.0, last_arrival_age_seconds=40 * 60.0
    )
    result = plan_portfolio(inputs(profiles, hosts, (video,), demand))
    gate = next(g for g in result.gates if g.workload == "video")
    return gate, dict(result.plan.targets)


def test_a_rhythm_keeps_a_resident_model_without_the_proof_while_nobody_lacks_room() -> None:
    """Keeping what is resident loads nothing: the exploration proof is not needed, only
    a base plan in which no model lacks capacity."""
    full = (box("b1", slots=1, residencies=(resident("video-gen"),)), box("b2", slots=1))
    gate, targets = rhythm_on(full, (VIDEO, model("other", {"coding": 1.0})))
    assert gate.admitted and gate.path == "resident"
    assert gate.reason.endswith("with no capacity shortfall")
    assert targets.get("video-gen") == 1


def test_a_rhythm_lets_the_model_go_once_a_demanded_model_lacks_room() -> None:
    crowded = (
        box("b1", slots=1, residencies=(resident("video-gen"),)),
        box("b2", slots=1, residencies=(resident("other"),)),
    )
    wanted = (ModelDemand("third", requests_per_minute=60.0, confidence=1.0),)
    profiles = (VIDEO, model("other", {"coding": 1.0}, min_replicas=1), model("third", {}))
    gate, targets = rhythm_on(crowded, profiles, wanted)
    assert not gate.admitted and gate.path == "none"
    assert targets.get("video-gen", 0) == 0
