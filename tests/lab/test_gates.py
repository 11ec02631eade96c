"""Every graduation gate on a small synthetic matrix, on both sides of its threshold."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gridctl.lab.gates import Gate, RunRow, gates

BASE = {
    "score": 80.0,
    "served_pct": 90.0,
    "least_workload_pct": 70.0,
    "coverage_pct": 90.0,
    "changes_per_node_hour": 2.0,
    "rapid_reversals": 0.0,
    "startup_waits": 10.0,
    "safety_violations": 0.0,
}


def matrix(tweak: Callable[[str, int, int, dict[str, float]], None]) -> list[RunRow]:
    rows = []
    for machines in (2, 4):
        for seed in (1, 2):
            for strategy in ("smart", "reactive", "greedy", "static"):
                summary = dict(BASE)
                if strategy == "static":
                    summary.update(served_pct=80.0, coverage_pct=85.0)
                if strategy == "greedy":
                    summary.update(rapid_reversals=10.0)
                if strategy == "reactive":
                    summary.update(startup_waits=12.0)
                tweak(strategy, machines, seed, summary)
                rows.append(RunRow(machines, seed, strategy, "digest", summary))
    return rows


def gate(rows: list[RunRow], name: str) -> Gate:
    return next(g for g in gates(rows) if g.name == name)


def test_the_baseline_matrix_passes_every_gate() -> None:
    found = gates(matrix(lambda *_: None))
    assert [g.name for g in found if not g.passed] == []
    assert len(found) == 9


def _set(strategy: str, **values: float) -> Callable[[str, int, int, dict[str, float]], None]:
    def tweak(s: str, _m: int, _seed: int, summary: dict[str, float]) -> None:
        if s == strategy:
            summary.update(values)

    return tweak


@pytest.mark.parametrize(
    ("name", "passing", "failing", "value_when_failing"),
    [
        ("smart_safety_violations", _set("smart"), _set("smart", safety_violations=1.0), 4.0),
        (
            "baseline_competitiveness",
            _set("static", score=82.0),  # 2 points behind: allowed
            _set("static", score=82.5),
            -2.5,
        ),
        (
            "median_service_gain_over_static",
            _set("static", served_pct=87.0),
            _set("static", served_pct=87.5),
            2.5,
        ),
        (
            "churn_per_node_hour",
            _set("smart", changes_per_node_hour=9.0),
            _set("smart", changes_per_node_hour=9.5),
            9.5,
        ),
        (
            "rapid_reversals_vs_greedy",
            _set("smart", rapid_reversals=2.0),
            _set("smart", rapid_reversals=2.5),
            0.25,
        ),
        (
            "least_workload_service_largest_fleet",
            _set("greedy", least_workload_pct=72.0),
            _set("greedy", least_workload_pct=72.5),
            -2.5,
        ),
        (
            "feasible_coverage_gain_median",
            _set("static", coverage_pct=88.0),
            _set("static", coverage_pct=88.5),
            1.5,
        ),
        (
            "predictive_startup_savings_over_reactive",
            _set("reactive", startup_waits=10.25),
            _set("reactive", startup_waits=10.0),
            0.0,
        ),
    ],
)
def test_each_gate_on_both_sides_of_its_threshold(
    name: str,
    passing: Callable[[str, int, int, dict[str, float]], None],
    failing: Callable[[str, int, int, dict[str, float]], None],
    value_when_failing: float,
) -> None:
    assert gate(matrix(passing), name).passed
    failed = gate(matrix(failing), name)
    assert not failed.passed
    assert failed.value == pytest.approx(value_when_failing)


def test_differing_traces_fail_the_identical_trace_gate() -> None:
    rows = matrix(lambda *_: None)
    assert gate(rows, "identical_demand_traces").passed
    rows[1] = RunRow(rows[1].machines, rows[1].seed, rows[1].strategy, "other", rows[1].summary)
    failed = gate(rows, "identical_demand_traces")
    assert not failed.passed and failed.value == 1


def test_least_workload_gate_reads_only_the_largest_fleet() -> None:
    def small_fleet_only(s: str, machines: int, _seed: int, summary: dict[str, float]) -> None:
        if s == "smart" and machines == 2:
            summary["least_workload_pct"] = 0.0

    assert gate(matrix(small_fleet_only), "least_workload_service_largest_fleet").passed


def test_an_incomplete_matrix_fails() -> None:
    rows = [r for r in matrix(lambda *_: None) if r.strategy != "static"]
    assert [g.passed for g in gates(rows)] == [False]
