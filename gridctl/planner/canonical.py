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
from json.encoder import encode_basestring_ascii
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


_INFINITY = float("inf")
# per dataclass type: (field name, JSON text of the name plus ":"), sorted by name;
# bounded by the number of dataclass types, and a pure function of each type
_FIELDS: dict[type, tuple[tuple[str, str], ...]] = {}
_SEQUENCES = (list, tuple, set, frozenset)
_ENUMS: set[type] = set()  # enum types seen; bounded by the types
_ENUM_TEXT: dict[int, tuple[Enum, str]] = {}  # JSON text of enum members seen, by identity


def canonical_text(value: object, strings: dict[str, str] | None = None) -> str:
    """``dumps(canonical(value))``, built in one pass without re-serialising sort keys.

    ``strings`` memoises the JSON text of repeated strings within one call tree.
    """
    return _text(value, {} if strings is None else strings)


def _text(value: object, memo: dict[str, str]) -> str:
    kind = type(value)
    # the common exact types first; anything else takes the general path
    if kind is str:
        assert isinstance(value, str)
        text = memo.get(value)
        if text is None:
            text = memo[value] = encode_basestring_ascii(value)
        return text
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        assert isinstance(value, int)
        return int.__repr__(value)
    if kind is float:
        assert isinstance(value, float)
        if value != value or value in (_INFINITY, -_INFINITY):
            return json.dumps(value)
        return float.__repr__(value)
    if kind is tuple or kind is list or kind is set or kind is frozenset:
        assert isinstance(value, _SEQUENCES)
        if len(value) < 2:
            return "[" + "".join([_text(v, memo) for v in value]) + "]"
        return "[" + ",".join(sorted([_text(v, memo) for v in value])) + "]"
    names = _FIELDS.get(kind)
    if names is not None:
        return _fields_text(value, names, memo)
    if kind in _ENUMS:
        return _enum_text(value, memo)
    if kind is dict:
        assert isinstance(value, dict)
        return _mapping_text(value, memo)
    return _general(value, memo)


def _mapping_text(value: Mapping[object, object], memo: dict[str, str]) -> str:
    items = sorted((str(k), v) for k, v in value.items())
    return "{" + ",".join(f"{_text(k, memo)}:{_text(v, memo)}" for k, v in items) + "}"


def _enum_text(value: object, memo: dict[str, str]) -> str:
    """An enum member's value as JSON, remembered by the member's identity."""
    hit = _ENUM_TEXT.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    assert isinstance(value, Enum)
    text = _text(value._value_, memo)
    _ENUM_TEXT[id(value)] = (value, text)  # holding the member keeps its id unique
    return text


def _fields_text(value: object, names: tuple[tuple[str, str], ...], memo: dict[str, str]) -> str:
    """A dataclass as a JSON object; string, None and int fields inline (most of them)."""
    body: list[str] = []
    for name, prefix in names:
        field = getattr(value, name)
        kind = type(field)
        if kind is str:
            text = memo.get(field)
            if text is None:
                text = memo[field] = encode_basestring_ascii(field)
        elif field is None:
            text = "null"
        elif kind is int:
            text = int.__repr__(field)
        elif kind in _ENUMS:
            text = _enum_text(field, memo)
        elif kind is tuple and len(field) < 2:
            text = "[" + _text(field[0], memo) + "]" if field else "[]"
        elif kind is float and field - field == 0.0:  # finite
            text = float.__repr__(field)
        else:
            text = _text(field, memo)
        body.append(prefix + text)
    return "{" + ",".join(body) + "}"


def _general(value: object, memo: dict[str, str]) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, Enum):
        _ENUMS.add(type(value))
        return _text(value.value, memo)
    if isinstance(value, str):
        return _text(str.__str__(value), memo)
    if isinstance(value, int):
        return json.dumps(value)
    if isinstance(value, float):
        return json.dumps(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = type(value)
        names = tuple(
            (name, json.dumps(name, ensure_ascii=True) + ":")
            for name in sorted(f.name for f in dataclasses.fields(value))
        )
        _FIELDS[kind] = names
        return _fields_text(value, names, memo)
    if isinstance(value, Mapping):
        return _mapping_text(value, memo)
    if isinstance(value, _SEQUENCES):
        return "[" + ",".join(sorted([_text(v, memo) for v in value])) + "]"
    return _text(str(value), memo)


class InputTexts:
    """Canonical texts of inputs that repeat, unchanged, across plans.

    A portfolio search plans the same profiles, policy and hosts many times with
    different demand; it passes one ``InputTexts`` to each plan so their canonical
    text is built once. A controller that keeps one across its ticks re-serialises
    only the hosts (and profiles) that are new objects since the last tick: the
    items of a sequence are remembered one by one, so a new tuple of mostly
    unchanged hosts reuses their texts; ``forget_unused`` after each tick keeps it
    bounded. Values are remembered by identity (and kept alive here, so an
    identity is never reused), which is exact for frozen inputs.
    """

    def __init__(self) -> None:
        self.strings: dict[str, str] = {}
        self._by_identity: dict[int, tuple[object, str]] = {}
        self._used: set[int] = set()

    def text(self, value: object) -> str:
        """``canonical_text(value)``."""
        kind = type(value)
        if kind is tuple or kind is list:
            assert isinstance(value, (tuple, list))
            items = [self.text(v) for v in value]
            if len(items) > 1:
                items.sort()
            return "[" + ",".join(items) + "]"
        if not _frozen(value):
            return canonical_text(value, self.strings)  # may change between plans
        key = id(value)
        self._used.add(key)
        hit = self._by_identity.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        found = canonical_text(value, self.strings)
        self._by_identity[key] = (value, found)
        return found

    def forget_unused(self) -> int:
        """Drop every text not used since the last call; how many were dropped."""
        stale = [key for key in self._by_identity if key not in self._used]
        for key in stale:
            del self._by_identity[key]
        self._used = set()
        self.strings.clear()
        return len(stale)

    def fields_text(self, value: object) -> str:
        """A dataclass as ``canonical_text`` writes it, each field's text remembered."""
        names = sorted(f.name for f in dataclasses.fields(value))  # type: ignore[arg-type]
        body = [f"{encode_basestring_ascii(n)}:{self.text(getattr(value, n))}" for n in names]
        return "{" + ",".join(body) + "}"


def _frozen(value: object) -> bool:
    if type(value) is tuple:
        return True
    params = getattr(type(value), "__dataclass_params__", None)
    return params is not None and bool(params.frozen)


def input_digest(
    profiles: Sequence[ModelProfile],
    snapshot: FleetSnapshot,
    policy: ControllerPolicy,
    texts: InputTexts | None = None,
) -> str:
    """SHA-256 of the canonical serialisation of every planning input."""
    if texts is None:
        strings: dict[str, str] = {}
        policy_text = canonical_text(policy, strings)
        profiles_text = canonical_text(list(profiles), strings)
        snapshot_text = canonical_text(snapshot, strings)
    else:
        policy_text = texts.text(policy)
        profiles_text = texts.text(list(profiles))
        snapshot_text = texts.fields_text(snapshot)
    text = (
        '{"policy":' + policy_text + ',"profiles":' + profiles_text + ',"snapshot":' + snapshot_text
    ) + "}"
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
