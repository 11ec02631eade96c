"""Canonical JSON of planner inputs and plans, and the input digest.

Every collection in the domain has set semantics (tags, runtimes, hosts,
residencies...), so canonical form sorts every list by the canonical text of
its items and every mapping by key. Shuffling hosts, models or residencies in
the input therefore changes neither the digest nor the plan's bytes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from enum import Enum
from typing import Any

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelProfile, Plan

JsonValue = Any


def canonical(value: object) -> JsonValue:
    """A JSON-ready value with every list sorted and every enum replaced by its value."""
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: canonical(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [canonical(v) for v in value]
        return sorted(items, key=dumps)
    return value


def dumps(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


_FIELDS: dict[type, tuple[str, ...]] = {}  # dataclass field names; bounded by the types


def canonical_text(value: object, strings: dict[str, str] | None = None) -> str:
    """``dumps(canonical(value))``, built in one pass without re-serialising sort keys.

    ``strings`` memoises the JSON text of repeated strings within one call tree.
    """
    memo: dict[str, str] = {} if strings is None else strings
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Enum):
        value = value.value
    if isinstance(value, str):
        text = memo.get(value)
        if text is None:
            text = memo[value] = json.dumps(value, ensure_ascii=True)
        return text
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        names = _FIELDS.get(type(value))
        if names is None:
            names = _FIELDS[type(value)] = tuple(sorted(f.name for f in dataclasses.fields(value)))
        inner = ",".join(
            f"{canonical_text(n, memo)}:{canonical_text(getattr(value, n), memo)}" for n in names
        )
        return "{" + inner + "}"
    if isinstance(value, Mapping):
        items = sorted((str(k), v) for k, v in value.items())
        body = ",".join(f"{canonical_text(k, memo)}:{canonical_text(v, memo)}" for k, v in items)
        return "{" + body + "}"
    if isinstance(value, (list, tuple, set, frozenset)):
        return "[" + ",".join(sorted(canonical_text(v, memo) for v in value)) + "]"
    return canonical_text(str(value), memo)


def input_digest(
    profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, policy: ControllerPolicy
) -> str:
    """SHA-256 of the canonical serialisation of every planning input."""
    strings: dict[str, str] = {}
    text = (
        '{"policy":'
        + canonical_text(policy, strings)
        + ',"profiles":'
        + canonical_text(list(profiles), strings)
        + ',"snapshot":'
        + canonical_text(snapshot, strings)
        + "}"
    )
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def plan_to_json(plan: Plan) -> dict[str, JsonValue]:
    """The plan as plain JSON (the shape ``gridctl plan --json`` prints)."""
    return {
        "input_digest": plan.input_digest,
        "now": plan.now,
        "targets": {model: replicas for model, replicas in plan.targets},
        "assignments": [
            {
                "model_id": a.model_id,
                "host_id": a.host_id,
                "runtime": a.runtime,
                "memory_mb": a.memory_mb,
                "reason": a.reason,
                "demand_class": a.demand_class.value,
                "priority": a.priority,
                "existing": a.existing,
            }
            for a in plan.assignments
        ],
        "preemptions": [
            {
                "host_id": p.host_id,
                "model_id": p.model_id,
                "beneficiary": p.beneficiary,
                "reason": p.reason,
            }
            for p in plan.preemptions
        ],
        "unsatisfied": [
            {
                "model_id": u.model_id,
                "code": u.code.value,
                "message": u.message,
                "missing_replicas": u.missing_replicas,
                "host_id": u.host_id,
            }
            for u in plan.unsatisfied
        ],
        "explanations": {
            e.model_id: {
                "target_replicas": e.target_replicas,
                "target_reason": e.target_reason,
                "demand_class": e.demand_class.value if e.demand_class else None,
                "candidates": [
                    {
                        "host_id": c.host_id,
                        "rejection": c.rejection,
                        "detail": c.detail,
                        "score": c.score,
                        "components": {s.name: s.value for s in c.components},
                        "chosen": c.chosen,
                    }
                    for c in e.candidates
                ],
            }
            for e in plan.explanations
        },
    }


def plan_bytes(plan: Plan) -> bytes:
    """Canonical bytes of a plan: equal inputs give equal bytes."""
    return dumps(plan_to_json(plan)).encode("ascii")
