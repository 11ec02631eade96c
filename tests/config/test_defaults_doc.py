"""docs/defaults.md, the schemas and the domain dataclasses agree on every default."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

from gridctl.config.schemas import defaults_of
from gridctl.domain import ControllerPolicy, HostResources, ModelProfile

DOC = Path(__file__).resolve().parents[2] / "docs" / "defaults.md"
ROW = re.compile(r"^\| `(?P<field>[a-z0-9_]+)` \| `(?P<default>[^`]*)` \|")


def doc_tables() -> dict[str, dict[str, object]]:
    tables: dict[str, dict[str, object]] = {}
    current = ""
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            tables[current] = {}
        match = ROW.match(line)
        if match:
            tables[current][match["field"]] = json.loads(match["default"])
    return tables


def test_policy_table_matches_schema() -> None:
    schema = defaults_of("controller-policy.schema.json", "/properties/spec")
    assert doc_tables()["ControllerPolicy"] == schema
    assert len(schema) >= 60


def test_profile_table_matches_schema() -> None:
    schema = defaults_of("model-profile.schema.json", "/properties/spec")
    assert doc_tables()["ModelProfile"] == schema


def test_host_table_matches_schema() -> None:
    assert doc_tables()["Host resources"] == defaults_of("defs/host-resources.schema.json", "")


def _dataclass_defaults(cls: type) -> dict[str, object]:
    result: dict[str, object] = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING:
            result[field.name] = field.default
        elif field.default_factory is not dataclasses.MISSING:
            result[field.name] = field.default_factory()
    return result


def _jsonable(value: object) -> object:
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {k: v for k, v in dataclasses.asdict(value).items() if v is not None}
    if hasattr(value, "value"):
        return value.value
    return value


def test_policy_dataclass_defaults_match_schema() -> None:
    schema = defaults_of("controller-policy.schema.json", "/properties/spec")
    code = {k: _jsonable(v) for k, v in _dataclass_defaults(ControllerPolicy).items()}
    code.pop("name")
    assert code == schema


def test_profile_dataclass_defaults_match_schema() -> None:
    schema = defaults_of("model-profile.schema.json", "/properties/spec")
    code = {k: _jsonable(v) for k, v in _dataclass_defaults(ModelProfile).items()}
    assert code == schema


def test_host_dataclass_defaults_match_schema() -> None:
    schema = defaults_of("defs/host-resources.schema.json", "")
    code = {k: _jsonable(v) for k, v in _dataclass_defaults(HostResources).items()}
    assert code == schema
