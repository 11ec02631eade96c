"""The hindsight oracle and the MILP gap on small runs."""

from __future__ import annotations

import pytest

from gridctl.lab.optimality import optimality_report
from gridctl.lab.oracle import max_flow, oracle_report
from gridctl.lab.scenario import run
from gridctl.lab.strategies import Strategy
from tests.lab.worlds import small_world


def test_max_flow_routes_around_a_shared_model() -> None:
    # w0 can use m0 or m1, w1 only m0: the optimum sends w1 to m0 and w0 to m1
    assert max_flow([5, 5], [5.0, 5.0], [[0, 1], [0]]) == 10.0
    assert max_flow([5, 5], [5.0, 0.0], [[0, 1], [0]]) == 5.0
    assert max_flow([3], [1.0, 1.0], [[0, 1]]) == 2.0


def test_the_oracle_ceiling_is_at_least_what_smart_served() -> None:
    world = small_world(machines=2, models=4, users=10, minutes=8)
    smart = run(world, Strategy.SMART)
    report = oracle_report(world, smart)
    assert report["ceiling_served"] >= smart.summary["served"]  # type: ignore[operator]
    assert 0 < report["smart_pct_of_ceiling"] <= 100  # type: ignore[operator]
    assert report["states_evaluated"] > 0


def test_the_oracle_refuses_a_fleet_beyond_its_bound() -> None:
    world = small_world(machines=5, models=4, users=10, minutes=4)
    with pytest.raises(ValueError, match="at most 4 machines"):
        oracle_report(world, run(world, Strategy.SMART))


def test_the_milp_optimum_bounds_the_planner_every_tick() -> None:
    import highspy

    world = small_world(machines=2, models=4, users=10, minutes=8)
    smart = run(world, Strategy.SMART, keep_plans=True)
    report = optimality_report(world, smart, highspy.Highs)
    assert report["ticks"] == 8
    gaps = report["gap_pct_per_tick"]
    assert all(0.0 <= g <= 100.0 for g in gaps)  # type: ignore[union-attr]
    assert report["worst_minute"] in range(8)


def test_the_milp_finds_the_packing_a_plan_missed() -> None:
    """Three 6 GB models with target 1 on one 16 GB host (1 GB reserved): two fit. A plan
    that placed only one is half the optimum short; the optimum names two."""
    import highspy

    from gridctl.domain import (
        Assignment,
        ControllerPolicy,
        DemandClass,
        FleetSnapshot,
        HostResources,
        HostSnapshot,
        ModelProfile,
        Plan,
    )
    from gridctl.lab.optimality import solve_tick

    now = 1_800_000_000.0
    profiles = {n: ModelProfile(name=n, memory_mb=6144, priority=49) for n in ("a", "b", "c")}
    host = HostSnapshot(
        "h1", HostResources(capacity_mb=16384, reserved_mb=1024), last_heartbeat=now
    )
    one = Assignment("a", "h1", "llama.cpp", 6144, "demand", DemandClass.DIRECT, 49)
    plan = Plan("d", now, (("a", 1), ("b", 1), ("c", 1)), (one,), (), (), ())
    solver = highspy.Highs()
    gap = solve_tick(
        3, plan, FleetSnapshot(now=now, hosts=(host,)), profiles, ControllerPolicy(), solver
    )
    assert gap.planner_value == 50.0 and gap.optimum == 100.0
    assert gap.gap_pct == pytest.approx(50.0)
    assert len(gap.optimal) == 2 and all(h == "h1" for _, h in gap.optimal)
