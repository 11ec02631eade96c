"""The saved status documents: valid against the schema, and in step with their builders."""

from __future__ import annotations

import json

import pytest

from gridctl.config.schemas import validator
from tests.tui.situations import SITUATIONS, fixture_path, render_fixture


@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_fixture_validates_against_the_status_schema(name: str) -> None:
    document = json.loads(fixture_path(name).read_text(encoding="utf-8"))
    errors = [e.message for e in validator("wire/status.schema.json").iter_errors(document)]
    assert errors == []


@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_saved_fixture_matches_its_builder(name: str) -> None:
    # Run `python -m tests.tui.situations` after changing a situation.
    assert fixture_path(name).read_text(encoding="utf-8") == render_fixture(name)


def test_degraded_fleet_has_every_troubled_host_state() -> None:
    states = {host["state"] for host in SITUATIONS["degraded_fleet"]()["hosts"]}
    assert {"paused", "quarantined", "unhealthy", "draining", "throttled"} <= states


def test_admission_fleet_has_a_row_in_each_of_the_nine_states() -> None:
    rows = SITUATIONS["admission_fleet"]()["admission"]
    admission = validator("wire/status.schema.json").schema["properties"]["admission"]
    states = admission["items"]["properties"]["state"]["enum"]
    assert {row["state"] for row in rows} == set(states)
