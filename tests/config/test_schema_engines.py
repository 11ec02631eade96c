"""The compiled wire validators (``jsonschema_rs``) never accept what ``jsonschema``
refuses, so ``conforms`` decides exactly as ``jsonschema`` does.

Documents are generated from each compiled schema itself (``_valid_for`` reads the
schema's keywords and refuses any it does not know, so a schema that grows a new
keyword grows this generator too), then mutated: a value replaced by arbitrary
JSON, a key dropped, a key added, an array grown with a duplicate. The two engines
must agree on every one, identifiers ending in a newline included (the schemas end
their patterns with ``schemas.END``, not Python's ``$``). ``validate_wire`` refuses
exactly the documents ``jsonschema`` refuses, naming a field ``jsonschema`` found at
fault.
"""

from __future__ import annotations

import copy
import functools
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gridctl.config.schemas import (
    COMPILED_SCHEMAS,
    compiled,
    compiled_accepts,
    conforms,
    inlined,
    load_schema,
    validator,
)
from gridctl.config.yamlsource import escape_pointer_token
from gridctl.controller.registry import validate_wire
from gridctl.errors import WireError

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["", "a\n", "ready", "managed", "llama.cpp", "x" * 129, "A" * 64]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


KEYWORDS = {
    "additionalProperties", "allOf", "anyOf", "const", "default", "description", "enum",
    "exclusiveMinimum", "items", "maxItems", "maxLength", "maximum", "minItems", "minLength",
    "minimum", "pattern", "properties", "propertyNames", "required", "title", "type",
    "uniqueItems",
}  # fmt: skip
TYPES = ("null", "boolean", "integer", "number", "string", "array", "object")


def _folded(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with its ``allOf`` members merged in (an inlined ``$ref``)."""
    result = {k: v for k, v in schema.items() if k != "allOf"}
    for member in schema.get("allOf", []):
        for key, value in _folded(member).items():
            result.setdefault(key, value)
    return result


def _valid_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    schema = _folded(schema)
    unknown = set(schema) - KEYWORDS
    assert not unknown, f"the generator does not model {sorted(unknown)}"
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        return st.one_of([_valid_for({**rest, "allOf": [branch]}) for branch in schema["anyOf"]])
    declared = schema.get("type", list(TYPES))
    types = [declared] if isinstance(declared, str) else declared
    return st.one_of([_typed(kind, schema) for kind in types])


def _typed(kind: str, schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    low, high = schema.get("minimum"), schema.get("maximum")
    above = schema.get("exclusiveMinimum")
    if kind == "null":
        return st.none()
    if kind == "boolean":
        return st.booleans()
    if kind == "integer":
        fewest = None if low is None else math.ceil(low)
        if above is not None:
            fewest = max(fewest or -math.inf, math.floor(above) + 1)
        most = None if high is None else math.floor(high)
        if fewest is not None and most is not None and fewest > most:
            return st.nothing()
        whole = st.integers(fewest, most)
        return whole | whole.filter(lambda n: abs(n) < 2**53).map(float)  # 3.0 is an integer
    if kind == "number":
        if above is not None and (low is None or low <= above):
            low, exclude = above, True
        else:
            exclude = False
        fraction = st.floats(low, high, exclude_min=exclude, allow_nan=False, allow_infinity=False)
        return fraction | _typed("integer", schema)
    if kind == "string":
        shortest, longest = schema.get("minLength", 0), schema.get("maxLength", 40)
        text = (
            st.from_regex(schema["pattern"], fullmatch=True)
            if "pattern" in schema
            else st.text(max_size=40)
        )
        return text.filter(lambda s: shortest <= len(s) <= longest)
    if kind == "array":
        items = _valid_for(schema["items"]) if "items" in schema else JSON
        unique = (lambda v: json.dumps(v, sort_keys=True)) if schema.get("uniqueItems") else None
        fewest = schema.get("minItems", 0)
        return st.lists(
            items,
            min_size=fewest,
            max_size=max(fewest, min(schema.get("maxItems", 4), 4)),
            unique_by=unique,
        )
    assert kind == "object"
    properties = schema.get("properties", {})
    required = set(schema.get("required", []))
    fixed = st.fixed_dictionaries(
        {name: _valid_for(sub) for name, sub in properties.items() if name in required},
        optional={
            name: _valid_for(sub) for name, sub in properties.items() if name not in required
        },
    )
    missing = {name: JSON for name in required - set(properties)}
    additional = schema.get("additionalProperties", True)
    if additional is False:
        return fixed
    names = (
        _valid_for(schema["propertyNames"]).filter(lambda k: isinstance(k, str))
        if "propertyNames" in schema
        else st.text(max_size=8)
    )
    values = _valid_for(additional) if isinstance(additional, dict) else JSON
    extra = st.dictionaries(names.filter(lambda k: k not in properties), values, max_size=2)
    return st.builds(lambda f, m, e: {**e, **m, **f}, fixed, st.fixed_dictionaries(missing), extra)


# one strategy per schema: building it again for every example cost most of the run
@functools.cache
def _generated(relative: str) -> st.SearchStrategy[Any]:
    schema = inlined(load_schema(relative))
    assert schema is not None
    return _valid_for(schema).filter(validator(relative).is_valid)


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_paths(value, (*prefix, index)))
    return found


@st.composite
def _mutated(draw: st.DrawFn, relative: str) -> Any:
    document = copy.deepcopy(draw(_generated(relative)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(_paths(document)))
        kind = draw(st.sampled_from(["replace", "drop", "add", "duplicate"]))
        if not path:
            document = draw(JSON) if kind == "replace" else document
            continue
        parent = document
        for token in path[:-1]:
            parent = parent[token]
        last = path[-1]
        if kind == "replace":
            parent[last] = draw(JSON)
        elif kind == "drop":
            del parent[last]
        elif kind == "add" and isinstance(parent[last], dict):
            parent[last][draw(st.text(max_size=12))] = draw(JSON)
        elif kind == "duplicate" and isinstance(parent[last], list) and parent[last]:
            parent[last].append(copy.deepcopy(parent[last][0]))
    return document


def _agree(relative: str, document: Any) -> str:
    truth = validator(relative).is_valid(document)
    quick = compiled_accepts(relative, document)
    assert quick == truth, f"jsonschema {truth}, compiled validator {quick}: {document!r}"
    assert conforms(relative, document) is truth
    verdicts = ("refuses", "accepts")
    return f"jsonschema {verdicts[truth]}, compiled {verdicts[quick]}"


SETTINGS = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
        HealthCheck.data_too_large,
    ],
)


def test_every_compiled_schema_compiles() -> None:
    assert all(compiled(relative) is not None for relative in COMPILED_SCHEMAS)


@pytest.mark.parametrize("relative", COMPILED_SCHEMAS)
@SETTINGS
@given(data=st.data())
def test_generated_documents_judged_alike(relative: str, data: st.DataObject) -> None:
    event(_agree(relative, data.draw(_generated(relative))))


@pytest.mark.parametrize("relative", COMPILED_SCHEMAS)
@SETTINGS
@given(data=st.data())
def test_mutated_documents_judged_alike(relative: str, data: st.DataObject) -> None:
    document = data.draw(_mutated(relative))
    event(_agree(relative, document))
    errors = list(validator(relative).iter_errors(document))
    try:
        validate_wire(relative, document)
    except WireError as refusal:  # the field named is one jsonschema found at fault
        assert errors, f"refused a document jsonschema accepts: {refusal}"
        faulty = {
            "".join(f"/{escape_pointer_token(str(t))}" for t in e.absolute_path) for e in errors
        }
        assert refusal.pointer in faulty or any(refusal.pointer.startswith(p + "/") for p in faulty)
    else:
        assert not errors


ROW = {"model_id": "m", "memory_mb": 640, "state": "ready"}


@pytest.mark.parametrize(
    "row",
    [
        ROW,
        {**ROW, "model_id": "m\n"},  # Python's ``$`` matched here: the schemas use END
        {**ROW, "model_id": "m\nx"},
        {**ROW, "artifact_sha256": "a" * 64 + "\n"},
        {**ROW, "memory_mb": 640.0},  # an integral float is an integer
        {**ROW, "memory_mb": 640.5},
        {**ROW, "memory_mb": True},  # a boolean is not an integer
        {**ROW, "memory_mb": 2**80},
        {**ROW, "memory_mb": -(2**80)},
        {**ROW, "model_id": "\ud800"},  # a lone surrogate, as json.loads can produce
        {**ROW, "model_id": "é"},
        {**ROW, "pinned": 1},
        {**ROW, "loaded_age_seconds": -0.0},
        {**ROW, "state": "READY"},
        {"model_id": "m", "memory_mb": 1},
        [],
        None,
    ],
)
def test_edge_values_judged_alike(row: Any) -> None:
    _agree("defs/residency.schema.json", row)


@pytest.mark.parametrize(
    "capabilities",
    [["load", "load"], ["load", "warm"], ["load", "bogus"], [1, True]],
)
def test_unique_items_judged_alike(capabilities: list[Any]) -> None:
    document = {
        "node_id": "h",
        "allocator": {
            "schema_version": 1,
            "state": "accepting",
            "actuator_capabilities": capabilities,
        },
    }
    _agree("wire/heartbeat.schema.json", document)


@pytest.mark.parametrize("version", [1, 1.0, True, 2, "1"])
def test_const_judged_alike(version: Any) -> None:
    document = {"node_id": "h", "allocator": {"schema_version": version, "state": "accepting"}}
    _agree("wire/heartbeat.schema.json", document)


@pytest.mark.parametrize(
    "relative, document, field",
    [
        ("defs/residency.schema.json", ROW, "model_id"),
        ("wire/heartbeat.schema.json", {"node_id": "h"}, "node_id"),
        ("defs/residency.schema.json", {**ROW, "artifact_sha256": "a" * 64}, "artifact_sha256"),
    ],
)
def test_an_identifier_ending_in_a_newline_is_refused(
    relative: str, document: dict[str, Any], field: str
) -> None:
    assert validator(relative).is_valid(document)
    value = document[field]
    broken = {
        **document,
        field: [v + "\n" for v in value] if isinstance(value, list) else value + "\n",
    }
    assert not validator(relative).is_valid(broken)
    with pytest.raises(WireError) as refused:
        validate_wire(relative, broken)
    assert refused.value.pointer.startswith("/" + field)
