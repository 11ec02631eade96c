"""``gridctl forecast``: replay request observations through the demand learners.

Reads a JSONL file of bounded request observations
(``schemas/wire/observation.schema.json``), folds them into the production
learners and prints per-model forecasts (with correlated demand and its
sources), per-workload demand, mature workload transitions and outcome
evidence. ``observation_portfolio`` is the same replay feeding portfolio
planning, used by ``gridctl plan --observations``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from gridctl.client import ControllerClient, ControllerError
from gridctl.config import load_directory
from gridctl.config.schemas import validator
from gridctl.demand import DemandLearner, DemandPicture, RequestFeatures
from gridctl.demand.observations import parse_record, replay
from gridctl.domain import DesiredState, FleetSnapshot, WorkloadCatalog
from gridctl.errors import ConfigError, WireError
from gridctl.planner.portfolio import inputs_from_picture, plan_portfolio
from gridctl.planner.portfolio_types import PortfolioResult

OBSERVATION_SCHEMA = "wire/observation.schema.json"
MAX_OBSERVATION_LINES = 1_000_000
DEFAULT_DIRECTORY = "policies"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "forecast",
        help="replay request observations through the demand learners",
        description=(
            "Replay FILE.jsonl (one observation per line, schemas/wire/observation.schema.json) "
            "through the demand learners of DIR's configured models and workload catalog, and "
            "print per-model forecasts, per-workload demand, mature workload transitions and "
            "outcome evidence."
        ),
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=DEFAULT_DIRECTORY,
        metavar="DIR",
        help=f"desired-state directory (default: {DEFAULT_DIRECTORY})",
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--observations", metavar="FILE.jsonl")
    source.add_argument(
        "--against",
        metavar="URL",
        nargs="?",
        const="",
        help="read a running controller's learned demand instead (default URL: the current "
        "context's controller)",
    )
    parser.add_argument(
        "--now",
        type=float,
        metavar="T",
        help="forecast instant (default: the last observation's time)",
    )
    parser.add_argument("--json", action="store_true", help="print the forecast as JSON")
    parser.set_defaults(func=run)


def load_observations(
    path: str | Path, catalog: WorkloadCatalog, max_bytes: int | None = None
) -> list[RequestFeatures]:
    """Every observation in ``path``; a malformed line raises ``WireError`` naming it.

    A file larger than ``max_bytes`` (the policy's ``trace_max_bytes``) is refused
    before it is read."""
    check = validator(OBSERVATION_SCHEMA)
    rows: list[RequestFeatures] = []
    size = os.stat(path).st_size
    if max_bytes is not None and size > max_bytes:
        raise WireError(f"observations are {size} bytes; trace_max_bytes is {max_bytes}", "file")
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if number > MAX_OBSERVATION_LINES:
                raise WireError(f"more than {MAX_OBSERVATION_LINES} observations", f"line {number}")
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise WireError(f"not JSON: {exc.msg}", f"line {number}") from exc
            error = next(iter(check.iter_errors(record)), None)
            if error is not None:
                field = "/".join(str(p) for p in error.absolute_path)
                raise WireError(error.message[:200], f"line {number} {field}".strip())
            try:
                rows.append(parse_record(record, catalog))
            except ValueError as exc:
                raise WireError(str(exc), f"line {number}") from exc
    return rows


def learn(desired: DesiredState, rows: list[RequestFeatures]) -> DemandLearner:
    artifacts = {p.name: p.artifact.sha256 for p in desired.profiles}
    return replay(rows, desired.policy, desired.catalog, artifacts)


def observation_portfolio(
    desired: DesiredState, snapshot: FleetSnapshot, path: str | Path
) -> PortfolioResult:
    """The portfolio for ``snapshot`` with demand learned from ``path`` (at snapshot.now)."""
    rows = load_observations(path, desired.catalog, desired.policy.trace_max_bytes)
    learner = learn(desired, rows)
    picture = learner.picture(snapshot.now)
    inputs = inputs_from_picture(
        desired.profiles, snapshot, desired.policy, picture, desired.catalog
    )
    return plan_portfolio(inputs)


def forecast_document(picture: DemandPicture) -> dict[str, Any]:
    sources = dict(picture.correlation_sources)
    return {
        "now": picture.now,
        "observations": picture.revision,
        "models": [
            {
                "model": d.model_id,
                "requests_per_minute": round(d.requests_per_minute, 6),
                "offered_concurrency": round(d.offered_concurrency, 6),
                "queue_depth": d.queue_depth,
                "p95_latency_ms": d.p95_latency_ms,
                "error_rate": round(d.error_rate, 6),
                "trend_per_minute": round(d.trend_per_minute, 6),
                "confidence": round(d.confidence, 6),
                "samples": d.sample_count,
                "correlated_requests_per_minute": round(d.correlated_requests_per_minute, 6),
                "sources": list(sources.get(d.model_id, ())),
            }
            for d in picture.models
        ],
        "workloads": [
            {
                "workload": w.workload,
                "requests": w.requests,
                "requests_per_minute": round(w.requests_per_minute, 6),
                "offered_concurrency": round(w.offered_concurrency, 6),
                "queue_depth": w.queue_depth,
                "error_rate": round(w.error_rate, 6),
                "anticipated_requests_per_minute": round(w.anticipated_requests_per_minute, 6),
                "anticipated_from": list(w.anticipated_from),
            }
            for w in picture.workloads
        ],
        "transitions": [
            {
                "from": t.source,
                "to": t.target,
                "confidence": round(t.confidence, 6),
                "examples": t.examples,
                "lead_seconds": round(t.lead_seconds, 6),
            }
            for t in picture.transitions
        ],
        "outcomes": [
            {
                "model": o.model_id,
                "workload": o.workload,
                "artifact_sha256": o.artifact_sha256 or None,
                "samples": round(o.samples, 6),
                "confidence": round(o.confidence, 6),
                "success_rate": None if o.success_rate is None else round(o.success_rate, 6),
                "evaluations": round(o.evaluations, 6),
                "quality": o.quality,
                "quality_confidence": round(o.quality_confidence, 6),
                "exploration_bonus": round(o.exploration_bonus, 6),
            }
            for o in picture.outcomes
        ],
    }


def live_document(url: str | None) -> dict[str, Any]:
    """A running controller's forecasts and workload admission (a public read)."""
    with ControllerClient(url or None) as client:
        status = client.status()
        where = client.base_url
    return {
        "controller": where,
        "models": status.get("forecasts") or [],
        "admission": status.get("admission") or [],
        "portfolio": status.get("portfolio"),
    }


def print_live(doc: dict[str, Any]) -> None:
    print(f"gridctl forecast: learned demand of {doc['controller']}")
    print("\nModels (direct demand):")
    for m in doc["models"]:
        print(
            f"  {m['model_id']:<24} {m['requests_per_minute']:.2f} req/min  concurrency "
            f"{m['offered_concurrency']:.2f}  confidence {m['confidence']:.2f}  "
            f"samples {m['sample_count']}"
        )
    if not doc["models"]:
        print("  (none)")
    print("\nWorkloads (unbound demand):")
    for row in doc["admission"]:
        print(
            f"  {row['workload']:<16} {row['state']:<20} {row.get('model_id') or '-':<24} "
            f"{row.get('reason') or ''}"
        )
    if not doc["admission"]:
        print("  (none)")


def run(args: argparse.Namespace) -> int:
    if args.against is not None:
        try:
            live = live_document(args.against)
        except ControllerError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return exc.exit_code
        if args.json:
            print(json.dumps(live, indent=2, sort_keys=True))
        else:
            print_live(live)
        return 0
    try:
        desired = load_directory(args.directory)
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue.render(), file=sys.stderr)
        return 1
    try:
        rows = load_observations(args.observations, desired.catalog, desired.policy.trace_max_bytes)
    except (OSError, WireError) as exc:
        print(f"error: {args.observations}: {exc}", file=sys.stderr)
        return 1
    now = args.now if args.now is not None else max((r.t for r in rows), default=0.0)
    document = forecast_document(learn(desired, rows).picture(now))
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_forecast(document)
    return 0


def print_forecast(doc: dict[str, Any]) -> None:
    print(f"gridctl forecast: {doc['observations']} observations, now {doc['now']:.0f}")
    print("\nModels (direct demand):")
    for m in doc["models"] or [{"model": "(none)"}]:
        if "requests_per_minute" not in m:
            print("  (none)")
            continue
        inferred = ""
        if m["correlated_requests_per_minute"]:
            inferred = (
                f", correlated {m['correlated_requests_per_minute']:.2f}/min "
                f"from {', '.join(m['sources'])}"
            )
        print(
            f"  {m['model']}: {m['requests_per_minute']:.2f}/min, offered concurrency "
            f"{m['offered_concurrency']:.2f}, {m['samples']} samples{inferred}"
        )
    print("\nWorkloads (unbound demand):")
    for w in doc["workloads"]:
        print(
            f"  {w['workload']}: {w['requests']} requests, {w['requests_per_minute']:.2f}/min, "
            f"offered concurrency {w['offered_concurrency']:.2f}"
        )
    if not doc["workloads"]:
        print("  (none)")
    print("\nTransitions (mature):")
    for t in doc["transitions"]:
        print(
            f"  {t['from']} -> {t['to']}: confidence {t['confidence']:.2f}, "
            f"{t['examples']} examples, lead {t['lead_seconds']:.0f}s"
        )
    if not doc["transitions"]:
        print("  (none)")
    print("\nOutcome evidence:")
    for o in doc["outcomes"]:
        print(
            f"  {o['model']} / {o['workload']}: {o['samples']:.1f} samples, confidence "
            f"{o['confidence']:.2f}, quality confidence {o['quality_confidence']:.2f}, "
            f"bonus {o['exploration_bonus']:.2f}"
        )
    if not doc["outcomes"]:
        print("  (none)")


def print_portfolio(result: PortfolioResult) -> None:
    """Admission rows and the joint portfolio, after ``gridctl plan``'s diff."""
    print()
    print("Joint portfolio:")
    for workload, model_id in result.mapping:
        print(f"  {workload} -> {model_id or '(deferred)'}")
    selected = ", ".join(result.selected) or "(none)"
    print(f"  selected: {selected}; exploration slot: {result.exploration_model or '(none)'}")
    print(f"  {result.portfolios} portfolio(s), {result.evaluations} planner evaluation(s)")
    print()
    print("Admission:")
    for row in result.admission:
        model_id = row.model_id or "-"
        print(
            f"  {row.workload}: {row.state.value} ({model_id}; offered concurrency "
            f"{row.offered_concurrency:.2f}; desired {row.desired}, planned {row.planned}, "
            f"ready {row.ready}, missing {row.missing}): {row.reason}"
        )
    if not result.admission:
        print("  (no active unbound workload)")
