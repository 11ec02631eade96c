"""The schema files of ``schemas/`` and the ``$ref``s between them, read without a library.

Every ``$ref`` the shipped schemas hold is a relative file path, a JSON pointer
fragment, or both (no ``$id`` inside a file, no anchors, no dynamic references), so
following one is joining it to the referring file's URI and walking the pointer:
``lookup`` does that from the files read once (``raw``). Inlining a schema for the
compiled validator and filling defaults need nothing more, so a process whose
documents the compiled validator accepts never imports ``referencing`` (with
``attrs`` and ``rpds``, 25-40 ms of a fresh process). ``registry`` builds the
``referencing`` registry that ``jsonschema`` needs, when a document has to be
judged by it; ``tests/config/test_schema_lookup.py`` checks that ``lookup`` finds
what that registry finds for every ``$ref`` of every schema.
"""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin

if TYPE_CHECKING:
    from referencing import Registry, Resource


def schema_dir() -> Path:
    """Where the schemas live: ``$GRIDCTL_SCHEMAS`` or ``schemas/`` beside the package."""
    override = os.environ.get("GRIDCTL_SCHEMAS")
    if override:
        return Path(override).resolve()
    return (Path(__file__).resolve().parent.parent.parent / "schemas").resolve()


def file_uri(path: Path) -> str:
    return path.resolve().as_uri()


class SchemaNotFound(LookupError):
    """A ``$ref`` naming a file outside the schema directory or a place not in it."""


@cache
def raw(uri: str) -> dict[str, Any]:
    """The parsed schema file at ``uri`` (a ``file://`` URI inside ``schema_dir()``)."""
    base = schema_dir()
    path = Path(uri.removeprefix("file://"))
    if base not in path.parents:
        raise SchemaNotFound(uri)
    with path.open(encoding="utf-8") as handle:
        data: dict[str, Any] = json.load(handle)
    return data


def lookup(ref: str, base_uri: str) -> tuple[Any, str]:
    """The schema ``ref`` names from the file at ``base_uri``, and that schema's file URI
    (the base its own ``$ref``s are read against)."""
    target = urljoin(base_uri, ref)
    uri, _, fragment = target.partition("#")
    node: Any = raw(uri)
    if fragment:
        if not fragment.startswith("/"):
            raise SchemaNotFound(f"{target}: only JSON pointer fragments are followed")
        for token in unquote(fragment).split("/")[1:]:
            key = token.replace("~1", "/").replace("~0", "~")
            try:
                node = node[int(key)] if isinstance(node, list) else node[key]
            except (KeyError, IndexError, ValueError, TypeError) as exc:
                raise SchemaNotFound(target) from exc
    return node, uri


def _retrieve(uri: str) -> Resource[Any]:
    from referencing import Resource
    from referencing.exceptions import NoSuchResource
    from referencing.jsonschema import DRAFT202012

    try:
        contents = raw(uri.split("#", 1)[0])
    except SchemaNotFound as exc:
        raise NoSuchResource(ref=uri) from exc  # type: ignore[call-arg]
    return Resource.from_contents(contents, default_specification=DRAFT202012)


@cache
def registry() -> Registry[Any]:
    """Every schema file registered and crawled once, for ``jsonschema``: a validation
    then resolves each ``$ref`` from memory instead of retrieving and re-indexing the
    referenced file (an unregistered URI still falls back to ``_retrieve``)."""
    from referencing import Registry

    base = schema_dir()
    resources = [
        (file_uri(path), _retrieve(file_uri(path)))
        for path in sorted(base.rglob("*.schema.json"))
        if path.is_file()
    ]
    empty: Registry[Any] = Registry(retrieve=_retrieve)  # type: ignore[call-arg]
    return empty.with_resources(resources).crawl()
