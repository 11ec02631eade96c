"""Replica targets: demand classes, bounds and the performance factor."""

from __future__ import annotations

from dataclasses import replace

from gridctl.domain import ControllerPolicy, DemandClass
from gridctl.planner import replica_target
from gridctl.planner.targets import FleetFacts

from .builders import demand, profile

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
