"""Every tunable in the ControllerPolicy and NodePolicy schemas is read by the code it names.

A registry of readers built from the source: for each field of the schema's
``spec``, the places in ``gridctl`` (outside ``gridctl/config``, which only
parses and validates) that read it by name as an attribute — ``policy.field``.
Reads by a dynamic name (``getattr(policy, name)`` in serialisers and digests)
do not count, nor does reading a default instance (``ControllerPolicy().field``):
neither lets an operator's value change a decision. A field with no reader
fails the test, and a made-up field is shown to fail it.
"""

from __future__ import annotations

import ast
import json
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "gridctl"
DEFAULT_INSTANCES = {"ControllerPolicy", "ProtectionPolicy"}
# schema fields that are identity or selection, not tunables
NOT_TUNABLES = {"name"}


def schema_fields(schema: str) -> list[str]:
    document = json.loads((ROOT / "schemas" / schema).read_text(encoding="utf-8"))
    return sorted(set(document["properties"]["spec"]["properties"]) - NOT_TUNABLES)


def _default_instance(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in DEFAULT_INSTANCES
    )


@cache
def readers() -> dict[str, tuple[str, ...]]:
    """Attribute name -> the ``file:line`` places that read it (sorted)."""
    found: dict[str, list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[1] == "config":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), str(relative))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Load)
                and not _default_instance(node.value)
            ):
                found.setdefault(node.attr, []).append(f"{relative}:{node.lineno}")
    return {name: tuple(sorted(places)) for name, places in found.items()}


def unread(fields: list[str]) -> list[str]:
    index = readers()
    return [f for f in fields if not index.get(f)]


@pytest.mark.parametrize("schema", ["controller-policy.schema.json", "node-policy.schema.json"])
def test_every_schema_tunable_has_a_reader(schema: str) -> None:
    fields = schema_fields(schema)
    assert len(fields) > 10
    assert unread(fields) == [], f"{schema}: tunables no code reads"


def test_a_field_no_code_reads_fails_the_check() -> None:
    assert unread(["prefetch_max_victims", "a_tunable_nothing_reads"]) == [
        "a_tunable_nothing_reads"
    ]


def test_reading_only_a_default_instance_is_not_a_reader() -> None:
    source = "limit = ControllerPolicy().trace_max_bytes\nother = policy.mode\n"
    tree = ast.parse(source)
    names = [
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and not _default_instance(n.value)
    ]
    assert names == ["mode"]
