"""The same saturated fleet preempts for direct demand and not for correlation-only demand."""

from __future__ import annotations

from gridctl.domain import HostSnapshot, UnsatisfiedCode
from gridctl.planner import plan_placement

from .builders import (
    NOW,
    baseline,
    busy,
    correlated,
    fleet,
    mini_32g,
    policy,
    profile,
    resident,
    with_residents,
)

SATURATED = (
    with_residents(mini_32g("mini-1"), resident("batch", 24000)),
    with_residents(mini_32g("mini-2"), resident("batch", 24000)),
)
PROFILES = [
    baseline("batch", 24000, replicas=2, priority=10),
    profile("urgent", 16000, priority=90, max_replicas=1),
]


def test_direct_demand_preempts_but_correlation_only_demand_does_not() -> None:
    direct = plan_placement(PROFILES, fleet(*SATURATED, demand=(busy("urgent"),)))
    inferred = plan_placement(PROFILES, fleet(*SATURATED, demand=(correlated("urgent"),)))

    assert [(p.model_id, p.beneficiary) for p in direct.preemptions] == [("batch", "urgent")]
    assert {u.code for u in direct.unsatisfied if u.model_id == "urgent"} == {
        UnsatisfiedCode.PREEMPTION_STAGED
    }
    assert not direct.assignments_for("urgent")  # waits for a later snapshot

    assert inferred.preemptions == ()
    assert {u.code for u in inferred.unsatisfied if u.model_id == "urgent"} == {
        UnsatisfiedCode.INSUFFICIENT_CAPACITY
    }
    assert len(inferred.assignments_for("batch")) == 2
    assert dict(direct.targets)["urgent"] == dict(inferred.targets)["urgent"] == 1


def test_after_release_the_beneficiary_is_placed() -> None:
    released = (mini_32g("mini-1"), SATURATED[1])
    plan = plan_placement(PROFILES, fleet(*released, demand=(busy("urgent"),)))
    assert [a.host_id for a in plan.assignments_for("urgent")] == ["mini-1"]
    assert plan.preemptions == ()


def test_an_idle_victim_is_released_before_a_busy_one_of_the_same_priority() -> None:
    saturated = with_residents(
        mini_32g("mini-1"),
        resident("a-busy", 10000, active_requests=3),
        resident("b-idle", 10000),
    )
    profiles = [
        baseline("a-busy", 10000, priority=10),
        baseline("b-idle", 10000, priority=10),
        profile("urgent", 16000, priority=90, max_replicas=1),
    ]
    plan = plan_placement(profiles, fleet(saturated, demand=(busy("urgent"),)))
    assert [(p.host_id, p.model_id) for p in plan.preemptions] == [("mini-1", "b-idle")]


def test_a_model_pinned_to_the_host_is_never_its_victim() -> None:
    def plan_with(pins: tuple[str, ...]) -> list[tuple[str, str]]:
        profiles = [
            baseline("keep", 20000, priority=10, pins=pins),
            profile("urgent", 16000, priority=90, max_replicas=1),
        ]
        snapshot = fleet(
            with_residents(mini_32g("mini-1"), resident("keep", 20000)),
            demand=(busy("urgent"),),
        )
        return [(p.host_id, p.model_id) for p in plan_placement(profiles, snapshot).preemptions]

    assert plan_with(()) == [("mini-1", "keep")]
    assert plan_with(("mini-1",)) == []


def _urgent_on(*hosts: HostSnapshot, **kw: object) -> list[tuple[str, str]]:
    profiles = [
        *(baseline(r.model_id, r.memory_mb, priority=10) for h in hosts for r in h.residencies),
        profile("urgent", 16000, priority=90, max_replicas=1),
    ]
    plan = plan_placement(profiles, fleet(*hosts, demand=(busy("urgent"),)), policy(**kw))
    return [(p.host_id, p.model_id) for p in plan.preemptions]


def test_victims_are_added_until_the_beneficiary_fits() -> None:
    three = with_residents(
        mini_32g("mini-1"), resident("v1", 8000), resident("v2", 8000), resident("v3", 8000)
    )
    assert _urgent_on(three) == [("mini-1", "v1"), ("mini-1", "v2")]
    profiles = [baseline(m, 8000, priority=10) for m in ("v1", "v2", "v3")]
    plan = plan_placement(
        [*profiles, profile("urgent", 16000, priority=90, max_replicas=1)],
        fleet(three, demand=(busy("urgent"),)),
    )
    (staged,) = [u for u in plan.unsatisfied if u.code is UnsatisfiedCode.PREEMPTION_STAGED]
    assert staged.message == "waiting for v1, v2 to drain on mini-1"


def test_the_admission_headroom_must_fit_beside_the_beneficiary_too() -> None:
    # 28 GB usable: releasing 12 GB leaves 16 GB + 672 MB, enough without headroom only
    two = with_residents(mini_32g("mini-1"), resident("v1", 12000), resident("v2", 12000))
    assert _urgent_on(two) == [("mini-1", "v1")]
    assert _urgent_on(two, admission_headroom_mb=1024) == [("mini-1", "v1"), ("mini-1", "v2")]


def test_a_host_with_an_idle_victim_is_preferred_to_one_with_a_busy_victim() -> None:
    busy_host = with_residents(mini_32g("mini-1"), resident("v1", 20000, active_requests=1))
    idle_host = with_residents(mini_32g("mini-2"), resident("v2", 20000))
    assert _urgent_on(busy_host, idle_host) == [("mini-2", "v2")]


def test_minimum_residency_protects_a_victim_until_it_has_elapsed() -> None:
    def victims(loaded_ago: float) -> list[tuple[str, str]]:
        row = resident("young", 20000, loaded_at=NOW - loaded_ago)
        profiles = [
            baseline("young", 20000, priority=10, min_residency_seconds=600),
            profile("urgent", 16000, priority=90, max_replicas=1),
        ]
        snapshot = fleet(with_residents(mini_32g("mini-1"), row), demand=(busy("urgent"),))
        return [(p.host_id, p.model_id) for p in plan_placement(profiles, snapshot).preemptions]

    assert victims(599) == []
    assert victims(600) == [("mini-1", "young")]


def test_a_staged_preemption_names_its_victims_and_host() -> None:
    plan = plan_placement(PROFILES, fleet(*SATURATED, demand=(busy("urgent"),)))
    (staged,) = [u for u in plan.unsatisfied if u.code is UnsatisfiedCode.PREEMPTION_STAGED]
    assert staged.message == f"waiting for batch to drain on {plan.preemptions[0].host_id}"


def test_the_explanation_shows_the_host_chosen_for_a_staged_preemption() -> None:
    plan = plan_placement(PROFILES, fleet(*SATURATED, demand=(busy("urgent"),)))
    host_id = plan.preemptions[0].host_id
    (urgent,) = [e for e in plan.explanations if e.model_id == "urgent"]
    chosen = [c for c in urgent.candidates if c.chosen]
    assert [c.host_id for c in chosen] == [host_id]
    assert chosen[0].detail.endswith("[preemption staged; placed after release]")
