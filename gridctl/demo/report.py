"""The real day's report: the lab's charts drawn from what the requests and status saw.

``gridctl lab scenario --report`` draws served demand per workload and the
residency timeline of a simulated day; this page draws the same two charts for
a real run (10-second buckets instead of minutes), plus the timeline and the
verdicts, so the real day and the simulated one can be compared side by side.
``report.json`` holds every number the page shows.
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

from gridctl.demo.day import MACHINES, DayResult, Verdict
from gridctl.demo.desired import BASELINE, SPECIALIST

BUCKET_SECONDS = 10.0


def served_rows(result: DayResult) -> list[dict[str, list[int]]]:
    """Per 10-second bucket: workload -> [offered, served]."""
    buckets = int(result.duration // BUCKET_SECONDS) + 1
    rows: list[dict[str, list[int]]] = [{} for _ in range(buckets)]
    for o in result.outcomes:
        index = min(buckets - 1, max(0, int(o.started // BUCKET_SECONDS)))
        cell = rows[index].setdefault(o.workload, [0, 0])
        cell[0] += 1
        cell[1] += 0 if o.error else 1
    return rows


def residency_rows(result: DayResult) -> list[dict[str, list[str]]]:
    """Per 10-second bucket: host -> models routable there at the bucket's last sample."""
    buckets = int(result.duration // BUCKET_SECONDS) + 1
    rows: list[dict[str, list[str]]] = [{} for _ in range(buckets)]
    for sample in result.samples:
        index = int(sample.at // BUCKET_SECONDS)
        if not 0 <= index < buckets:
            continue
        by_host: dict[str, list[str]] = {}
        for model, hosts in sample.routable.items():
            for host in hosts:
                by_host.setdefault(host, []).append(model)
        rows[index] = by_host
    return rows


def document(results: list[tuple[DayResult, list[Verdict]]]) -> dict[str, Any]:
    runs = []
    for result, checks in results:
        latencies = sorted(o.seconds for o in result.outcomes if o.error is None)
        runs.append(
            {
                "strategy": result.strategy,
                "duration_seconds": result.duration,
                "phases": [{"name": n, "start_seconds": round(s, 1)} for n, s in result.phases],
                "requests": len(result.outcomes),
                "served": len(result.outcomes) - len(result.failed),
                "failed": len(result.failed) + result.unanswered,
                "unanswered": result.unanswered,
                "p50_seconds": round(latencies[len(latencies) // 2], 3) if latencies else None,
                "p95_seconds": round(latencies[int(len(latencies) * 0.95)], 3)
                if latencies
                else None,
                "served_by": _served_by(result),
                "timeline": [
                    {"at_seconds": round(line.at, 1), "kind": line.kind, "text": line.text}
                    for line in result.lines
                ],
                "verdicts": [
                    {"promise": v.promise, "held": v.held, "evidence": v.evidence} for v in checks
                ],
                "failures": [
                    {"at_seconds": round(o.started, 1), "stream": o.stream, "error": o.error}
                    for o in result.failed
                ],
            }
        )
    return {"kind": "fleet-demo", "bucket_seconds": BUCKET_SECONDS, "runs": runs}


def _served_by(result: DayResult) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for o in result.outcomes:
        if o.error is None:
            row = out.setdefault(o.workload, {})
            row[str(o.model)] = row.get(str(o.model), 0) + 1
    return {w: dict(sorted(r.items())) for w, r in sorted(out.items())}


def write_report(directory: Path, results: list[tuple[DayResult, list[Verdict]]]) -> Path:
    """``report.json``, the charts and ``index.html`` in ``directory``."""
    from gridctl.cli.lab_report import residency_chart, served_chart

    directory.mkdir(parents=True, exist_ok=True)
    doc = document(results)
    (directory / "report.json").write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    charts = [
        served_chart(
            [(r.strategy, served_rows(r)) for r, _ in results],
            directory / "served.png",
            unit="10 s",
            window=3,
        )
    ]
    hosts = [f"local-{i}" for i in range(1, MACHINES + 1)]
    for r, _ in results:
        charts.append(
            residency_chart(
                r.strategy,
                residency_rows(r),
                hosts,
                [BASELINE, SPECIALIST],
                directory / f"residency-{r.strategy}.png",
                unit="10 s",
            )
        )
    sections = []
    for run in doc["runs"]:
        verdict_rows = "".join(
            f"<tr><td>{'held' if v['held'] else 'NOT HELD'}</td>"
            f"<td style='text-align:left'>{html.escape(v['promise'])}</td>"
            f"<td style='text-align:left'>{html.escape(v['evidence'])}</td></tr>"
            for v in run["verdicts"]
        )
        timeline = "\n".join(
            f"+{int(t['at_seconds'] // 60):02d}:{int(t['at_seconds'] % 60):02d}  {t['text']}"
            for t in run["timeline"]
        )
        sections.append(
            f"<h2>{html.escape(run['strategy'])}: {run['served']} served, "
            f"{run['failed']} failed, p95 {run['p95_seconds']} s</h2>"
            f"<table>{verdict_rows}</table><pre>{html.escape(timeline)}</pre>"
        )
    images = "".join(f'<p><img src="{html.escape(n)}" alt="{html.escape(n)}"></p>' for n in charts)
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>gridctl fleet demo</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px}</style></head><body>"
        "<h1>gridctl fleet demo: a real day on this machine</h1>"
        + "".join(sections)
        + images
        + '<p><a href="report.json">report.json</a></p></body></html>\n'
    )
    path = directory / "index.html"
    path.write_text(page)
    return path
