"""Field ownership in the status document, and every operator override of git as drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridctl.cli.diff_cmd import drift_report
from gridctl.config.schemas import validator
from tests.controller.simnodes import GEMMA_SHA
from tests.gitops.inprocess import controller, desired_dir

pytestmark = pytest.mark.anyio


async def test_overrides_of_git_are_listed_and_shown_as_drift(tmp_path: Path) -> None:
    watch = desired_dir(tmp_path / "watched", gemma=1)
    async with controller(tmp_path, watch=watch) as h:
        paused = h.node("local-2", state="paused", failure_domain="zone-b")
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        assert (await paused.register()).status_code == 200
        await h.converge([node, paused], rounds=3)
        status = await h.status()
        assert list(validator("wire/status.schema.json").iter_errors(status)) == []
        owners = status["ownership"]["owners"]
        assert set(owners) == {"git", "controller", "operator"}
        assert any("placement" in line for line in owners["controller"])
        (host,) = status["ownership"]["overrides"]
        assert host == {
            "field": "hosts/local-2/state",
            "owner": "node-local override",
            "git": "accepting",
            "value": "paused",
            "how": "gridctl node resume on local-2",
        }

        await h.set_mode("observe")
        report = drift_report(await h.status())
        assert not report["in_sync"]
        assert any(line.startswith("mode: operator override observe") for line in report["drift"])
        assert (
            "hosts/local-2/state: node-local override paused (git declares accepting); undo "
            "with gridctl node resume on local-2"
        ) in report["drift"]
