"""``--report DIR``: report.json and an HTML page with matplotlib charts beside it.

Charts: served demand per workload over the day (one panel per strategy),
the residency timeline per host, churn per strategy, and, when computed, the
oracle ceiling and the per-tick MILP gap. PNGs are written next to
``index.html`` and referenced from it.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from gridctl.lab.scenario import Run, World


def _save(fig: Any, path: Path) -> str:
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path.name


def _mean(values: list[int], window: int) -> list[float]:
    return [sum(values[max(0, i - window + 1) : i + 1]) / window for i in range(len(values))]


def served_chart(
    panels: list[tuple[str, list[dict[str, list[int]]]]],
    path: Path,
    *,
    unit: str = "minute",
    window: int = 5,
) -> str:
    """One panel per (label, rows); a row maps workload -> [offered, served] per ``unit``.

    The lab and a real run (``gridctl fleet demo``) draw the same chart, so the two
    days can be read side by side.
    """
    fig, axes = plt.subplots(len(panels), 1, figsize=(10, 2.8 * len(panels)), squeeze=False)
    for ax, (label, rows) in zip(axes[:, 0], panels, strict=True):
        names = sorted({w for row in rows for w in row})
        colours = plt.get_cmap("tab10")
        for index, workload in enumerate(names):
            offered = _mean([row.get(workload, [0, 0])[0] for row in rows], window)
            served = _mean([row.get(workload, [0, 0])[1] for row in rows], window)
            colour = colours(index % 10)
            ax.plot(served, label=workload, linewidth=1.2, color=colour)
            ax.plot(offered, linewidth=0.8, linestyle=":", color=colour)
        ax.set_title(
            f"requests per {unit}, {window}-{unit} mean (solid served, dotted offered): {label}"
        )
        ax.set_xlabel(unit)
        ax.legend(fontsize=7, ncol=5, loc="upper right")
    return _save(fig, path)


def _served_chart(runs: list[Run], directory: Path, name: str = "served.png") -> str:
    panels = [(r.strategy.value, r.accumulator.per_minute) for r in runs]
    return served_chart(panels, directory / name)


def residency_chart(
    label: str,
    residency: list[dict[str, list[str]]],
    hosts: list[str],
    models: list[str],
    path: Path,
    *,
    unit: str = "minute",
) -> str:
    """Ready residencies per host over time; ``residency[i]`` maps host -> models."""
    colours = plt.get_cmap("tab20")
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(hosts) + 1.5))
    for y, host in enumerate(hosts):
        for m_index, model in enumerate(models):
            spans: list[tuple[int, int]] = []
            start = None
            for step, ready in enumerate(residency):
                here = model in ready.get(host, [])
                if here and start is None:
                    start = step
                if not here and start is not None:
                    spans.append((start, step - start))
                    start = None
            if start is not None:
                spans.append((start, len(residency) - start))
            if spans:
                ax.broken_barh(
                    spans,
                    (y - 0.4 + 0.8 * m_index / len(models), 0.8 / len(models)),
                    color=colours(m_index % 20),
                    label=model,
                )
    ax.set_yticks(range(len(hosts)), hosts, fontsize=7)
    ax.set_xlabel(unit)
    ax.set_title(f"ready residencies per host: {label}")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), fontsize=7, ncol=4, loc="upper right")
    return _save(fig, path)


def _residency_chart(
    result: Run, world: World, directory: Path, name: str = "residency.png"
) -> str:
    hosts = [h.host_id for h in world.hosts]
    models = [p.name for p in world.desired.profiles]
    return residency_chart(result.strategy.value, result.residency, hosts, models, directory / name)


def _churn_chart(runs: list[Run], directory: Path) -> str:
    fig, ax = plt.subplots(figsize=(6, 3))
    names = [r.strategy.value for r in runs]
    ax.bar(
        names, [float(r.summary["changes_per_node_hour"]) for r in runs], label="changes/node-hour"
    )
    ax.bar(
        names,
        [float(r.summary["rapid_reversals"]) for r in runs],
        alpha=0.6,
        label="rapid reversals",
    )
    ax.set_title("churn")
    ax.legend(fontsize=8)
    return _save(fig, directory / "churn.png")


def _gap_chart(document: dict[str, Any], directory: Path) -> str | None:
    milp = document.get("optimality")
    oracle = document.get("oracle")
    if not milp and not oracle:
        return None
    fig, axes = plt.subplots(1, 2 if milp and oracle else 1, figsize=(10, 3), squeeze=False)
    panels = list(axes[0])
    if milp:
        ax = panels.pop(0)
        ax.plot(milp["gap_pct_per_tick"], linewidth=1)
        ax.axhline(milp["median_gap_pct"], color="grey", linestyle="--", label="median")
        ax.set_title("planner gap to the MILP optimum (%) per tick")
        ax.set_xlabel("tick")
        ax.legend(fontsize=8)
    if oracle:
        ax = panels.pop(0)
        ax.bar(
            ["oracle ceiling", oracle["smart_strategy"]],
            [oracle["ceiling_served"], oracle["smart_served"]],
        )
        ax.set_title("served requests: hindsight ceiling vs run")
    return _save(fig, directory / "gaps.png")


def write_report(directory: Path, document: dict[str, Any], world: World, runs: list[Run]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(document, sort_keys=True, indent=2) + "\n")
    charts = [_served_chart(runs, directory), _residency_chart(runs[0], world, directory)]
    charts.append(_churn_chart(runs, directory))
    gap = _gap_chart(document, directory)
    if gap:
        charts.append(gap)
    rows = "".join(
        "<tr>"
        + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (
                body["strategy"],
                *(
                    round(body["summary"][k], 2)
                    for k in (
                        "score",
                        "served_pct",
                        "least_workload_pct",
                        "slo_pct",
                        "coverage_pct",
                        "changes_per_node_hour",
                        "rapid_reversals",
                        "startup_waits",
                        "safety_violations",
                    )
                ),
            )
        )
        + "</tr>"
        for body in document["runs"]
    )
    head = "".join(
        f"<th>{h}</th>"
        for h in (
            "strategy",
            "score",
            "served %",
            "least workload %",
            "SLO %",
            "coverage %",
            "changes/node-hour",
            "rapid reversals",
            "startup waits",
            "safety violations",
        )
    )
    c = world.config
    title = (
        f"gridctl lab: {c.machines} machines, {c.models} models, {c.users} users, "
        f"{c.minutes} min, seed {c.seed}"
    )
    images = "".join(
        f'<p><img src="{html.escape(name)}" alt="{html.escape(name)}"></p>' for name in charts
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>trace digest {html.escape(world.digest)}</p>"
        f"<table><tr>{head}</tr>{rows}</table>{images}"
        '<p><a href="report.json">report.json</a></p></body></html>\n'
    )
    path = directory / "index.html"
    path.write_text(page)
    return path
