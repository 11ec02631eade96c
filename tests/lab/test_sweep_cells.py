"""The sweep's per-cell table and per-gate cells agree with the gates they explain."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.lab.gates import RunRow, gates
from gridctl.lab.graduation import Matrix, assemble

STRATEGY_NAMES = ("smart", "reactive", "greedy", "static")
KEYS = (
    "score",
    "served_pct",
    "least_workload_pct",
    "coverage_pct",
    "changes_per_node_hour",
    "rapid_reversals",
    "startup_waits",
    "safety_violations",
)
percent = st.floats(min_value=0.0, max_value=100.0, allow_nan=False).map(lambda v: round(v, 3))
count = st.integers(min_value=0, max_value=20).map(float)


def _summary() -> st.SearchStrategy[dict[str, float]]:
    return st.fixed_dictionaries(
        {
            k: (
                count if k in ("rapid_reversals", "startup_waits", "safety_violations") else percent
            )
            for k in KEYS
        }
    )


@st.composite
def sweeps(draw: st.DrawFn) -> list[tuple[RunRow, ...]]:
    sizes = draw(st.lists(st.integers(1, 16), min_size=1, max_size=3, unique=True))
    seeds = draw(st.lists(st.integers(0, 99), min_size=1, max_size=4, unique=True))
    cells = []
    for machines in sizes:
        for seed in seeds:
            cells.append(
                tuple(
                    RunRow(machines, seed, name, "d", draw(_summary())) for name in STRATEGY_NAMES
                )
            )
    return cells


def _gate_detail(matrix: Matrix, name: str) -> tuple[float, dict[str, object]]:
    listed = matrix.to_json()["gates"]
    assert isinstance(listed, list)
    gate: dict[str, object] = next(g for g in listed if g["name"] == name)
    value = gate["value"]
    assert isinstance(value, float | int)
    return float(value), gate


@settings(max_examples=60, deadline=None)
@given(sweeps())
def test_each_gate_is_explained_by_its_deciding_cell_or_median(
    cells: list[tuple[RunRow, ...]],
) -> None:
    matrix = assemble(cells)
    assert matrix.gates == tuple(gates([r for c in cells for r in c]))
    for name in ("baseline_competitiveness", "churn_per_node_hour"):
        value, gate = _gate_detail(matrix, name)
        assert gate["deciding_cell"] == gate["worst_cell"]
        assert isinstance(gate["deciding_cell"], dict)
        assert gate["deciding_cell"]["value"] == round(value, 6)
    for name in (
        "median_service_gain_over_static",
        "feasible_coverage_gain_median",
        "least_workload_service_largest_fleet",
    ):
        value, gate = _gate_detail(matrix, name)
        assert gate["median"] == round(value, 6)
    _, least = _gate_detail(matrix, "least_workload_service_largest_fleet")
    largest = max(c[0].machines for c in cells)
    assert isinstance(least["worst_cell"], dict) and least["worst_cell"]["machines"] == largest


@settings(max_examples=60, deadline=None)
@given(sweeps())
def test_the_cell_table_names_the_winner_and_smarts_margins(
    cells: list[tuple[RunRow, ...]],
) -> None:
    matrix = assemble(cells)
    assert [(c.machines, c.seed) for c in matrix.cells] == [
        (c[0].machines, c[0].seed) for c in cells
    ]
    for row, runs in zip(matrix.cells, cells, strict=True):
        scores = {r.strategy: r.summary["score"] for r in runs}
        assert row.scores == scores
        assert scores[row.winner] == max(scores.values())
        best = max(scores[n] for n in STRATEGY_NAMES[1:])
        assert row.margin_over_best_baseline == scores["smart"] - best
        assert row.margin_over_static == scores["smart"] - scores["static"]
    worst = min(c.margin_over_best_baseline for c in matrix.cells)
    competitiveness = next(g for g in matrix.gates if g.name == "baseline_competitiveness")
    assert competitiveness.value == worst


def test_a_median_gate_is_decided_by_the_middle_cell() -> None:
    def cell(seed: int, smart_served: float) -> tuple[RunRow, ...]:
        base = dict.fromkeys(KEYS, 0.0)
        return tuple(
            RunRow(
                4,
                seed,
                name,
                "d",
                {**base, "served_pct": smart_served if name == "smart" else 50.0},
            )
            for name in STRATEGY_NAMES
        )

    matrix = assemble([cell(1, 40.0), cell(2, 58.0), cell(3, 90.0)])
    _, gate = _gate_detail(matrix, "median_service_gain_over_static")
    assert gate["median"] == 8.0
    assert gate["worst_cell"] == {"machines": 4, "seed": 1, "value": -10.0}
    assert gate["deciding_cell"] == {"machines": 4, "seed": 2, "value": 8.0}
