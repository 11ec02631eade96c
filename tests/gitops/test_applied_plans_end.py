"""An applied plan's approval covers exactly its actions and ends: when they have run, when
the mode or revision supersedes it, when it is cancelled; a plan with no action approves
nothing. Status (and so diff and the dashboard) stops mentioning it, and a restart shows the
true state. A saved plan stays valid while its actions hold: drift that changes no action is
a note, not a refusal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gridctl.cli.diff_cmd import drift_report
from tests.controller.simnodes import GEMMA_SHA
from tests.gitops.inprocess import Harness, controller, desired_dir

pytestmark = pytest.mark.anyio


def approval_rows(status: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in status["ownership"]["overrides"] if r["field"] == "actions"]


def drift_lines(status: dict[str, Any]) -> list[str]:
    return [line for line in drift_report(status)["drift"] if line.startswith("actions:")]


def events(status: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return [e for e in status["history"] if e["event"] == name]


async def applied_in_recommend(h: Harness, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    node = h.node("local-1", cached={"gemma": GEMMA_SHA})
    assert (await node.register()).status_code == 200
    await h.set_mode("recommend")
    plan = await h.saved_plan(desired_dir(tmp_path / "desired", gemma=1))
    assert plan["actions"], plan
    applied = await h.apply(plan)
    assert applied.status_code == 200, applied.text
    assert applied.json()["approved_action_ids"]
    return node, plan


async def test_an_applied_plan_ends_once_its_actions_have_run(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        node, plan = await applied_in_recommend(h, tmp_path)
        (row,) = approval_rows(await h.status())
        assert row["how"] == "gridctl apply --cancel"
        assert "undo with gridctl apply --cancel" in drift_lines(await h.status())[0]
        await h.converge([node], rounds=6)
        assert sorted(c["action_id"] for c in node.executed) == sorted(
            a["action_id"] for a in plan["actions"]
        )
        status = await h.status()
        assert approval_rows(status) == [] and drift_lines(status) == []
        (done,) = events(status, "applied_plan_done")
        assert "every approved action finished: 1 executed" in done["message"]
        assert h.service.controller.store.overrides().get("applied_plan") is None


async def test_clearing_the_mode_supersedes_an_applied_plan(tmp_path: Path) -> None:
    async with controller(tmp_path, ticking=False) as h:
        await applied_in_recommend(h, tmp_path)
        assert approval_rows(await h.status())
        cleared = await h.admin("PUT", "/allocator/mode", json={"clear": True})
        assert cleared.status_code == 200, cleared.text
        assert approval_rows(await h.status()) == []  # shown as it is before any tick
        h.service.controller.tick()
        status = await h.status()
        (done,) = events(status, "applied_plan_done")
        assert "superseded: the controller's mode is now automatic" in done["message"]
        assert h.service.controller.store.overrides().get("applied_plan") is None


async def test_cancel_withdraws_the_approval_and_nothing_of_it_runs(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        node, _ = await applied_in_recommend(h, tmp_path)
        cancelled = await h.apply({"cancel": True})
        assert cancelled.status_code == 200, cancelled.text
        body = cancelled.json()
        assert body["cancelled"] is True and "withdrew the plan" in body["message"]
        await h.converge([node], rounds=4)
        assert node.executed == []  # recommend mode again: proposals only
        status = await h.status()
        assert approval_rows(status) == [] and events(status, "applied_plan_cancelled")
        again = await h.apply({"cancel": True})
        assert again.json() == {"cancelled": False, "message": "no applied plan is in force"}


async def test_a_plan_with_no_action_approves_nothing(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        assert (await h.node("local-1").register()).status_code == 200
        await h.set_mode("recommend")
        plan = await h.saved_plan(desired_dir(tmp_path / "desired", gemma=0))
        assert plan["actions"] == [] and plan["deferred"] == []
        applied = await h.apply(plan)
        assert applied.status_code == 200, applied.text
        assert applied.json()["approved_action_ids"] == []
        status = await h.status()
        assert approval_rows(status) == [] and drift_lines(status) == []
        assert h.service.controller.store.overrides().get("applied_plan") is None


async def test_a_restart_shows_the_true_state(tmp_path: Path) -> None:
    async with controller(tmp_path, ticking=False) as h:
        await applied_in_recommend(h, tmp_path)
    async with controller(tmp_path, ticking=False) as h:  # same state directory
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        assert len(approval_rows(await h.status())) == 1  # its action has not run yet
        h.service.start_ticking()
        await h.converge([node], rounds=6)
        assert node.executed
        assert approval_rows(await h.status()) == []


async def test_drift_that_changes_no_action_is_a_note(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        assert (await h.node("local-1", cached={"gemma": GEMMA_SHA}).register()).status_code == 200
        await h.set_mode("recommend")
        plan = await h.saved_plan(desired_dir(tmp_path / "desired", gemma=1))
        small = h.node("tiny-1", capacity_mb=256, failure_domain="zone-b")  # cannot hold gemma
        assert (await small.register()).status_code == 200
        applied = await h.apply(plan)
        assert applied.status_code == 200, applied.text
        body = applied.json()
        assert body["inputs_digest"] == plan["inputs"]["digest"]  # the plan's, as it printed
        assert body["current_inputs_digest"] != plan["inputs"]["digest"]
        assert any(n.startswith("hosts") and "no action changed" in n for n in body["notes"])
