"""The demand learners' bounded state as rows, and back, so it survives a restart.

One row per demand bucket (``direct`` per configured model, ``unbound`` per
workload), per affinity cursor, per workload transition and per workload's
last arrivals (``arrivals``: a sparse workload's rhythm): ``(kind, name,
slot, body)`` with ``body`` JSON text. A cursor's name is the double-hashed
session token the learner already holds (the raw affinity key never exists
here); a transition's name is its ``[source, target]`` pair. Rows are the unit
of trust on the way back: each one is validated on its own, so a corrupt row
is refused with the reason and its key while every other row is restored.
Restoring also applies the windows at the instant given: buckets older than
the demand window, cursors or transitions not seen within the affinity
expiry, and arrivals whose rhythm can no longer recur are dropped rather than
revived. Pure: time is an argument.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gridctl.demand.buckets import BucketSeries, DemandBucket, bucket_start
from gridctl.demand.histograms import BUCKETS, LatencyHistogram
from gridctl.demand.learning import RECURRENCE_ARRIVALS
from gridctl.demand.sequences import LEAD_SAMPLES, Cursor, SequenceLearner, TransitionStats
from gridctl.domain import ControllerPolicy

SERIES_KINDS = ("direct", "unbound")
CURSOR, TRANSITION, ARRIVALS = "cursor", "transition", "arrivals"
KINDS = (*SERIES_KINDS, CURSOR, TRANSITION, ARRIVALS)
MAX_NAME_CHARS = 512

Row = tuple[str, str, float, str]  # (kind, name, slot, body JSON)
RowKey = tuple[str, str, float]


class RowError(ValueError):
    """One persisted row that cannot be trusted (the message names the row)."""


@dataclass
class Restored:
    """The learners' state rebuilt from rows, and what was left out and why."""

    direct: dict[str, BucketSeries] = field(default_factory=dict)
    unbound: dict[str, BucketSeries] = field(default_factory=dict)
    cursors: dict[str, Cursor] = field(default_factory=dict)
    transitions: dict[tuple[str, str], TransitionStats] = field(default_factory=dict)
    arrivals: dict[str, tuple[float, ...]] = field(default_factory=dict)
    restored: int = 0
    expired: int = 0  # outside their window at the restoring instant
    refused: list[str] = field(default_factory=list)  # one message per invalid row


def _body(values: dict[str, Any]) -> str:
    return json.dumps(values, sort_keys=True, separators=(",", ":"))


def learner_rows(
    direct: dict[str, BucketSeries],
    unbound: dict[str, BucketSeries],
    sequences: SequenceLearner,
    arrivals: dict[str, tuple[float, ...]] | None = None,
) -> dict[RowKey, str]:
    """Every bucket, cursor, transition and workload's last arrivals the learners hold,
    keyed for the store."""
    rows: dict[RowKey, str] = {}
    for kind, book in (("direct", direct), ("unbound", unbound)):
        for name, series in book.items():
            for b in series.buckets:
                rows[(kind, name, b.start)] = _body(
                    {
                        "width": series.width,
                        "requests": b.requests,
                        "errors": b.errors,
                        "refused": b.refused,
                        "service_seconds": b.service_seconds,
                        "max_queue": b.max_queue,
                        "latency": [list(pair) for pair in b.latency.counts],
                    }
                )
    for key, c in sequences.cursors.items():
        rows[(CURSOR, key, 0.0)] = _body(
            {"workload": c.workload, "started": c.started, "completed": c.completed, "seen": c.seen}
        )
    for (source, target), s in sequences.transitions.items():
        name = json.dumps([source, target], separators=(",", ":"))
        rows[(TRANSITION, name, 0.0)] = _body(
            {"examples": s.examples, "leads": list(s.leads), "seen": s.seen}
        )
    for name, starts in (arrivals or {}).items():
        rows[(ARRIVALS, name, 0.0)] = _body({"starts": list(starts)})
    return rows


# --- validation -----------------------------------------------------------------------


def _number(body: dict[str, Any], name: str) -> float:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RowError(f"{name} must be a number")
    if not math.isfinite(value) or value < 0:
        raise RowError(f"{name} must be finite and not negative (got {value!r})")
    return float(value)


def _count(body: dict[str, Any], name: str) -> int:
    value = body.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise RowError(f"{name} must be a non-negative integer (got {value!r})")
    return value


def _text(value: Any, name: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise RowError(f"{name} must be a non-empty string of at most {MAX_NAME_CHARS} chars")
    return value


def _bucket(slot: float, body: dict[str, Any], width: float) -> DemandBucket:
    if _number(body, "width") != width:
        raise RowError(f"width {body.get('width')!r} is not the policy's {width:g} s buckets")
    if slot != bucket_start(slot, width):
        raise RowError(f"slot {slot!r} is not the start of a {width:g} s bucket")
    requests, errors = _count(body, "requests"), _count(body, "errors")
    if errors > requests or requests == 0:
        raise RowError(f"{errors} errors in {requests} requests")
    # rows written before refusals were counted apart have none: every request was served
    refused = _count(body, "refused") if "refused" in body else 0
    if refused > errors:
        raise RowError(f"{refused} refused requests but {errors} errors (a refusal is one)")
    raw = body.get("latency")
    if not isinstance(raw, list):
        raise RowError("latency must be a list of [index, count] pairs")
    pairs: list[tuple[int, int]] = []
    for pair in raw:
        ok = isinstance(pair, list) and len(pair) == 2
        index, count = pair if ok else (None, None)
        if not ok or isinstance(index, bool) or isinstance(count, bool):
            raise RowError("latency must be a list of [index, count] pairs")
        if not isinstance(index, int) or not 0 <= index < BUCKETS:
            raise RowError(f"latency index {index!r} is outside 0..{BUCKETS - 1}")
        if not isinstance(count, int) or count <= 0:
            raise RowError(f"latency count {count!r} must be a positive integer")
        pairs.append((index, count))
    indexes = [i for i, _ in pairs]
    if indexes != sorted(set(indexes)):
        raise RowError("latency indexes must be sorted and distinct")
    if sum(c for _, c in pairs) != requests:
        raise RowError(f"latency counts {sum(c for _, c in pairs)} != requests {requests}")
    return DemandBucket(
        start=slot,
        requests=requests,
        errors=errors,
        service_seconds=_number(body, "service_seconds"),
        max_queue=_number(body, "max_queue"),
        latency=LatencyHistogram(tuple(pairs)),
        refused=refused,
    )


def _cursor(body: dict[str, Any]) -> Cursor:
    started, completed = _number(body, "started"), _number(body, "completed")
    seen = _number(body, "seen")
    if not started <= completed <= seen:
        raise RowError("a cursor needs started <= completed <= seen")
    return Cursor(_text(body.get("workload"), "workload"), started, completed, seen)


def _transition(name: str, body: dict[str, Any]) -> tuple[tuple[str, str], TransitionStats]:
    try:
        edge = json.loads(name)
    except ValueError:
        edge = None
    if not isinstance(edge, list) or len(edge) != 2:
        raise RowError("a transition's name must be a [source, target] pair")
    source, target = _text(edge[0], "source"), _text(edge[1], "target")
    if source == target:
        raise RowError("a transition moves to another workload")
    examples = _count(body, "examples")
    if examples == 0:
        raise RowError("a transition needs at least one example")
    leads = body.get("leads")
    if not isinstance(leads, list) or not 0 < len(leads) <= min(examples, LEAD_SAMPLES):
        raise RowError(f"leads must list 1..{LEAD_SAMPLES} lead times, one per example")
    values = tuple(_number({"lead": v}, "lead") for v in leads)
    return (source, target), TransitionStats(examples, values, _number(body, "seen"))


def _arrivals(body: dict[str, Any], width: float) -> tuple[float, ...]:
    raw = body.get("starts")
    if not isinstance(raw, list) or not 0 < len(raw) <= RECURRENCE_ARRIVALS:
        raise RowError(f"starts must list 1..{RECURRENCE_ARRIVALS} bucket starts")
    starts = tuple(_number({"start": v}, "start") for v in raw)
    if list(starts) != sorted(set(starts)):
        raise RowError("starts must be increasing")
    if any(start != bucket_start(start, width) for start in starts):
        raise RowError(f"every start must begin a {width:g} s bucket")
    return starts


# --- restoring ---------------------------------------------------------------------------


def restore_rows(rows: Iterable[Row], policy: ControllerPolicy, now: float) -> Restored:
    """Rebuild learner state from ``rows`` as of ``now`` (see the module docstring)."""
    width, window = policy.demand_bucket_seconds, policy.demand_window_buckets
    horizon = bucket_start(now, width) - (window - 1) * width
    affinity_horizon = now - policy.affinity_expiry_seconds
    out = Restored()
    buckets: dict[tuple[str, str], list[DemandBucket]] = {}
    for kind, name, slot, text in rows:
        where = f"demand row {kind}/{str(name)[:64]}@{slot}"
        try:
            if kind not in KINDS:
                raise RowError(f"kind must be one of {', '.join(KINDS)}")
            _text(name, "name")
            if not isinstance(slot, int | float) or not math.isfinite(slot):
                raise RowError("slot must be a finite number")
            try:
                body = json.loads(text)
            except (TypeError, ValueError) as exc:
                raise RowError(f"body is not JSON ({exc})") from None
            if not isinstance(body, dict):
                raise RowError("body must be a JSON object")
            if kind in SERIES_KINDS:
                bucket = _bucket(float(slot), body, width)
                if bucket.start < horizon or bucket.start > now:
                    out.expired += 1
                    continue
                buckets.setdefault((kind, name), []).append(bucket)
            elif kind == ARRIVALS:
                starts = _arrivals(body, width)
                # past half again the longest gap the policy allows, it cannot recur
                if starts[-1] > now or (
                    now - starts[-1] > 1.5 * policy.sparse_recurrence_max_gap_seconds
                ):
                    out.expired += 1
                    continue
                out.arrivals[name] = starts
            elif kind == CURSOR:
                cursor = _cursor(body)
                if cursor.seen < affinity_horizon or cursor.seen > now:
                    out.expired += 1
                    continue
                out.cursors[name] = cursor
            else:
                edge, stats = _transition(name, body)
                if stats.seen < affinity_horizon or stats.seen > now:
                    out.expired += 1
                    continue
                out.transitions[edge] = stats
        except RowError as exc:
            out.refused.append(f"{where}: {exc}")
            continue
        out.restored += 1
    for (kind, name), found in sorted(buckets.items()):
        book = out.direct if kind == "direct" else out.unbound
        ordered = tuple(sorted(found, key=lambda b: b.start))
        book[name] = BucketSeries(name, width, window, ordered)
    _bound_affinity(out, policy)
    return out


def overlay(
    restored: Restored,
    direct: dict[str, BucketSeries],
    unbound: dict[str, BucketSeries],
    sequences: SequenceLearner,
    policy: ControllerPolicy,
    arrivals: dict[str, tuple[float, ...]] | None = None,
) -> Restored:
    """``restored`` laid over what this process learned itself (a controller taking
    over from another): a persisted bucket, cursor or transition replaces the local
    one with the same key, local-only ones stay, and the windows and caps hold."""
    merged = Restored(
        direct=_overlay_series(direct, restored.direct, policy),
        unbound=_overlay_series(unbound, restored.unbound, policy),
        cursors={**sequences.cursors, **restored.cursors},
        transitions={**sequences.transitions, **restored.transitions},
        arrivals=_overlay_arrivals(arrivals or {}, restored.arrivals),
        restored=restored.restored,
        expired=restored.expired,
        refused=list(restored.refused),
    )
    cursors = sorted(merged.cursors.items(), key=lambda kv: (kv[1].seen, kv[0]))
    transitions = sorted(merged.transitions.items(), key=lambda kv: (kv[1].seen, kv[0]))
    merged.cursors = dict(cursors[max(0, len(cursors) - policy.affinity_max_workflows) :])
    merged.transitions = dict(
        transitions[max(0, len(transitions) - policy.affinity_max_transitions) :]
    )
    return merged


def _overlay_arrivals(
    local: dict[str, tuple[float, ...]], persisted: dict[str, tuple[float, ...]]
) -> dict[str, tuple[float, ...]]:
    """Per workload, the newest arrivals of both, within the learner's count."""
    return {
        name: tuple(sorted({*local.get(name, ()), *persisted.get(name, ())}))[-RECURRENCE_ARRIVALS:]
        for name in sorted({*local, *persisted})
    }


def _overlay_series(
    local: dict[str, BucketSeries], persisted: dict[str, BucketSeries], policy: ControllerPolicy
) -> dict[str, BucketSeries]:
    result = dict(local)
    for name, series in persisted.items():
        mine = local.get(name)
        by_start = {b.start: b for b in mine.buckets} if mine is not None else {}
        by_start.update({b.start: b for b in series.buckets})
        horizon = max(by_start) - (series.window - 1) * series.width
        kept = tuple(by_start[start] for start in sorted(by_start) if start >= horizon)
        result[name] = BucketSeries(name, series.width, series.window, kept)
    return result


def _bound_affinity(out: Restored, policy: ControllerPolicy) -> None:
    """Least recently seen first (the learners' eviction order), within their caps."""
    cursors = sorted(out.cursors.items(), key=lambda kv: (kv[1].seen, kv[0]))
    transitions = sorted(out.transitions.items(), key=lambda kv: (kv[1].seen, kv[0]))
    over = max(0, len(cursors) - policy.affinity_max_workflows)
    over_t = max(0, len(transitions) - policy.affinity_max_transitions)
    out.expired += over + over_t
    out.restored -= over + over_t
    out.cursors = dict(cursors[over:])
    out.transitions = dict(transitions[over_t:])
