"""``gridctl lab graduate --report DIR``: the sweep's page, with charts of its worst cells.

A sweep's tables say where smart lost; the charts say why. For the cells
where smart's margin over the best baseline is lowest, the page shows served
demand per workload over the day for every strategy and the residency
timeline of smart and of the cell's best baseline side by side, so a loss can
be read off a chart. The sweep keeps only summaries, so those few cells are
run again here (the lab is deterministic: the same cell gives the same run).
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gridctl.cli.lab_report import _residency_chart, _served_chart
from gridctl.domain import Fleet, WorkloadCatalog
from gridctl.lab.gates import SMART
from gridctl.lab.graduation import CellSpec
from gridctl.lab.scenario import build_world, run
from gridctl.lab.strategies import STRATEGIES

_STYLE = (
    "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
    "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
    "tr.worst td{background:#fde2e2}.fail{color:#b00;font-weight:bold}</style>"
)


def worst_cells(document: dict[str, Any], count: int) -> list[dict[str, Any]]:
    """The ``count`` cells where smart trails the best baseline most (sweep order on ties)."""
    cells: list[dict[str, Any]] = list(document["cells"])
    ranked = sorted(
        range(len(cells)), key=lambda i: (cells[i]["smart_margin_over_best_baseline"], i)
    )
    return [cells[i] for i in ranked[:count]]


def _table(head: Sequence[str], rows: Sequence[tuple[Sequence[object], str]]) -> str:
    top = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        f'<tr class="{css}">' + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
        for row, css in rows
    )
    return f"<table><tr>{top}</tr>{body}</table>"


def _where(cell: dict[str, Any] | None) -> str:
    if cell is None:
        return "-"
    return f"{cell['machines']} x seed {cell['seed']}: {cell['value']:.3f}"


def _gate_table(document: dict[str, Any]) -> str:
    rows = []
    for g in document["gates"]:
        verdict = "pass" if g["passed"] else "FAIL"
        middle = "-" if g.get("median") is None else f"{g['median']:.3f}"
        rows.append(
            (
                (
                    g["name"],
                    f"{g['value']:.3f} {g['comparison']} {g['threshold']:g}",
                    verdict,
                    _where(g.get("worst_cell")),
                    middle,
                    _where(g.get("deciding_cell")),
                ),
                "" if g["passed"] else "fail",
            )
        )
    head = ("gate", "value", "verdict", "worst cell", "median", "deciding cell")
    return _table(head, rows)


def _cell_table(document: dict[str, Any], worst: list[dict[str, Any]]) -> str:
    marked = {(c["machines"], c["seed"]) for c in worst}
    names = [s.value for s in STRATEGIES]
    rows = [
        (
            (
                c["machines"],
                c["seed"],
                *(f"{c['scores'][n]:.2f}" for n in names),
                c["winner"],
                f"{c['smart_margin_over_best_baseline']:+.2f}",
                f"{c['smart_margin_over_static']:+.2f}",
            ),
            "worst" if (c["machines"], c["seed"]) in marked else "",
        )
        for c in document["cells"]
    ]
    head = ("machines", "seed", *names, "winner", "smart vs best baseline", "smart vs static")
    return _table(head, rows)


def _cell_section(
    directory: Path,
    cell: dict[str, Any],
    fleet: Fleet,
    catalog: WorkloadCatalog,
    shape: CellSpec,
) -> str:
    spec = CellSpec(cell["machines"], cell["seed"], shape.minutes, shape.users, shape.models)
    world = build_world(spec.config(), fleet, catalog)
    runs = [run(world, s) for s in STRATEGIES]
    scores = cell["scores"]
    rival = max((n for n in scores if n != SMART), key=lambda n: scores[n])
    stem = f"m{spec.machines}-s{spec.seed}"
    charts = [_served_chart(runs, directory, f"served-{stem}.png")]
    for result in runs:
        if result.strategy.value in (SMART, rival):
            name = f"residency-{stem}-{result.strategy.value}.png"
            charts.append(_residency_chart(result, world, directory, name))
    title = (
        f"{spec.machines} machines, seed {spec.seed}: smart {scores[SMART]:.2f}, "
        f"best baseline {rival} {scores[rival]:.2f} "
        f"({cell['smart_margin_over_best_baseline']:+.2f})"
    )
    images = "".join(
        f'<p><img src="{html.escape(name)}" alt="{html.escape(name)}"></p>' for name in charts
    )
    return f"<h2>{html.escape(title)}</h2>{images}"


def write_sweep_report(
    directory: Path,
    document: dict[str, Any],
    fleet: Fleet,
    catalog: WorkloadCatalog,
    cells: Sequence[CellSpec],
    charted: int,
) -> Path:
    """report.json (the ``--json`` document), index.html and the worst cells' charts."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(document, sort_keys=True, indent=2) + "\n")
    worst = worst_cells(document, charted)
    shape = cells[0]
    sizes = sorted({c.machines for c in cells})
    title = (
        f"gridctl lab graduate: {len(cells)} cells, machines {', '.join(map(str, sizes))}, "
        f"{len({c.seed for c in cells})} seeds, {shape.models} models, {shape.users} users, "
        f"{shape.minutes} min"
    )
    verdict = "every gate passes" if document["passed"] else "failing gates"
    sections = "".join(_cell_section(directory, c, fleet, catalog, shape) for c in worst)
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"{_STYLE}</head><body><h1>{html.escape(title)}</h1><p>{verdict}</p>"
        f"<h2>Gates</h2>{_gate_table(document)}"
        f"<h2>Cells</h2>{_cell_table(document, worst)}"
        f"<h2>The {len(worst)} worst cells for smart</h2>{sections}"
        '<p><a href="report.json">report.json</a></p></body></html>\n'
    )
    path = directory / "index.html"
    path.write_text(page)
    return path
