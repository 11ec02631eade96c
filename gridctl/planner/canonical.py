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
import keyword
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from enum import Enum
from json.encoder import encode_basestring_ascii
from typing import Any

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelProfile, Plan
from gridctl.planner.plan_document import decisions_json, explanation_json

JsonValue = Any


def canonical(value: object) -> JsonValue:
    """A JSON-ready value with every list sorted and every enum replaced by its value."""
    if isinstance(value, Enum):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: canonical(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if not _omitted(f, getattr(value, f.name))
        }
    if isinstance(value, Mapping):
        return {str(k): canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [canonical(v) for v in value]
        return sorted(items, key=dumps)
    return value


def _omitted(f: dataclasses.Field[Any], value: object) -> bool:
    """A field added later that is left out of the text while ``None`` (``split`` of a
    profile): inputs that never use it keep the digest they had before it existed."""
    return value is None and bool(f.metadata.get("canonical_omit_none"))


def dumps(value: JsonValue) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# ``canonical_text`` writes ``dumps(canonical(value))`` in one pass. Planning
# inputs are a few dataclass types with many fields (a host has 32, a profile
# 29, the policy 75), so each dataclass type gets an encoder generated once from
# its fields, the way ``dataclasses`` generates ``__init__``: per field one
# attribute read and one exact-type test for the type the field declares (a
# field still holding its immutable default is recognised by identity), no call
# for ints, floats, one-string tuples and all-member enum tuples, and one
# f-string for the whole object. A value of any other type (a bool in an int
# field, a subclass, a list where a tuple is declared, nan) fails the test and
# takes the general path, ``_text``, which follows ``canonical`` rule by rule.
# Measured with valgrind on the benchmark's cold 64x32 fleet: 16.0 M
# instructions per digest with a loop over each object's fields, 6.1 M with
# generated encoders (2.1 M of which is SHA-256 itself).

_Encoder = Callable[[Any], str]
_SEQUENCES = (list, tuple, set, frozenset)
_SCALARS = (str, int, float, bool, type(None))
_string = encode_basestring_ascii
# per dataclass type, its generated encoder: bounded by the types, a pure function of each
_ENCODERS: dict[type, _Encoder] = {}
_ENUM_TEXT: dict[int, tuple[Enum, str]] = {}  # JSON text of enum members seen, by identity
# how many objects of each dataclass type the loop wrote before its encoder (``_first_encoder``)
_LOOPED: dict[type, int] = {}
_LOOPED_BEFORE_GENERATING = 2
# The text of each tuple of one or two strings written so far by the call in progress
# (``canonical_text``, ``input_digest``), emptied when it returns: a fleet's hosts and
# profiles repeat a few runtimes, backends and tags. A tuple of exact strings equals
# another exactly when their texts are equal, so the memo is exact; a hit costs about
# 800 instructions fewer than writing the text (measured on the benchmark's cold 64x32
# digest: 0.17 M instructions fewer).
_NAMES: dict[tuple[str, ...], str] = {}


# The text of each int field value written so far by the call in progress, emptied with
# ``_NAMES``: capacities, reserves, priorities and replica bounds repeat across a fleet's
# hosts and profiles. Only exact ints are looked up (no two of them are equal with
# different texts, unlike ``True`` and ``1`` or ``0.0`` and ``-0.0``), so the memo is
# exact; a hit costs about 700 instructions fewer than formatting the int (measured).
_INTS: dict[int, str] = {}


def _int_text(value: int) -> str:
    """The text of an exact int, remembered in ``_INTS``."""
    text = _INTS[value] = int.__repr__(value)
    return text


def _names_text(value: tuple[str, ...]) -> str:
    """The text of a tuple of strings, remembered in ``_NAMES``."""
    texts = [_string(v) for v in value]
    texts.sort()
    text = _NAMES[value] = "[" + ",".join(texts) + "]"
    return text


def canonical_text(value: object) -> str:
    """``dumps(canonical(value))``, built in one pass without re-serialising sort keys."""
    try:
        return _text(value)
    finally:
        _NAMES.clear()
        _INTS.clear()


def _text(value: Any) -> str:
    kind = type(value)
    if kind is str:
        return _string(value)
    encoder = _ENCODERS.get(kind)
    if encoder is not None:
        return encoder(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        return _float_text(value)
    if kind is tuple or kind is list or kind is set or kind is frozenset:
        return _list_text(value)
    if kind is dict:
        return _mapping_text(value)
    return _general(value)


def _general(value: Any) -> str:
    """Subclasses and the rarer types, tested in the order ``canonical`` and json test them."""
    if isinstance(value, Enum):
        return _enum_text(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _first_encoder(type(value))(value)
    if isinstance(value, Mapping):
        return _mapping_text(value)
    if isinstance(value, _SEQUENCES):
        return _list_text(value)
    if isinstance(value, str):
        return _string(value)  # a subclass is written as its characters
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float_text(value)
    return _string(str(value))  # not JSON (dumps would refuse it): written as its text


def _float_text(value: float) -> str:
    if value - value == 0.0:  # finite
        return float.__repr__(value)
    return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"


def _list_text(value: Any) -> str:
    texts = [_text(v) for v in value]
    if len(texts) > 1:
        texts.sort()
    return "[" + ",".join(texts) + "]"


def _mapping_text(value: Any) -> str:
    merged = {str(k): v for k, v in value.items()}  # as canonical: keys equal as text merge
    return "{" + ",".join([_string(k) + ":" + _text(merged[k]) for k in sorted(merged)]) + "}"


def _enum_text(value: Enum) -> str:
    """An enum member's value as json writes it (``canonical`` does not descend into it)."""
    hit = _ENUM_TEXT.get(id(value))
    if hit is not None and hit[0] is value:
        return hit[1]
    text = dumps(value.value)
    if type(value.value) in _SCALARS:  # immutable: remembered (holding the member keeps its id)
        _ENUM_TEXT[id(value)] = (value, text)
    return text


def _first_encoder(kind: type) -> _Encoder:
    """The encoder of a dataclass type met outside a generated encoder: the field loop for
    the first two objects of the type, the generated encoder from the third. Generating
    one compiles a function of every field, which costs more than the loop writing an
    object (the 75-field policy: 3.3 ms against 0.1 ms, measured), and a one-shot process
    (``gridctl plan``) writes the policy and the snapshot twice at most (the plan's digest
    and the dry run's input lines); hosts, profiles and residencies come by the hundred.
    Both write the same text."""
    if kind in _ENCODERS:
        return _ENCODERS[kind]
    looped = _LOOPED.get(kind, 0)
    if looped >= _LOOPED_BEFORE_GENERATING:
        return _encoder(kind)
    _LOOPED[kind] = looped + 1
    return _fields_loop


def _encoder(kind: type) -> _Encoder:
    """The encoder of a dataclass type, generated the first time the type is seen."""
    encoder = _ENCODERS.get(kind)
    if encoder is None:
        _ENCODERS[kind] = _fields_loop  # for a field of the same type, while generating
        encoder = _ENCODERS[kind] = _generated_encoder(kind)
    return encoder


def _fields_loop(value: Any) -> str:
    """A dataclass as a JSON object, field by field through the general path."""
    named = sorted((f.name, f) for f in dataclasses.fields(value))
    return (
        "{"
        + ",".join(
            [
                _string(n) + ":" + _text(getattr(value, n))
                for n, f in named
                if not _omitted(f, getattr(value, n))
            ]
        )
        + "}"
    )


def _generated_encoder(kind: type) -> _Encoder:
    fields = sorted(dataclasses.fields(kind), key=lambda f: f.name)
    if not all(f.name.isidentifier() and not keyword.iskeyword(f.name) for f in fields):
        return _fields_loop
    hints = _type_hints(kind)
    scope: dict[str, Any] = {"_text": _text, "_string": _string, "_EMPTY": ()}
    scope.update(_NAMES=_NAMES, _names_text=_names_text, _INTS=_INTS, _int_text=_int_text)
    if fields and fields[0].metadata.get("canonical_omit_none"):
        return _fields_loop  # (an omitted first field would leave a leading comma)
    lines = ["def encode(v):"]
    parts = []
    for i, f in enumerate(fields):
        x = f"x{i}"
        lines.append(f"    {x} = v.{f.name}")
        omit = bool(f.metadata.get("canonical_omit_none"))
        if omit:
            lines.append(f"    o{i} = {x} is None")
        clauses = _clauses(hints.get(f.name), f.default, scope, x)
        for number, (condition, statement) in enumerate(clauses):
            lines.append(f"    {'elif' if number else 'if'} {condition}:")
            lines.append(f"        {statement}")
        lines.append("    else:" if clauses else "    if True:")
        lines.append(f"        {x} = _text({x})")
        if omit:  # None is left out, with its comma
            key = "," + _string(f.name) + ":"
            lines.append(f'    {x} = "" if o{i} else {key!r} + {x}')
            parts.append(f"{{{x}}}")
        else:
            parts.append(("," if parts else "") + f"{_string(f.name)}:{{{x}}}")
    lines.append("    return f" + repr("{{" + "".join(parts) + "}}"))
    exec("\n".join(lines), scope)  # source built above from identifiers and names in scope
    encoder: _Encoder = scope["encode"]
    return encoder


def _type_hints(kind: type) -> dict[str, Any]:
    try:
        return typing.get_type_hints(kind)
    except Exception:  # an annotation that does not resolve: every field takes the general path
        return {}


def _clauses(hint: Any, default: object, scope: dict[str, Any], x: str) -> list[tuple[str, str]]:
    """``(condition, statement)`` pairs writing the text of field value ``x`` into ``x``.

    Each condition admits only values whose text the statement writes exactly as
    ``canonical`` and json would; anything else falls through to ``_text``.
    """
    clauses: list[tuple[str, str]] = []
    if _constant(default) and default is not None and type(default) is not bool:
        scope[f"{x}_default"] = default
        clauses.append((f"{x} is {x}_default", f"{x} = {_text(default)!r}"))
    options = typing.get_args(hint) if _is_union(hint) else (hint,)
    if type(None) in options:
        clauses.append((f"{x} is None", f'{x} = "null"'))
    for option in options:
        clauses.extend(_type_clauses(option, scope, x))
    if type(default) is tuple and not default:  # the default clause already writes ()
        return [clause for clause in clauses if clause[0] != f"{x} is _EMPTY"]
    return clauses


def _type_clauses(hint: Any, scope: dict[str, Any], x: str) -> list[tuple[str, str]]:
    if hint is str:
        return [(f"type({x}) is str", f"{x} = _string({x})")]
    if hint is int:
        return [(f"type({x}) is int", f"{x} = _INTS.get({x}) or _int_text({x})")]
    if hint is float:
        return [(f"type({x}) is float and {x} - {x} == 0.0", f"{x} = f'{{{x}!r}}'")]
    if hint is bool:
        return [(f"{x} is True", f'{x} = "true"'), (f"{x} is False", f'{x} = "false"')]
    if isinstance(hint, type) and issubclass(hint, Enum):
        scope[f"{x}_type"], scope[f"{x}_members"] = hint, _member_texts(hint)
        return [(f"type({x}) is {x}_type", f"{x} = {x}_members.get(id({x})) or _text({x})")]
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        scope[f"{x}_type"], scope[f"{x}_encode"] = hint, _encoder(hint)
        return [(f"type({x}) is {x}_type", f"{x} = {x}_encode({x})")]
    origin = typing.get_origin(hint)
    if origin is tuple:
        items = typing.get_args(hint)
        clauses = [(f"{x} is _EMPTY", f'{x} = "[]"')]
        if len(items) == 2 and items[1] is Ellipsis:
            clauses.extend(_tuple_clauses(items[0], scope, x))
            scope[f"{x}_items"] = _items_encoder(items[0])
            clauses.append((f"type({x}) is tuple", f"{x} = {x}_items({x})"))
        return clauses
    if origin is dict or origin is Mapping:
        return [(f"type({x}) is dict and not {x}", f'{x} = "{{}}"')]
    return []


def _tuple_clauses(item: Any, scope: dict[str, Any], x: str) -> list[tuple[str, str]]:
    """Tuples written without a call: one or two strings (remembered in ``_NAMES``), or
    every member of an enum in order (tested member by member: ``map`` and ``all`` over
    them cost about 2,000 instructions more per value, measured)."""
    if item is str:
        one = f"type({x}) is tuple and len({x}) == 1 and type({x}[0]) is str"
        two = f"type({x}) is tuple and len({x}) == 2 and type({x}[0]) is str is type({x}[1])"
        remembered = f"{x} = _NAMES.get({x}) or _names_text({x})"
        return [(one, remembered), (two, remembered)]
    if isinstance(item, type) and issubclass(item, Enum):
        members = tuple(item)  # each member once, in definition order
        if members and all(_constant(m) for m in members):
            for i, member in enumerate(members):
                scope[f"{x}_m{i}"] = member
            each = " and ".join(f"{x}[{i}] is {x}_m{i}" for i in range(len(members)))
            every = f"len({x}) == {len(members)} and {each}"
            return [(f"type({x}) is tuple and {every}", f"{x} = {_text(members)!r}")]
    return []


def _constant(value: object) -> bool:
    """Immutable all the way down, so its text can be written once."""
    if type(value) in _SCALARS:
        return True
    if isinstance(value, Enum):
        return type(value.value) in _SCALARS
    return type(value) is tuple and all(_constant(v) for v in value)


def _member_texts(kind: type[Enum]) -> dict[int, str]:
    """The text of each member whose value is immutable, by identity (the class holds them)."""
    return {id(m): _enum_text(m) for m in kind.__members__.values() if _constant(m)}


def _items_encoder(hint: Any) -> _Encoder:
    """The text of a tuple declared ``tuple[hint, ...]``; other items take the general path."""
    if hint is str:

        def strings(value: Any) -> str:
            if len(value) == 1 and type(value[0]) is str:  # most tuples of names hold one
                return f"[{_string(value[0])}]"
            texts = [_string(v) if type(v) is str else _text(v) for v in value]
            if len(texts) > 1:
                texts.sort()
            return "[" + ",".join(texts) + "]"

        return strings
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        encode = _encoder(hint)

        def objects(value: Any) -> str:
            if len(value) == 1 and type(value[0]) is hint:
                return f"[{encode(value[0])}]"
            texts = [encode(v) if type(v) is hint else _text(v) for v in value]
            if len(texts) > 1:
                texts.sort()
            return "[" + ",".join(texts) + "]"

        return objects
    if isinstance(hint, type) and issubclass(hint, Enum):
        members = _member_texts(hint)

        def enums(value: Any) -> str:
            texts = [members.get(id(v)) or _text(v) for v in value]
            if len(texts) > 1:
                texts.sort()
            return "[" + ",".join(texts) + "]"

        return enums
    return _list_text


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


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
            return canonical_text(value)  # may change between plans
        key = id(value)
        self._used.add(key)
        hit = self._by_identity.get(key)
        if hit is not None and hit[0] is value:
            return hit[1]
        found = canonical_text(value)
        self._by_identity[key] = (value, found)
        return found

    def forget_unused(self) -> int:
        """Drop every text not used since the last call; how many were dropped."""
        stale = [key for key in self._by_identity if key not in self._used]
        for key in stale:
            del self._by_identity[key]
        self._used = set()
        return len(stale)

    def fields_text(self, value: object) -> str:
        """A dataclass as ``canonical_text`` writes it, each field's text remembered."""
        named = sorted((f.name, f) for f in dataclasses.fields(value))  # type: ignore[arg-type]
        body = [
            f"{encode_basestring_ascii(n)}:{self.text(getattr(value, n))}"
            for n, f in named
            if not _omitted(f, getattr(value, n))
        ]
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
    try:
        text = _inputs_text(profiles, snapshot, policy, texts)
    finally:
        _NAMES.clear()
        _INTS.clear()
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def _inputs_text(
    profiles: Sequence[ModelProfile],
    snapshot: FleetSnapshot,
    policy: ControllerPolicy,
    texts: InputTexts | None,
) -> str:
    if texts is None:
        policy_text = _text(policy)
        profiles_text = _list_text(profiles)
        snapshot_text = _text(snapshot)
    else:
        policy_text = texts.text(policy)
        profiles_text = texts.text(list(profiles))
        snapshot_text = texts.fields_text(snapshot)
    return f'{{"policy":{policy_text},"profiles":{profiles_text},"snapshot":{snapshot_text}}}'


def plan_to_json(plan: Plan) -> dict[str, JsonValue]:
    """The plan as plain JSON with every candidate row of every model (``plan_bytes``;
    the documents people read are ``plan_document``'s, rows only where asked)."""
    document: dict[str, JsonValue] = decisions_json(plan)
    document["explanations"] = {e.model_id: explanation_json(e) for e in plan.explanations}
    return document


def plan_bytes(plan: Plan) -> bytes:
    """Canonical bytes of a plan: equal inputs give equal bytes."""
    return dumps(plan_to_json(plan)).encode("ascii")
