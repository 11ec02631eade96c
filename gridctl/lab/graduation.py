"""The graduation matrix: every strategy for every fleet size and seed, then the gates.

A sweep over many seeds is only useful if a loss can be found in it, so
beside the gates the matrix carries a per-cell table (each strategy's score,
the winner, smart's margins) and, per gate, the cell that is worst for it,
the median over cells and the cell that decides the gate's value. Cells are
independent: ``run_cell`` runs one (pure and deterministic), and the shell
may run many at once; ``assemble`` orders them by the sweep's own order, so
the result never depends on which cell finished first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridctl.demand.sequences import median
from gridctl.domain import Fleet, WorkloadCatalog
from gridctl.lab.gates import BASELINES, GREEDY, REACTIVE, SMART, STATIC, Gate, RunRow, gates
from gridctl.lab.scenario import ScenarioConfig, build_world, run
from gridctl.lab.strategies import STRATEGIES

CellKey = tuple[int, int]  # (machines, seed)


@dataclass(frozen=True)
class CellSpec:
    """One cell of the sweep: a fleet size and a seed on a common world shape."""

    machines: int
    seed: int
    minutes: int
    users: int
    models: int

    def config(self) -> ScenarioConfig:
        return ScenarioConfig(self.machines, self.models, self.users, self.minutes, self.seed)


@dataclass(frozen=True)
class CellRow:
    """One line of the per-cell table."""

    machines: int
    seed: int
    scores: dict[str, float]
    winner: str
    margin_over_best_baseline: float
    margin_over_static: float

    def to_json(self) -> dict[str, object]:
        return {
            "machines": self.machines,
            "seed": self.seed,
            "scores": {k: round(v, 6) for k, v in self.scores.items()},
            "winner": self.winner,
            "smart_margin_over_best_baseline": round(self.margin_over_best_baseline, 6),
            "smart_margin_over_static": round(self.margin_over_static, 6),
        }


@dataclass(frozen=True)
class GateCells:
    """Where one gate stands cell by cell: its worst cell, median and deciding cell."""

    name: str
    worst: tuple[CellKey, float] | None
    median: float | None
    deciding: tuple[CellKey, float] | None

    def to_json(self) -> dict[str, object]:
        def cell(found: tuple[CellKey, float] | None) -> dict[str, object] | None:
            if found is None:
                return None
            (machines, seed), value = found
            return {"machines": machines, "seed": seed, "value": round(value, 6)}

        return {
            "worst_cell": cell(self.worst),
            "median": None if self.median is None else round(self.median, 6),
            "deciding_cell": cell(self.deciding),
        }


@dataclass(frozen=True)
class Matrix:
    rows: tuple[RunRow, ...]
    gates: tuple[Gate, ...]
    cells: tuple[CellRow, ...] = ()
    gate_cells: tuple[GateCells, ...] = ()

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    def to_json(self) -> dict[str, object]:
        detail = {g.name: g for g in self.gate_cells}
        return {
            "passed": self.passed,
            "gates": [
                {**g.to_json(), **(detail[g.name].to_json() if g.name in detail else {})}
                for g in self.gates
            ],
            "cells": [c.to_json() for c in self.cells],
            "runs": [
                {
                    "machines": r.machines,
                    "seed": r.seed,
                    "strategy": r.strategy,
                    "trace_digest": r.digest,
                    "summary": {k: round(v, 6) for k, v in r.summary.items()},
                }
                for r in self.rows
            ],
        }


def sweep_cells(
    machines: Sequence[int], seeds: Sequence[int], *, minutes: int, users: int, models: int
) -> list[CellSpec]:
    """The sweep's cells in its fixed order: fleet sizes outer, seeds inner."""
    return [CellSpec(m, s, minutes, users, models) for m in machines for s in seeds]


def run_cell(fleet: Fleet, catalog: WorkloadCatalog, cell: CellSpec) -> tuple[RunRow, ...]:
    """Every strategy on one cell's world, in ``STRATEGIES`` order."""
    world = build_world(cell.config(), fleet, catalog)
    rows = []
    for strategy in STRATEGIES:
        result = run(world, strategy)
        summary = {k: float(v) for k, v in result.summary.items()}
        rows.append(RunRow(cell.machines, cell.seed, strategy.value, result.digest, summary))
    return tuple(rows)


def assemble(results: Sequence[tuple[RunRow, ...]]) -> Matrix:
    """The matrix of cells given in sweep order (never completion order)."""
    rows = tuple(row for cell in results for row in cell)
    by_cell = _by_cell(rows)
    return Matrix(rows, tuple(gates(rows)), cell_table(by_cell), gate_cells(by_cell))


def graduate(
    fleet: Fleet,
    catalog: WorkloadCatalog,
    machines: Sequence[int],
    seeds: Sequence[int],
    *,
    minutes: int,
    users: int,
    models: int,
    progress: Callable[[RunRow], None] | None = None,
) -> Matrix:
    """The whole matrix, one cell after another."""
    results = []
    for cell in sweep_cells(machines, seeds, minutes=minutes, users=users, models=models):
        rows = run_cell(fleet, catalog, cell)
        for row in rows:
            if progress is not None:
                progress(row)
        results.append(rows)
    return assemble(results)


def _by_cell(rows: Sequence[RunRow]) -> dict[CellKey, dict[str, RunRow]]:
    cells: dict[CellKey, dict[str, RunRow]] = {}
    for row in rows:
        cells.setdefault((row.machines, row.seed), {})[row.strategy] = row
    wanted = {SMART, *BASELINES}
    return {k: v for k, v in cells.items() if wanted <= set(v)}


def cell_table(cells: dict[CellKey, dict[str, RunRow]]) -> tuple[CellRow, ...]:
    """Scores per strategy, the winner (first in strategy order on a tie), smart's margins."""
    table = []
    for (machines, seed), runs in cells.items():
        scores = {s.value: runs[s.value].summary["score"] for s in STRATEGIES}
        winner = max(scores, key=lambda name: scores[name])
        best = max(scores[b] for b in BASELINES)
        table.append(
            CellRow(
                machines,
                seed,
                scores,
                winner,
                scores[SMART] - best,
                scores[SMART] - scores[STATIC],
            )
        )
    return tuple(table)


def _metric(name: str, runs: dict[str, RunRow]) -> float:
    """A gate's measure on one cell, oriented as the gate reads it."""

    def s(strategy: str, key: str) -> float:
        return runs[strategy].summary[key]

    def best(key: str) -> float:
        return max(s(b, key) for b in BASELINES)

    measures: dict[str, Callable[[], float]] = {
        "smart_safety_violations": lambda: s(SMART, "safety_violations"),
        "identical_demand_traces": lambda: float(len({r.digest for r in runs.values()}) != 1),
        "baseline_competitiveness": lambda: s(SMART, "score") - best("score"),
        "median_service_gain_over_static": lambda: s(SMART, "served_pct") - s(STATIC, "served_pct"),
        "churn_per_node_hour": lambda: s(SMART, "changes_per_node_hour"),
        "rapid_reversals_vs_greedy": lambda: (
            s(SMART, "rapid_reversals") - s(GREEDY, "rapid_reversals")
        ),
        "least_workload_service_largest_fleet": lambda: (
            s(SMART, "least_workload_pct") - best("least_workload_pct")
        ),
        "feasible_coverage_gain_median": lambda: (
            s(SMART, "coverage_pct") - s(STATIC, "coverage_pct")
        ),
        "predictive_startup_savings_over_reactive": lambda: (
            s(REACTIVE, "startup_waits") - s(SMART, "startup_waits")
        ),
    }
    return measures[name]()


# Gates whose value is the median of the per-cell measure; the rest are decided by
# their worst cell (a minimum, a maximum, or the largest contribution to a sum).
_MEDIAN_GATES = frozenset(
    {
        "median_service_gain_over_static",
        "least_workload_service_largest_fleet",
        "feasible_coverage_gain_median",
    }
)
# Gates where a larger per-cell measure is worse.
_HIGHER_IS_WORSE = frozenset(
    {
        "smart_safety_violations",
        "identical_demand_traces",
        "churn_per_node_hour",
        "rapid_reversals_vs_greedy",
    }
)


def gate_cells(cells: dict[CellKey, dict[str, RunRow]]) -> tuple[GateCells, ...]:
    """Per gate: its worst cell, the median of its per-cell measure and its deciding cell.

    The least-workload gate reads only the largest fleet size, as the gate does.
    A median gate is decided by the cell nearest the median (the lower one on a
    tie); every other gate by its worst cell. Ties go to the first cell in sweep order.
    """
    found = []
    largest = max((m for m, _ in cells), default=0)
    for gate in gates([r for runs in cells.values() for r in runs.values()]):
        if gate.name not in _HIGHER_IS_WORSE | _MEDIAN_GATES | {
            "baseline_competitiveness",
            "predictive_startup_savings_over_reactive",
        }:
            found.append(GateCells(gate.name, None, None, None))
            continue
        chosen = {
            key: runs
            for key, runs in cells.items()
            if gate.name != "least_workload_service_largest_fleet" or key[0] == largest
        }
        values = [(key, _metric(gate.name, runs)) for key, runs in chosen.items()]
        if not values:
            found.append(GateCells(gate.name, None, None, None))
            continue
        sign = -1.0 if gate.name in _HIGHER_IS_WORSE else 1.0
        worst = min(values, key=lambda kv: sign * kv[1])
        middle = median(tuple(v for _, v in values))
        deciding = worst
        if gate.name in _MEDIAN_GATES:
            deciding = min(values, key=lambda kv: (abs(kv[1] - middle), kv[1]))
        found.append(GateCells(gate.name, worst, middle, deciding))
    return tuple(found)
