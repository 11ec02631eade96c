"""Replica targets: demand classes, bounds and the performance factor."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.config.snapshots import residency_from_row
from gridctl.domain import ControllerPolicy, DemandClass, Residency, ResidencyState
from gridctl.planner import plan_placement, replica_target
from gridctl.planner.targets import FleetFacts

from .builders import NOW, demand, fleet, host, profile, resident, with_residents

POLICY = ControllerPolicy()
NO_FLEET = FleetFacts(ready=0, recent_ready=0, startup_seconds=40.0)


def test_replica_classes_run_baseline_direct_inferred() -> None:
    p = profile("m", min_replicas=1, max_replicas=4)
    t = replica_target(
        p,
        demand("m", requests_per_minute=30, correlated_requests_per_minute=150),
        NO_FLEET,
        POLICY,
    )
    classes = [t.class_of(i) for i in range(t.replicas)]
    assert classes[0] is DemandClass.BASELINE
    assert DemandClass.DIRECT in classes and classes[-1] is DemandClass.INFERRED


def test_inferred_demand_is_capped_by_the_observed_peak() -> None:
    p = profile("m", max_replicas=10)
    capped = replica_target(
        p,
        demand("m", correlated_requests_per_minute=600, observed_peak_requests_per_minute=21),
        NO_FLEET,
        POLICY,
    )
    uncapped = replica_target(p, demand("m", correlated_requests_per_minute=600), NO_FLEET, POLICY)
    assert capped.replicas < uncapped.replicas


def test_pins_fix_the_target() -> None:
    t = replica_target(profile("m", pins=("a", "b"), max_replicas=5), None, NO_FLEET, POLICY)
    assert t.replicas == 2 and t.first_class is DemandClass.PINNED


def test_performance_factor_is_bounded() -> None:
    hot = demand("m", requests_per_minute=60, offered_concurrency=1000)
    t = replica_target(profile("m", max_replicas=3), hot, NO_FLEET, POLICY)
    assert t.performance_factor == POLICY.performance_factor_max
    light = demand("m", requests_per_minute=1, offered_concurrency=0.1)
    assert replica_target(profile("m"), light, NO_FLEET, POLICY).performance_factor == 1.0


def test_offered_concurrency_alone_is_not_direct_demand() -> None:
    """One definition everywhere: no rate, queue or errors means no direct replica, so a
    row the domain calls correlation-only can never place direct work or preempt."""
    row = demand("m", offered_concurrency=3.0, correlated_requests_per_minute=6.0)
    assert row.correlation_only and not row.has_direct_evidence
    t = replica_target(profile("m", max_replicas=4), row, NO_FLEET, POLICY)
    assert t.direct == 0 and t.first_class is not DemandClass.DIRECT
    direct = replace(row, requests_per_minute=30.0)
    assert not direct.correlation_only
    assert replica_target(profile("m", max_replicas=4), direct, NO_FLEET, POLICY).direct >= 1


def test_lookahead_only_projects_rising_trends_within_the_horizon() -> None:
    p = profile("m", max_replicas=20)
    base = demand("m", requests_per_minute=60)
    flat = replica_target(p, base, NO_FLEET, POLICY).replicas
    falling = replica_target(
        p, demand("m", requests_per_minute=60, trend_per_minute=-50), NO_FLEET, POLICY
    )
    assert falling.replicas == flat
    no_confidence = demand("m", requests_per_minute=60, trend_per_minute=50, confidence=0.0)
    assert replica_target(p, no_confidence, NO_FLEET, POLICY).replicas == flat
    huge = demand("m", requests_per_minute=60, trend_per_minute=1e6)
    slow_start = FleetFacts(ready=0, recent_ready=0, startup_seconds=3600.0)
    assert replica_target(p, huge, slow_start, POLICY).replicas <= 2 * flat + 1


# -- a ready single-model engine's live batch width (allocator.md, profile command) ------

WIDE = demand("m", requests_per_minute=120, offered_concurrency=6.0)  # 6 requests in flight


@given(st.integers(min_value=0, max_value=64), st.integers(min_value=1, max_value=16))
@settings(max_examples=60, deadline=None)
def test_a_live_width_only_ever_widens_the_declared_batch(live: int, declared: int) -> None:
    """At or below the profile's replica_concurrency the live width changes nothing; above
    it, the same demand never needs more replicas, and the reason names the width."""
    p = profile("m", replica_concurrency=declared, max_replicas=64)
    plain = replica_target(p, WIDE, NO_FLEET, POLICY)
    seen = replica_target(p, WIDE, NO_FLEET._replace(live_width=live), POLICY)
    if live <= declared:
        assert seen == plain
    else:
        assert seen.replicas <= plain.replicas
        assert f"live batch width {live}" in seen.reason


def test_a_proven_width_of_sixteen_serves_six_in_flight_with_one_replica() -> None:
    p = profile("m", replica_concurrency=2, max_replicas=8)
    assert replica_target(p, WIDE, NO_FLEET, POLICY).replicas > 1
    assert replica_target(p, WIDE, NO_FLEET._replace(live_width=16), POLICY).replicas == 1


def test_the_plan_credits_ready_single_model_engines_only() -> None:
    """The narrowest ready engine's width counts, and one that reports nothing has only the
    declared batch; a warming engine proves nothing."""
    p = profile("m", memory_mb=4096, replica_concurrency=2, max_replicas=8)

    def target(*rows: Residency) -> int:
        hosts = [with_residents(host(f"h{i}", 65536), row) for i, row in enumerate(rows)]
        hosts += [host(f"free{i}", 65536) for i in range(8)]
        plan = plan_placement((p,), fleet(*hosts, demand=(WIDE,)), POLICY)
        return dict(plan.targets)["m"]

    declared = target(resident("m", 4096))
    assert declared > 2
    assert target(resident("m", 4096, max_concurrency=16)) == 1
    assert target(resident("m", 4096, max_concurrency=16), resident("m", 4096)) == declared
    narrow = target(resident("m", 4096, max_concurrency=16), resident("m", 4096, max_concurrency=4))
    assert 2 <= narrow < declared
    warming = resident("m", 4096, ResidencyState.WARMING, max_concurrency=16)
    assert target(warming) == declared


def test_a_shared_or_closed_engine_reports_no_batch_width() -> None:
    row = {"model_id": "m", "memory_mb": 4096, "state": "ready", "max_concurrency": 16}
    assert residency_from_row(row, NOW).max_concurrency == 16
    assert residency_from_row({**row, "shared_engine": True}, NOW).max_concurrency is None
    assert residency_from_row({**row, "max_concurrency": 0}, NOW).max_concurrency is None
    assert residency_from_row({**row, "state": "warming"}, NOW).max_concurrency is None


def test_pressure_still_asks_for_one_replica_beyond_the_ready_set() -> None:
    p = profile("m", replica_concurrency=2, max_replicas=8)
    queued = replace(WIDE, queue_depth=3.0)
    facts = NO_FLEET._replace(ready=1, live_width=64)
    assert replica_target(p, queued, facts, POLICY).replicas == 2
