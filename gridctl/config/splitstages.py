"""The split stages a host reports (the allocator envelope's ``split_stages``), read
into ``ObservedStage`` and written back out.

The wire schema already refuses a row of the wrong shape with the whole report. What
a schema cannot say is checked here, row by row, the way residency rows are: a stage
must cover a non-empty half-open layer range, its index must lie inside its stage
count, its ids must be ids, and one host cannot report the same stage twice. A row
that fails is excluded with a reason naming it, and the caller makes the host
unhealthy (fail closed), as it does for a malformed residency row. The rest of the
report is taken as usual.

Stages are kept sorted by model, term and index, and a host serving none keeps
``None`` rather than ``()``: a fleet without splits reads, and digests, exactly as
before.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from gridctl.domain import ObservedStage

# ``defs/identifiers.schema.json#/$defs/id`` and the envelope's endpoint pattern
_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}")
_ENDPOINT = re.compile(r"[!-~]+:[0-9]{1,5}")
MAX_TERM = 9007199254740991
MAX_STAGES = 64
MAX_LAYER = 1048576
MAX_ENDPOINT = 300

StageKey = tuple[str, int, int]


def _count(row: dict[str, Any], name: str, low: int, high: int) -> str | None:
    value = row.get(name)
    if not isinstance(value, int) or isinstance(value, bool):
        return f"{name} must be an integer"
    if not low <= value <= high:
        return f"{name} {value} is outside {low}..{high}"
    return None


def stage_problem(row: Any) -> str | None:
    """Why ``row`` is not a stage a host can serve, or None when it is one."""
    if not isinstance(row, dict):
        return "a stage row must be an object"
    for name in ("model_id", "coordinator_id"):
        value = row.get(name)
        if not isinstance(value, str) or _ID.fullmatch(value) is None:
            return f"{name} must be an id (letters, digits, ._:/-; at most 128)"
    for name, low, high in (
        ("coordinator_term", 1, MAX_TERM),
        ("stage_index", 0, MAX_STAGES - 1),
        ("stage_count", 1, MAX_STAGES),
        ("layer_start", 0, MAX_LAYER),
        ("layer_end", 1, MAX_LAYER),
    ):
        problem = _count(row, name, low, high)
        if problem is not None:
            return problem
    if row["stage_index"] >= row["stage_count"]:
        return f"stage_index {row['stage_index']} is not below stage_count {row['stage_count']}"
    if row["layer_start"] >= row["layer_end"]:
        return f"layer_start {row['layer_start']} is not below layer_end {row['layer_end']}"
    endpoint = row.get("endpoint")
    if (
        not isinstance(endpoint, str)
        or len(endpoint) > MAX_ENDPOINT
        or _ENDPOINT.fullmatch(endpoint) is None
    ):
        return "endpoint must be host:port"
    return None


def stage_from_row(row: dict[str, Any]) -> ObservedStage:
    """A stage from a row ``stage_problem`` found nothing wrong with."""
    return ObservedStage(
        model_id=row["model_id"],
        coordinator_id=row["coordinator_id"],
        coordinator_term=row["coordinator_term"],
        stage_index=row["stage_index"],
        stage_count=row["stage_count"],
        layer_start=row["layer_start"],
        layer_end=row["layer_end"],
        endpoint=row["endpoint"],
    )


def stage_order(stage: ObservedStage) -> StageKey:
    """Model, term, index: how stages are kept and shown, and what one host cannot
    report twice (a model's term has one coordinator and one layer range per index)."""
    return (stage.model_id, stage.coordinator_term, stage.stage_index)


def stages_from_rows(
    rows: Iterable[Any] | None,
) -> tuple[tuple[ObservedStage, ...] | None, tuple[str, ...]]:
    """The valid stages of ``rows`` in order (None when there are none) and, for each
    row left out, ``malformed split stage row N: why``."""
    stages: dict[StageKey, ObservedStage] = {}
    reasons: list[str] = []
    for index, row in enumerate(rows or ()):
        problem = stage_problem(row)
        if problem is None:
            stage = stage_from_row(row)
            if stage_order(stage) in stages:
                problem = (
                    f"stage {stage.stage_index} of {stage.model_id} under term "
                    f"{stage.coordinator_term} is reported twice"
                )
            else:
                stages[stage_order(stage)] = stage
        if problem is not None:
            reasons.append(f"malformed split stage row {index}: {problem}")
    ordered = tuple(stages[key] for key in sorted(stages))
    return (ordered or None), tuple(reasons)


def stage_json(stage: ObservedStage) -> dict[str, Any]:
    """One stage as the envelope, a fleet snapshot and the status document carry it."""
    return {
        "model_id": stage.model_id,
        "coordinator_id": stage.coordinator_id,
        "coordinator_term": stage.coordinator_term,
        "stage_index": stage.stage_index,
        "stage_count": stage.stage_count,
        "layer_start": stage.layer_start,
        "layer_end": stage.layer_end,
        "endpoint": stage.endpoint,
    }
