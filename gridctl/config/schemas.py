"""Access to the JSON Schemas in ``schemas/``: the single source of validation truth.

Schemas reference each other with relative ``$ref``s (so editors resolve them
from the file system too); here each one is registered under its file URI.
Defaults are read from the schemas as well: ``fill_defaults`` applies every
``default`` an omitted property declares.

The wire intake schemas a controller checks on every heartbeat, and the desired-state
kinds a directory holds by the hundred, are also compiled once by ``jsonschema_rs``
(``conforms``, ``compiled_accepts``): its acceptance is final, and anything it
refuses is judged again by ``jsonschema`` itself, which stays the one that decides
and names the bad field (and is imported only then: 60-80 ms of a fresh process).
Only schemas whose patterns mean the same in both regex engines are compiled;
``tests/config/test_schema_engines.py`` checks on generated and mutated documents
that the compiled validator never accepts what ``jsonschema`` refuses.
"""

from __future__ import annotations

import copy
import json
import re
from functools import cache
from typing import TYPE_CHECKING, Any

import jsonschema_rs

from gridctl.config.schema_files import file_uri, lookup, raw, registry, schema_dir

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

_registry = registry  # the ``referencing`` registry ``jsonschema`` resolves ``$ref``s with

KIND_SCHEMAS: dict[str, str] = {
    "ModelProfile": "model-profile.schema.json",
    "ControllerPolicy": "controller-policy.schema.json",
    "WorkloadCatalog": "workload-catalog.schema.json",
    "Fleet": "fleet.schema.json",
    "NodePolicy": "node-policy.schema.json",
}


@cache
def load_schema(relative: str) -> dict[str, Any]:
    """The schema at ``schemas/<relative>``, with ``$id`` set to its file URI."""
    uri = file_uri(schema_dir() / relative)
    schema = dict(raw(uri))
    schema["$id"] = uri
    return schema


@cache
def validator(relative: str) -> Draft202012Validator:
    """The ``jsonschema`` validator of ``schemas/<relative>``: the one that decides and
    names the fault (imported here, so a process whose documents the compiled validator
    accepts never loads it)."""
    from jsonschema import Draft202012Validator

    schema = load_schema(relative)
    return Draft202012Validator(inlined(schema) or schema, registry=registry())


COMPILED_SCHEMAS = (
    "wire/heartbeat.schema.json",
    "wire/registration.schema.json",
    "defs/residency.schema.json",
    # a 1,000-host snapshot file: 1.5 s through jsonschema, 6 ms compiled (measured)
    "wire/fleet-snapshot.schema.json",
    # the desired-state kinds a directory holds by the hundred: 200 ModelProfiles took
    # 0.2 s through jsonschema on every `gridctl plan` and every config load
    "model-profile.schema.json",
    "controller-policy.schema.json",
    "workload-catalog.schema.json",
    "node-policy.schema.json",
)
# A pattern of plain ASCII with no escapes reads the same to Python's ``re`` and to
# the Rust engine. The schemas end their patterns with ``END`` rather than ``$``:
# Python's ``$`` also matches before a final newline (``"h\n"`` would pass as an id),
# while "no character follows" means the end of the string to every engine.
_PORTABLE_PATTERN = re.compile(r"^[\x20-\x5b\x5d-\x7e]*$")
END = r"(?![\s\S])"
# Escaped patterns checked by hand to mean the same in both engines: the printable
# text classes of ``defs/identifiers.schema.json`` (``label`` and ``message``). Both
# engines read ``\xHH`` as one code point and a negated class as "any other one".
# The artifact ``source`` of ``model-profile.schema.json`` names its whitespace one code
# point at a time: Python's ``\s`` (which ``\S`` negates) also matches \x1c-\x1f and
# \x85 and the Rust engine's matches \ufeff, so ``\S+`` read differently; the class is
# Python's ``\s`` written out, and ``\uHHHH`` is one code point to both engines.
SOURCE_PATTERN = (
    r"^(file|https?|hf|pypi)://[^\x09-\x0d\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028"
    r"\u2029\u202f\u205f\u3000]+"
)
_SAME_IN_BOTH = frozenset({r"^[^\x00-\x1f\x7f]*", r"^[^\x00-\x08\x0b-\x1f\x7f]*", SOURCE_PATTERN})


@cache
def compiled(relative: str) -> jsonschema_rs.Validator | None:
    """A compiled validator of ``schemas/<relative>`` for ``conforms``; None when the
    schema is not one of ``COMPILED_SCHEMAS`` or cannot be compiled faithfully."""
    if relative not in COMPILED_SCHEMAS:
        return None
    schema = inlined(load_schema(relative))
    if schema is None or not _portable(schema):
        return None
    try:
        return jsonschema_rs.Draft202012Validator(schema, validate_formats=False, offline=True)
    except ValueError:  # a schema the compiler does not take stays with jsonschema
        return None


def _portable(node: Any) -> bool:
    """No keyword whose meaning could differ between the two engines: every pattern
    plain ASCII without escapes, and no ``patternProperties`` or ``format``."""
    if isinstance(node, list):
        return all(_portable(item) for item in node)
    if not isinstance(node, dict):
        return True
    if "patternProperties" in node or "format" in node:
        return False
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        body = pattern.removesuffix(END)
        if body not in _SAME_IN_BOTH and not _PORTABLE_PATTERN.match(body):
            return False
    return all(_portable(value) for value in node.values())


def compiled_accepts(relative: str, instance: Any) -> bool:
    """Whether the compiled validator accepts ``instance`` (False when there is none or
    it cannot read the value, such as a string holding a lone surrogate)."""
    fast = compiled(relative)
    if fast is None:
        return False
    try:
        return fast.is_valid(instance)
    except (ValueError, TypeError, OverflowError):
        return False


def conforms(relative: str, instance: Any) -> bool:
    """Whether ``instance`` is valid against ``schemas/<relative>``, exactly as
    ``jsonschema`` decides: the compiled validator answers when it accepts, and
    ``jsonschema`` judges whatever it refuses."""
    return compiled_accepts(relative, instance) or validator(relative).is_valid(instance)


_ONE = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
)
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_NAMED = ("properties", "patternProperties", "dependentSchemas")
_MAX_REF_DEPTH = 16


def inlined(schema: dict[str, Any]) -> dict[str, Any] | None:
    """``schema`` with every ``$ref`` replaced by the schema it names (as an ``allOf``
    member, which is what a ``$ref`` beside other keywords means), so a validation
    follows no reference at all; None when that cannot be done faithfully (a cycle, a
    reference outside the schema keywords, or keywords whose annotations depend on
    how subschemas are reached), and the schema is then validated as written."""
    try:
        result: dict[str, Any] = _inline(schema, str(schema["$id"]), 0)
    except _NotInlinable:
        return None
    text = json.dumps(result)
    if '"$ref"' in text or '"unevaluatedProperties"' in text or '"unevaluatedItems"' in text:
        return None
    return result


class _NotInlinable(Exception):
    pass


def _inline(node: Any, base_uri: str, depth: int) -> Any:
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in ("$ref", "$defs", "definitions", "$id", "$schema"):
            continue
        if key in _ONE and isinstance(value, dict):
            out[key] = _inline(value, base_uri, depth)
        elif key in _MANY and isinstance(value, list):
            out[key] = [_inline(v, base_uri, depth) for v in value]
        elif key in _NAMED and isinstance(value, dict):
            out[key] = {name: _inline(v, base_uri, depth) for name, v in value.items()}
        else:
            out[key] = value
    ref = node.get("$ref")
    if ref is not None:
        if depth >= _MAX_REF_DEPTH or not isinstance(ref, str):
            raise _NotInlinable(ref)
        contents, contents_uri = lookup(ref, base_uri)
        target = _inline(contents, contents_uri, depth + 1)
        out["allOf"] = [*out.get("allOf", []), target]
    return out


def resolve(schema: dict[str, Any], base_uri: str) -> tuple[dict[str, Any], str]:
    """Follow ``$ref`` chains until a schema without one."""
    seen = 0
    while "$ref" in schema and seen < 32:
        seen += 1
        contents, base_uri = lookup(schema["$ref"], base_uri)
        merged = dict(contents)
        merged.update({k: v for k, v in schema.items() if k != "$ref"})
        schema = merged
    return schema, base_uri


def object_properties(
    schema: dict[str, Any], base_uri: str
) -> list[tuple[str, dict[str, Any], str]]:
    schema, base_uri = resolve(schema, base_uri)
    found = [(name, sub, base_uri) for name, sub in schema.get("properties", {}).items()]
    for member in schema.get("allOf", []):
        found.extend(object_properties(member, base_uri))
    return found


_NO_DEFAULT = object()
_IMMUTABLE = (str, int, float, bool, type(None))
_IMMUTABLE_TYPES = frozenset(_IMMUTABLE)


class _DefaultsPlan:
    """What ``fill_defaults`` does at one place of a schema, worked out from the schema
    (its ``$ref``s resolved, its ``allOf`` members listed) the first time an instance
    reaches that place and kept: a filled heartbeat follows no reference at all."""

    def __init__(self, schema: dict[str, Any], base_uri: str) -> None:
        self._schema, self._base = resolve(schema, base_uri)
        self._properties: list[tuple[str, Any, _DefaultsPlan]] | None = None
        self._items: _DefaultsPlan | None = None
        self._active: bool | None = None
        self._visits: list[tuple[str, Any, _DefaultsPlan | None]] | None = None

    def properties(self) -> list[tuple[str, Any, _DefaultsPlan]]:
        if self._properties is None:
            found = []
            for name, sub, sub_base in object_properties(self._schema, self._base):
                resolved, resolved_base = resolve(sub, sub_base)
                default = sub.get("default", resolved.get("default", _NO_DEFAULT))
                found.append((name, default, _DefaultsPlan(resolved, resolved_base)))
            self._properties = found
        return self._properties

    def items(self) -> _DefaultsPlan | None:
        items = self._schema.get("items")
        if not isinstance(items, dict):
            return None
        if self._items is None:
            self._items = _DefaultsPlan(items, self._base)
        return self._items

    def active(self, visiting: frozenset[int] = frozenset()) -> bool:
        """Whether any default is declared here or below: a place without one is not
        walked (the resources of 1,000 snapshot hosts hold 38,000 such values)."""
        if self._active is None:
            if id(self) in visiting:  # a recursive schema: walked, to be safe
                return True
            inner = visiting | {id(self)}
            each = self.items()
            self._active = any(
                default is not _NO_DEFAULT or plan.active(inner)
                for _, default, plan in self.properties()
            ) or (each is not None and each.active(inner))
        return self._active

    def _visited(self) -> list[tuple[str, Any, _DefaultsPlan | None]]:
        """The properties ``apply`` looks at: each with its default and the plan of its
        value where that plan has work to do."""
        if self._visits is None:
            self._visits = [
                (name, default, plan if plan.active() else None)
                for name, default, plan in self.properties()
                if default is not _NO_DEFAULT or plan.active()
            ]
        return self._visits

    def apply(self, instance: Any) -> None:
        if isinstance(instance, dict):
            for name, default, plan in self._visited():
                if name not in instance:
                    if default is _NO_DEFAULT:
                        continue
                    fresh = isinstance(default, _IMMUTABLE)
                    instance[name] = default if fresh else _copied(default)
                if plan is not None:
                    plan.apply(instance[name])
        elif isinstance(instance, list):
            each = self.items()
            if each is not None and each.active():
                for item in instance:
                    each.apply(item)


@cache
def _defaults_plan(relative: str) -> _DefaultsPlan:
    schema = load_schema(relative)
    return _DefaultsPlan(schema, schema["$id"])


def _copied(value: Any) -> Any:
    """A deep copy of parsed JSON or YAML: mappings and lists rebuilt, immutable
    scalars shared, anything else (a YAML timestamp, a set) through ``deepcopy``.
    About five times faster than ``deepcopy`` on a heartbeat or a snapshot host,
    which keeps no memo because parsed documents hold no shared or cyclic parts."""
    kind = type(value)
    if kind is dict:
        return {key: _copied(item) for key, item in value.items()}
    if kind is list:
        return [_copied(item) for item in value]
    if kind in _IMMUTABLE_TYPES:
        return value
    return copy.deepcopy(value)


def fill_defaults(instance: Any, relative: str) -> Any:
    """A deep copy of a *valid* ``instance`` with every schema default applied."""
    result = _copied(instance)
    _defaults_plan(relative).apply(result)
    return result


def defaults_of(relative: str, pointer: str) -> dict[str, Any]:
    """``{property: default}`` of the object schema at ``pointer`` inside a schema."""
    schema = load_schema(relative)
    node: dict[str, Any] = schema
    for token in [t for t in pointer.split("/") if t]:
        node = node[token]
    node, base = resolve(node, schema["$id"])
    result: dict[str, Any] = {}
    for name, sub, sub_base in object_properties(node, base):
        resolved, _ = resolve(sub, sub_base)
        if "default" in sub:
            result[name] = sub["default"]
        elif "default" in resolved:
            result[name] = resolved["default"]
    return result
