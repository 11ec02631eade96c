"""The saved status documents come from the real in-process controller and show their situation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gridctl.config.schemas import validator
from tests.tui.controller_situations import SCENARIOS, controller_document
from tests.tui.situations import fixture_path

pytestmark = pytest.mark.anyio


def schema_errors(document: dict[str, Any]) -> list[str]:
    return [e.message for e in validator("wire/status.schema.json").iter_errors(document)]


def check_situation(name: str, document: dict[str, Any]) -> None:
    states = {host["state"] for host in document["hosts"]}
    if name == "degraded_fleet":
        assert {"paused", "quarantined", "unhealthy"} <= states
        assert document["withdrawn_destructive"]
        assert document["unmet_constraints"]
    elif name == "empty_fleet":
        assert document["hosts"] == [] and document["admission"] == []
    elif name == "workload_fleet":  # rows the controller produced from real unbound requests
        rows = {row["workload"]: row for row in document["admission"]}
        assert rows["coding"]["state"] == "ready" and rows["coding"]["model_id"] == "gemma-coder"
        assert rows["research"]["state"] == "infeasible" and rows["research"]["reason"]
        assert states == {"accepting"}
    else:
        admission = validator("wire/status.schema.json").schema["properties"]["admission"]
        every_state = set(admission["items"]["properties"]["state"]["enum"])
        assert {row["state"] for row in document["admission"]} == every_state
        assert states == {"accepting"}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_saved_fixture_is_valid_and_shows_its_situation(name: str) -> None:
    document = json.loads(fixture_path(name).read_text(encoding="utf-8"))
    assert schema_errors(document) == []
    check_situation(name, document)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_the_controller_still_produces_the_situation(name: str) -> None:
    # Regenerate the saved files with `python -m tests.tui.controller_situations`.
    document = await controller_document(name)
    assert schema_errors(document) == []
    check_situation(name, document)
