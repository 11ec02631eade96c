"""The same saturated fleet preempts for direct demand and not for correlation-only demand."""

from __future__ import annotations

from gridctl.domain import UnsatisfiedCode
from gridctl.planner import plan_placement

from .builders import baseline, busy, correlated, fleet, mini_32g, profile, resident, with_residents

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
