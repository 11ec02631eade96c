"""``fill_defaults`` from its cached plan fills exactly what walking the schema fills.

The reference below is the walk itself: at every level it resolves ``$ref``s and lists
the ``allOf`` members' properties again. Documents are the shipped YAML (every kind)
and the wire examples, with keys dropped and values replaced by arbitrary JSON, so
defaults apply at every depth and instances meet places of the wrong shape.
"""

from __future__ import annotations

import copy
import datetime
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.config.schemas import (
    KIND_SCHEMAS,
    fill_defaults,
    load_schema,
    object_properties,
    resolve,
)
from tests.config.test_schema_inlining import DOCUMENTS, paths

ROOT = Path(__file__).resolve().parents[2]


def walked(instance: Any, schema: dict[str, Any], base_uri: str) -> None:
    schema, base_uri = resolve(schema, base_uri)
    if isinstance(instance, dict):
        for name, sub, sub_base in object_properties(schema, base_uri):
            resolved, resolved_base = resolve(sub, sub_base)
            if name not in instance:
                if "default" in sub:
                    instance[name] = copy.deepcopy(sub["default"])
                elif "default" in resolved:
                    instance[name] = copy.deepcopy(resolved["default"])
                else:
                    continue
            walked(instance[name], resolved, resolved_base)
    elif isinstance(instance, list) and isinstance(schema.get("items"), dict):
        for item in instance:
            walked(item, schema["items"], base_uri)


def reference(instance: Any, relative: str) -> Any:
    result = copy.deepcopy(instance)
    schema = load_schema(relative)
    walked(result, schema, schema["$id"])
    return result


def shipped() -> list[tuple[str, Any]]:
    found: list[tuple[str, Any]] = []
    for folder in ("examples", "fleet", "policies"):
        for path in sorted((ROOT / folder).rglob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
                if isinstance(doc, dict) and doc.get("kind") in KIND_SCHEMAS:
                    found.append((KIND_SCHEMAS[doc["kind"]], doc))
    found.extend(sorted(DOCUMENTS.items()))
    found.append(("defs/host-resources.schema.json", {"capacity_mb": 1}))
    node_policy = {"debounce_samples": 2, "cpu_throttle_above_percent": 90}
    found.append(
        (
            KIND_SCHEMAS["NodePolicy"],
            {
                "apiVersion": "gridctl/v1",
                "kind": "NodePolicy",
                "metadata": {"name": "laptop"},
                "spec": node_policy,
            },
        )
    )
    return found


CASES = shipped()
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=4,
)


def test_every_kind_is_among_the_documents() -> None:
    assert {relative for relative, _ in CASES} >= set(KIND_SCHEMAS.values())


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_plan_fills_what_the_walk_fills(data: st.DataObject) -> None:
    relative, document = data.draw(st.sampled_from(CASES))
    document = copy.deepcopy(document)
    for _ in range(data.draw(st.integers(min_value=0, max_value=6))):
        where = list(paths(document))
        if not where:
            break
        path = data.draw(st.sampled_from(where))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        if data.draw(st.booleans()):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(JSON)
    expected = reference(document, relative)
    assert fill_defaults(document, relative) == expected
    assert fill_defaults(document, relative) == expected  # the kept plan, used again


def _containers(value: Any) -> list[int]:
    """The ids of every mapping and list inside ``value``."""
    if isinstance(value, dict):
        return [id(value), *(i for item in value.values() for i in _containers(item))]
    if isinstance(value, list):
        return [id(value), *(i for item in value for i in _containers(item))]
    return []


@settings(max_examples=200, deadline=None)
@given(instance=JSON)
def test_the_filled_copy_shares_no_container_with_the_document(instance: Any) -> None:
    before = copy.deepcopy(instance)
    filled = fill_defaults(instance, "defs/host-resources.schema.json")
    assert not set(_containers(filled)) & set(_containers(instance))
    assert instance == before  # filling never writes into the caller's document


def test_values_outside_json_are_copied_as_deepcopy_copies_them() -> None:
    when = datetime.datetime(2026, 1, 2, 3, 4, 5)
    tags = {"a", "b"}
    document = {"capacity_mb": 1, "seen": when, "tags": tags}
    filled = fill_defaults(document, "defs/host-resources.schema.json")
    assert filled["seen"] == when and filled["tags"] == tags
    assert filled["tags"] is not tags  # a mutable value that is not JSON is still copied
