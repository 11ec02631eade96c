"""``schema_files.lookup`` finds what ``referencing`` finds, for every ``$ref`` shipped.

The inliner and the defaults follow ``$ref``s with ``lookup`` (no ``referencing``
import on the happy path); ``jsonschema`` follows them with the ``referencing``
registry. Both must land on the same schema and the same base for every reference
of every schema file, and ``lookup`` refuses what it does not follow.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridctl.config.schema_files import (
    SchemaNotFound,
    file_uri,
    lookup,
    raw,
    registry,
    schema_dir,
)

ROOT = Path(__file__).resolve().parents[2]


def references(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in node.values():
            yield from references(value)
    elif isinstance(node, list):
        for value in node:
            yield from references(value)


def every_reference() -> list[tuple[str, str]]:
    found = []
    for path in sorted(schema_dir().rglob("*.schema.json")):
        uri = file_uri(path)
        found.extend((uri, ref) for ref in sorted(set(references(raw(uri)))))
    return found


def test_the_schemas_hold_references() -> None:
    refs = every_reference()
    assert len(refs) > 20
    assert any("#" not in ref for _, ref in refs)
    assert any(ref.startswith("#") for _, ref in refs)
    assert any(ref.startswith("../") for _, ref in refs)


@pytest.mark.parametrize(
    "base_uri, ref", every_reference(), ids=lambda v: v.rsplit("/", 1)[-1][:60]
)
def test_lookup_finds_what_referencing_finds(base_uri: str, ref: str) -> None:
    resolved = registry().resolver(base_uri=base_uri).lookup(ref)
    contents, uri = lookup(ref, base_uri)
    assert contents == resolved.contents
    assert uri == resolved.resolver._base_uri


@pytest.mark.parametrize(
    "ref",
    [
        "../../outside.schema.json",
        "defs/identifiers.schema.json#/$defs/no-such-definition",
        "defs/identifiers.schema.json#an-anchor",
    ],
)
def test_lookup_refuses_what_it_cannot_follow(ref: str) -> None:
    base = file_uri(schema_dir() / "model-profile.schema.json")
    with pytest.raises(SchemaNotFound):
        lookup(ref, base)


def test_loading_valid_documents_imports_no_schema_library() -> None:
    """A directory the compiled validator accepts loads without importing ``jsonschema``
    or ``referencing`` (a fresh interpreter, so nothing else imported them first)."""
    script = (
        "import sys\n"
        "from gridctl.config import load_directory\n"
        f"state = load_directory({str(ROOT / 'policies')!r})\n"
        "assert state.profiles\n"
        "print(sorted(m for m in ('jsonschema', 'referencing') if m in sys.modules))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True
    )
    assert result.stdout.strip() == "[]", result.stderr
