"""Preemption's victim order and the limits a released host must meet.

Victims of equal priority and idleness go in order of their learned warm-back cost;
victims are added until the beneficiary passes every capacity rule once they are gone
(both memory ledgers, the host's model limit, colocation exclusions and ceilings);
a victim set larger than the plan's eviction budget is reported ``eviction_limit``
and stages nothing; the memory a released victim held is given back to the host's
desired ledger for work planned after it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gridctl.domain import (
    HostSnapshot,
    LearnedOnHost,
    ModelProfile,
    Plan,
    Residency,
    ResidencyState,
    UnsatisfiedCode,
)
from gridctl.planner import plan_placement

from .builders import (
    NOW,
    baseline,
    busy,
    fleet,
    mini_32g,
    policy,
    profile,
    resident,
    with_residents,
)

# mini_32g: 28,672 MB usable for new placement
USABLE_MB = 28672


def _plan(hosts: tuple[HostSnapshot, ...], profiles: list[ModelProfile], **pol: Any) -> Plan:
    urgent = [p for p in profiles if p.name.startswith("urgent")]
    demand = tuple(busy(p.name) for p in urgent)
    return plan_placement(profiles, fleet(*hosts, demand=demand), policy(**pol))


def _victims(plan: Plan) -> list[tuple[str, str]]:
    return [(p.host_id, p.model_id) for p in plan.preemptions]


def _urgent(memory_mb: int = 16000, **changes: Any) -> ModelProfile:
    return profile("urgent", memory_mb, priority=90, max_replicas=1, **changes)


def _on(host_id: str, *rows: Residency, **changes: Any) -> HostSnapshot:
    return with_residents(mini_32g(host_id, **changes), *rows)


def test_a_learned_fast_restore_makes_a_victim_cheaper_than_its_priors_say() -> None:
    # "a" and "b" tie on priority, idleness and priors (310 s); "b" has a learned 12 s
    # path on an eligible host, so it is the cheaper one to displace
    fast = LearnedOnHost("b", load_seconds=8.0, warm_seconds=4.0)
    host = replace(_on("mini-1", resident("a", 10000), resident("b", 10000)), learned=(fast,))
    slow = {"load_seconds": 300.0, "warm_seconds": 10.0}
    profiles = [
        baseline("a", 10000, priority=10, **slow),
        baseline("b", 10000, priority=10, **slow),
        _urgent(),
    ]
    assert _victims(_plan((host,), profiles)) == [("mini-1", "b")]
    # without the learned path the tie falls to the model id
    assert _victims(_plan((replace(host, learned=()),), profiles)) == [("mini-1", "a")]


def test_an_unconfigured_residency_costs_nothing_to_warm_back() -> None:
    # on m1 two unconfigured residencies (nothing to restore) and "slowish" (10 s) must go;
    # on m2 "slower" (11 s) alone: the lower total warm-back cost wins before the count
    orphans = (resident("orphan-1", 2000), resident("orphan-2", 2000))
    m1 = _on("m1", *orphans, resident("slowish", 20000))
    m2 = _on("m2", resident("slower", 20000))
    profiles = [
        baseline("slowish", 20000, priority=10, load_seconds=5.0, warm_seconds=5.0),
        baseline("slower", 20000, priority=10, load_seconds=6.0, warm_seconds=5.0),
        _urgent(),
    ]
    plan = _plan((m1, m2), profiles)
    assert _victims(plan) == [("m1", "orphan-1"), ("m1", "orphan-2"), ("m1", "slowish")]


def test_a_victim_is_enough_when_the_desired_ledger_fits_exactly() -> None:
    # releasing "a" (16,000 MB) leaves exactly 16,000 MB free on both ledgers
    host = _on("mini-1", resident("a", 16000), resident("b", USABLE_MB - 16000))
    profiles = [baseline("a", 16000, priority=10), baseline("b", USABLE_MB - 16000, priority=10)]
    plan = _plan((host,), [*profiles, _urgent()], admission_headroom_mb=0)
    assert _victims(plan) == [("mini-1", "a")]


def test_a_model_the_beneficiary_excludes_is_released_with_the_victims() -> None:
    # releasing "a" frees enough memory, but "b" is excluded from running beside it
    host = _on("mini-1", resident("a", 12000), resident("b", 8000))
    profiles = [baseline("a", 12000, priority=10), baseline("b", 8000, priority=10)]
    assert _victims(_plan((host,), [*profiles, _urgent()])) == [("mini-1", "a")]
    excluding = _urgent(colocation_excludes=("b",))
    assert _victims(_plan((host,), [*profiles, excluding])) == [("mini-1", "a"), ("mini-1", "b")]


def test_a_set_over_the_eviction_budget_stages_nothing_and_says_so() -> None:
    host = _on("mini-1", resident("v1", 10000), resident("v2", 10000))
    profiles = [baseline("v1", 10000, priority=10), baseline("v2", 10000, priority=10)]
    plan = _plan((host,), [*profiles, _urgent(24000)], max_evictions_per_plan=1)
    assert plan.preemptions == ()
    (shortfall,) = [u for u in plan.unsatisfied if u.model_id == "urgent"]
    assert shortfall.code is UnsatisfiedCode.EVICTION_LIMIT
    assert shortfall.message == "preemption on mini-1 needs 2 evictions; at most 1 per plan"
    assert {a.model_id for a in plan.assignments} == {"v1", "v2"}


def test_a_released_victims_memory_is_free_for_work_planned_after_it() -> None:
    # "batch" (24,000 MB) is released for "urgent" (16,000 MB); "small" (4,000 MB) is
    # planned later and fits in what is free now and in what is left once "batch" goes
    host = _on("mini-1", resident("batch", 24000))
    profiles = [
        baseline("batch", 24000, priority=10),
        baseline("small", 4000, priority=50),
        _urgent(),
    ]
    plan = _plan((host,), profiles)
    assert _victims(plan) == [("mini-1", "batch")]
    assert [a.host_id for a in plan.assignments_for("small")] == ["mini-1"]


def test_a_young_failed_residency_is_not_protected_by_its_minimum_residency() -> None:
    young = {"loaded_at": NOW - 10}
    host = _on(
        "mini-1",
        resident("broken", 12000, state=ResidencyState.FAILED, **young),
        resident("serving", 12000, **young),
    )
    profiles = [
        baseline("broken", 12000, priority=10, min_residency_seconds=600),
        baseline("serving", 12000, priority=10, min_residency_seconds=600),
        _urgent(),
    ]
    assert _victims(_plan((host,), profiles)) == [("mini-1", "broken")]


def test_warm_back_reads_learned_paths_only_where_the_model_is_eligible() -> None:
    slow = {"load_seconds": 300.0, "warm_seconds": 10.0}
    profiles = [
        baseline("a", 10000, priority=10, **slow),
        baseline("b", 10000, priority=10, **slow),
        _urgent(),
    ]
    mini = _on("mini-1", resident("a", 10000), resident("b", 10000))
    # "b" (and "urgent") are denied on "other", so a fast path learned there does not count
    fast = LearnedOnHost("b", load_seconds=1.0, warm_seconds=1.0)
    other = replace(mini_32g("other", denied_models=("b", "urgent")), learned=(fast,))
    assert _victims(_plan((mini, other), profiles)) == [("mini-1", "a")]
    # a learned path slower than the priors is not taken: "b" restores in 310 s either way
    # (its learned warm phase alone, 5 s, is not a restore path)
    slower = LearnedOnHost("b", load_seconds=400.0, warm_seconds=5.0)
    assert _victims(_plan((replace(mini, learned=(slower,)),), profiles)) == [("mini-1", "a")]


def test_a_model_still_draining_holds_its_slot_under_the_host_model_limit() -> None:
    # a host lowered to one model stages "b" out; while "b" drains it still takes the
    # host's only slot, so releasing "a" as well cannot make room for "urgent" yet
    host = _on("mini-1", resident("a", 4000), resident("b", 4000), max_models=1)
    profiles = [baseline("a", 4000, priority=10), baseline("b", 4000, priority=10), _urgent()]
    plan = _plan((host,), profiles)
    assert _victims(plan) == [("mini-1", "b")]
    assert {u.code for u in plan.unsatisfied if u.model_id == "urgent"} == {
        UnsatisfiedCode.INSUFFICIENT_CAPACITY
    }


def test_victims_are_added_until_the_beneficiarys_colocation_ceiling_holds() -> None:
    host = _on("mini-1", resident("a", 4000), resident("b", 4000), resident("c", 4000))
    profiles = [baseline(m, 4000, priority=10) for m in ("a", "b", "c")]

    def victims(memory_mb: int, ceiling: int) -> list[str]:
        beneficiary = _urgent(memory_mb, max_colocated_models=ceiling)
        return [model_id for _, model_id in _victims(_plan((host,), [*profiles, beneficiary]))]

    assert victims(24000, 0) == ["a", "b"]  # memory alone: 24,256 MB needs two gone
    assert victims(4000, 0) == []  # it fits beside them
    assert victims(4000, 2) == ["a", "b"]  # at most two models with "urgent"
    assert victims(4000, 1) == ["a", "b", "c"]  # "urgent" runs alone


def test_warm_back_totals_that_differ_by_a_fraction_of_a_second_still_order_hosts() -> None:
    m1 = _on("m1", resident("x", 20000))
    m2 = _on("m2", resident("y", 20000))
    profiles = [
        baseline("x", 20000, priority=10, load_seconds=10.4, warm_seconds=0.0),
        baseline("y", 20000, priority=10, load_seconds=10.2, warm_seconds=0.0),
        _urgent(),
    ]
    assert _victims(_plan((m1, m2), profiles)) == [("m2", "y")]


def test_the_released_host_is_reserved_for_the_beneficiary() -> None:
    # "rival" fits beside what is free now, but it excludes "urgent", which the host
    # is now reserved for
    host = _on("mini-1", resident("batch", 24000))
    profiles = [
        baseline("batch", 24000, priority=10),
        baseline("rival", 4000, priority=50, colocation_excludes=("urgent",)),
        _urgent(),
    ]
    plan = _plan((host,), profiles)
    assert _victims(plan) == [("mini-1", "batch")]
    assert plan.assignments_for("rival") == ()


def test_a_kept_models_colocation_ceiling_may_be_met_exactly() -> None:
    # "keeper" (priority 95, never a victim) runs with at most three models; after "a"
    # goes, "b", "keeper" and "urgent" are exactly three
    host = _on("mini-1", resident("a", 12000), resident("b", 4000), resident("keeper", 4000))
    profiles = [
        baseline("a", 12000, priority=10),
        baseline("b", 4000, priority=10),
        baseline("keeper", 4000, priority=95, max_colocated_models=3),
        _urgent(),
    ]
    assert _victims(_plan((host,), profiles)) == [("mini-1", "a")]


def test_a_young_leaving_or_failed_row_is_a_priority_victim_its_minimum_residency_spares_not() -> (
    None
):
    # minimum residency protects young *serving* work; a row already draining, unloading
    # or failed is released for higher-priority work by the priority rule itself
    young = {"loaded_at": NOW - 10}
    for state in (ResidencyState.DRAINING, ResidencyState.UNLOADING, ResidencyState.FAILED):
        host = _on(
            "mini-1",
            resident("leaving", 12000, state=state, **young),
            resident("serving", 12000, **young),
        )
        profiles = [
            baseline("leaving", 12000, priority=10, min_residency_seconds=600),
            baseline("serving", 12000, priority=10, min_residency_seconds=600),
            _urgent(),
        ]
        plan = _plan((host,), profiles)
        assert _victims(plan) == [("mini-1", "leaving")], state
        assert [p.reason for p in plan.preemptions] == [
            "priority 10 < 90: release 12000 MB for urgent"
        ], state


def test_a_kept_models_colocation_ceiling_counts_a_model_still_draining() -> None:
    # "keeper" (never a victim) accepts at most two models per host, and its host holds
    # three: the tightened ceiling stages "b" out. While "b" drains it still counts, so
    # releasing "a" as well would put "urgent" beside two models: no victim for "urgent"
    # yet, and its shortfall names the colocation conflict
    host = _on("mini-1", resident("keeper", 4000), resident("a", 4000), resident("b", 4000))
    profiles = [
        baseline("keeper", 4000, priority=95, max_colocated_models=2),
        baseline("a", 4000, priority=10),
        baseline("b", 4000, priority=10),
        _urgent(4000),
    ]
    plan = _plan((host,), profiles)
    assert _victims(plan) == [("mini-1", "b")]
    assert [p.reason for p in plan.preemptions] == [
        "host policy tightened (colocation_ceiling): keeper allows at most 2 models"
    ]
    assert {u.code for u in plan.unsatisfied if u.model_id == "urgent"} == {
        UnsatisfiedCode.COLOCATION_CONFLICT
    }
    assert sorted(a.model_id for a in plan.assignments) == ["a", "keeper"]
