"""Graduation gates: machine-readable pass/fail over a matrix of runs.

A run row is (machines, seed, strategy, trace digest, summary). Every gate
compares the smart strategy with the baselines on the same size and seed;
a gate is a name, the measured value, its threshold, and whether it passed.
No single attractive score graduates: every gate must pass.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridctl.demand.sequences import median

SMART, REACTIVE, GREEDY, STATIC = "smart", "reactive", "greedy", "static"
BASELINES = (REACTIVE, GREEDY, STATIC)


@dataclass(frozen=True)
class RunRow:
    machines: int
    seed: int
    strategy: str
    digest: str
    summary: dict[str, float]


@dataclass(frozen=True)
class Gate:
    name: str
    value: float
    threshold: float
    comparison: str  # ">=", "<=", "==", ">"
    passed: bool
    detail: str = ""

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "value": round(self.value, 6),
            "threshold": self.threshold,
            "comparison": self.comparison,
            "passed": self.passed,
            "detail": self.detail,
        }


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">=": lambda v, t: v >= t,
    "<=": lambda v, t: v <= t,
    "==": lambda v, t: v == t,
    ">": lambda v, t: v > t,
}


def _gate(name: str, value: float, comparison: str, threshold: float, detail: str) -> Gate:
    return Gate(name, value, threshold, comparison, _COMPARE[comparison](value, threshold), detail)


def _cells(rows: Sequence[RunRow]) -> dict[tuple[int, int], dict[str, RunRow]]:
    cells: dict[tuple[int, int], dict[str, RunRow]] = {}
    for row in rows:
        cells.setdefault((row.machines, row.seed), {})[row.strategy] = row
    return cells


def _complete(cells: dict[tuple[int, int], dict[str, RunRow]]) -> list[dict[str, RunRow]]:
    wanted = {SMART, *BASELINES}
    return [cells[k] for k in sorted(cells) if wanted <= set(cells[k])]


def gates(rows: Sequence[RunRow]) -> list[Gate]:
    """Every gate over ``rows`` (each size x seed needs all four strategies)."""
    cells = _cells(rows)
    full = _complete(cells)
    if not full:
        return [_gate("complete_matrix", 0.0, ">", 0.0, "no size and seed ran all four strategies")]
    s = [c[SMART].summary for c in full]
    violations = sum(x["safety_violations"] for x in s)
    differing = sum(1 for c in full if len({r.digest for r in c.values()}) != 1)
    competitiveness = min(
        c[SMART].summary["score"] - max(c[b].summary["score"] for b in BASELINES) for c in full
    )
    gain = median(
        tuple(c[SMART].summary["served_pct"] - c[STATIC].summary["served_pct"] for c in full)
    )
    churn = max(x["changes_per_node_hour"] for x in s)
    greedy_reversals = sum(c[GREEDY].summary["rapid_reversals"] for c in full)
    smart_reversals = sum(x["rapid_reversals"] for x in s)
    reversal_ratio = (
        smart_reversals / greedy_reversals
        if greedy_reversals
        else (0.0 if not smart_reversals else 1.0)
    )
    largest = max(m for m, _ in cells)
    biggest = [c for c in full if c[SMART].machines == largest]
    least = (
        median(
            tuple(
                c[SMART].summary["least_workload_pct"]
                - max(c[b].summary["least_workload_pct"] for b in BASELINES)
                for c in biggest
            )
        )
        if biggest
        else float("-inf")
    )
    coverage = median(
        tuple(c[SMART].summary["coverage_pct"] - c[STATIC].summary["coverage_pct"] for c in full)
    )
    savings = sum(
        c[REACTIVE].summary["startup_waits"] - c[SMART].summary["startup_waits"] for c in full
    )
    return [
        _gate("smart_safety_violations", violations, "==", 0, "invariant breaches in smart runs"),
        _gate(
            "identical_demand_traces",
            differing,
            "==",
            0,
            "cells whose strategies saw different traces",
        ),
        _gate(
            "baseline_competitiveness",
            competitiveness,
            ">=",
            -2.0,
            "worst cell: smart score minus the best baseline score (points)",
        ),
        _gate(
            "median_service_gain_over_static",
            gain,
            ">=",
            3.0,
            "median cell: smart served % minus static served %",
        ),
        _gate("churn_per_node_hour", churn, "<=", 9.0, "worst smart cell: changes per node-hour"),
        _gate(
            "rapid_reversals_vs_greedy",
            reversal_ratio,
            "<=",
            0.20,
            f"smart rapid reversals over greedy's ({smart_reversals}/{greedy_reversals})",
        ),
        _gate(
            "least_workload_service_largest_fleet",
            least,
            ">=",
            -2.0,
            f"median over seeds at {largest} machines: smart least-workload % "
            "minus the best baseline's",
        ),
        _gate(
            "feasible_coverage_gain_median",
            coverage,
            ">=",
            2.0,
            "median cell: smart feasible-workload coverage minus static's (points)",
        ),
        _gate(
            "predictive_startup_savings_over_reactive",
            savings,
            ">",
            0.0,
            "cold-start waits reactive had that smart avoided, summed over cells",
        ),
    ]
