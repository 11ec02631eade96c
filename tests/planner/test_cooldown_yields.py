"""A replica that only the scale-down cooldown keeps yields to demand of its own priority.

The cooldown stops a quiet minute from unloading a model that was just used; it does not
hold a full host against a demanded model of the same priority. Each rule is checked on
both sides: the beneficiary's class, the victim's own demand, its activity and state,
its minimum residency and the priorities.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain import ModelDemand, Plan, UnsatisfiedCode
from gridctl.planner import plan_placement

from .builders import NOW, busy, correlated, fleet, mini_32g, profile, resident, with_residents

# used four minutes ago: inside the 600 s scale-down cooldown, past the 300 s minimum residency
_RECENT = {"loaded_at": NOW - 3600, "last_used_at": NOW - 240}


def _plan(
    *,
    incumbent: dict[str, Any] | None = None,
    demand: tuple[ModelDemand, ...] = (busy("video"),),
    incumbent_priority: int = 50,
    video_priority: int = 50,
) -> Plan:
    row = resident("research", 24000, **(_RECENT | (incumbent or {})))
    profiles = [
        profile("research", 24000, priority=incumbent_priority),
        profile("video", 16000, priority=video_priority, max_replicas=1),
    ]
    return plan_placement(profiles, fleet(with_residents(mini_32g("mini-1"), row), demand=demand))


def _victims(plan: Plan) -> list[tuple[str, str, str]]:
    return [(p.host_id, p.model_id, p.beneficiary) for p in plan.preemptions]


def test_an_idle_replica_held_by_the_cooldown_yields_to_direct_demand_of_its_priority() -> None:
    plan = _plan()
    assert dict(plan.targets)["research"] == 1  # the cooldown still wants it
    assert _victims(plan) == [("mini-1", "research", "video")]
    reason = plan.preemptions[0].reason
    assert "priority 50 = 50" in reason and "held only by the cooldown" in reason
    assert {u.code for u in plan.unsatisfied if u.model_id == "video"} == {
        UnsatisfiedCode.PREEMPTION_STAGED
    }


def test_correlation_only_demand_does_not_take_it() -> None:
    plan = _plan(demand=(correlated("video"),))
    assert _victims(plan) == []
    assert [a.host_id for a in plan.assignments_for("research")] == ["mini-1"]


def test_a_replica_with_its_own_direct_demand_keeps_its_host() -> None:
    plan = _plan(demand=(busy("video"), busy("research", rpm=1.0)))
    assert _victims(plan) == []


def test_a_busy_replica_keeps_its_host() -> None:
    assert _victims(_plan(incumbent={"active_requests": 1})) == []
    assert _victims(_plan(incumbent={"active_requests": 0})) == [("mini-1", "research", "video")]


def test_a_young_replica_keeps_its_minimum_residency() -> None:
    young = {"loaded_at": NOW - 200, "last_used_at": NOW - 100}
    assert _victims(_plan(incumbent=young)) == []


def test_a_replica_that_correlated_or_portfolio_demand_wants_keeps_its_host() -> None:
    # demand of any kind (here correlation, as a workload portfolio's demand is) is service
    # the planner was asked for, not the cooldown's hold
    wanted = _plan(demand=(busy("video"), correlated("research", rpm=1.0)))
    assert dict(wanted.targets)["research"] == 1
    assert _victims(wanted) == []


def test_a_model_with_a_minimum_keeps_its_replica() -> None:
    profiles = [
        profile("research", 24000, priority=50, min_replicas=1),
        profile("video", 16000, priority=50, max_replicas=1),
    ]
    row = resident("research", 24000, **_RECENT)
    snapshot = fleet(with_residents(mini_32g("mini-1"), row), demand=(busy("video"),))
    assert _victims(plan_placement(profiles, snapshot)) == []


def test_a_higher_priority_idle_replica_is_never_taken() -> None:
    assert _victims(_plan(incumbent_priority=51)) == []
    assert _victims(_plan(video_priority=51)) == [("mini-1", "research", "video")]


def test_a_lower_priority_victim_is_still_preferred() -> None:
    hosts = (
        with_residents(mini_32g("mini-1"), resident("research", 24000, **_RECENT)),
        with_residents(mini_32g("mini-2"), resident("batch", 24000, **_RECENT)),
    )
    profiles = [
        profile("research", 24000, priority=50),
        profile("batch", 24000, priority=10),
        profile("video", 16000, priority=50, max_replicas=1),
    ]
    plan = plan_placement(profiles, fleet(*hosts, demand=(busy("video"),)))
    assert _victims(plan) == [("mini-2", "batch", "video")]


@settings(max_examples=150, deadline=None)
@given(
    victim_priority=st.integers(0, 100),
    beneficiary_priority=st.integers(0, 100),
    active=st.integers(0, 3),
    own_rpm=st.sampled_from([0.0, 0.5, 30.0]),
    own_correlated=st.booleans(),
    direct=st.booleans(),
)
def test_a_victim_is_never_of_higher_priority_busy_or_demanded(
    victim_priority: int,
    beneficiary_priority: int,
    active: int,
    own_rpm: float,
    own_correlated: bool,
    direct: bool,
) -> None:
    """Whatever the mix, a staged victim is of lower priority, or of equal priority, idle,
    ready and without demand of its own; and only direct demand stages one."""
    wanted = busy("video") if direct else correlated("video")
    extra: tuple[ModelDemand, ...] = (busy("research", rpm=own_rpm),) if own_rpm else ()
    if own_correlated:
        extra = (*extra, correlated("research", rpm=1.0))
    unwanted = own_rpm == 0.0 and not own_correlated
    plan = _plan(
        incumbent={"active_requests": active},
        demand=(wanted, *extra),
        incumbent_priority=victim_priority,
        video_priority=beneficiary_priority,
    )
    if plan.preemptions:
        assert direct
        assert victim_priority <= beneficiary_priority
        if victim_priority == beneficiary_priority:
            assert active == 0 and unwanted
    if direct and victim_priority < beneficiary_priority:
        assert _victims(plan) == [("mini-1", "research", "video")]
    if direct and victim_priority == beneficiary_priority and active == 0 and unwanted:
        assert _victims(plan) == [("mini-1", "research", "video")]
