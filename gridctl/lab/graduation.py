"""The graduation matrix: every strategy for every fleet size and seed, then the gates."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridctl.domain import Fleet, WorkloadCatalog
from gridctl.lab.gates import Gate, RunRow, gates
from gridctl.lab.scenario import ScenarioConfig, build_world, run
from gridctl.lab.strategies import STRATEGIES


@dataclass(frozen=True)
class Matrix:
    rows: tuple[RunRow, ...]
    gates: tuple[Gate, ...]

    @property
    def passed(self) -> bool:
        return all(g.passed for g in self.gates)

    def to_json(self) -> dict[str, object]:
        return {
            "passed": self.passed,
            "gates": [g.to_json() for g in self.gates],
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
    rows: list[RunRow] = []
    for size in machines:
        for seed in seeds:
            world = build_world(ScenarioConfig(size, models, users, minutes, seed), fleet, catalog)
            for strategy in STRATEGIES:
                result = run(world, strategy)
                row = RunRow(
                    size,
                    seed,
                    strategy.value,
                    result.digest,
                    {k: float(v) for k, v in result.summary.items()},
                )
                rows.append(row)
                if progress is not None:
                    progress(row)
    return Matrix(tuple(rows), tuple(gates(rows)))
