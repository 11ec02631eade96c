"""Each of Argo's six health words, reached on an in-process controller with simulated nodes.

``gridctl diff`` reads the same status rows; its exit code is 0 only in sync.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pytest
import yaml

from gridctl.cli import diff_cmd
from gridctl.cli.status_cmd import render_status
from tests.controller.simnodes import GEMMA_SHA
from tests.gitops.inprocess import Harness, controller, profile_yaml

pytestmark = pytest.mark.anyio


async def put_profile(h: Harness, name: str, min_replicas: int = 1, memory_mb: int = 640) -> None:
    document = yaml.safe_load(profile_yaml(name, min_replicas, memory_mb))
    response = await h.admin("PUT", f"/allocator/models/{name}", json=document)
    assert response.status_code == 200, response.text


def diff_exit(doc: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> int:
    """``gridctl diff``'s exit code for this status document (client stubbed)."""

    class Stub:
        def __init__(self, *_a: Any, **_k: Any) -> None: ...
        def __enter__(self) -> Stub:
            return self

        def __exit__(self, *_e: object) -> None: ...
        def status(self) -> dict[str, Any]:
            return doc

    monkeypatch.setattr(diff_cmd, "ControllerClient", Stub)
    return diff_cmd.run(argparse.Namespace(controller=None, token_file=None, json=False))


async def test_unknown_before_the_first_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with controller(tmp_path, ticking=False) as h:
        await put_profile(h, "gemma")
        row = await h.model("gemma")
        assert (row["health"], row["reason"]) == ("Unknown", "no plan yet")
        assert diff_exit(await h.status(), monkeypatch) == 0  # nothing known to differ yet


async def test_missing_with_no_replica_anywhere(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        await h.set_mode("automatic")
        await put_profile(h, "gemma")
        await h.admin("POST", "/allocator/tick")
        row = await h.model("gemma")
        assert (row["health"], row["sync"]) == ("Missing", "OutOfSync")
        assert row["reason"] == "no replica anywhere"


async def test_suspended_progressing_then_healthy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with controller(tmp_path) as h:
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        await h.set_mode("observe")
        await put_profile(h, "gemma")
        await h.admin("POST", "/allocator/tick")
        row = await h.model("gemma")
        assert (row["health"], row["sync"]) == ("Suspended", "OutOfSync")
        assert "observe" in row["reason"]
        doc = await h.status()
        assert diff_exit(doc, monkeypatch) == 1
        out = capsys.readouterr().out
        assert "gemma: OutOfSync, Suspended" in out
        assert "operator override observe (git declares recommend)" in out
        assert "Suspended" in render_status(doc)

        await h.set_mode("automatic")  # the mode route ticks: the warm is now pending
        row = await h.model("gemma")
        assert (row["health"], row["reason"]) == ("Progressing", "lifecycle actions in progress")

        await h.converge([node])
        row = await h.model("gemma")
        assert (row["health"], row["sync"], row["ready"]) == ("Healthy", "Synced", 1)
        await h.admin("PUT", "/allocator/mode", json={"clear": True})
        await h.set_mode("automatic")
        doc = await h.status()
        # an override equal to git's mode would not be drift; automatic differs from
        # the API controller's default (recommend), so it is
        assert diff_exit(doc, monkeypatch) == 1
        assert "mode: operator override automatic" in capsys.readouterr().out


async def test_degraded_when_only_some_replicas_can_run(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        await h.set_mode("automatic")
        await put_profile(h, "gemma", min_replicas=2)
        await h.converge([node])
        row = await h.model("gemma")
        assert (row["health"], row["sync"]) == ("Degraded", "OutOfSync")
        assert row["ready"] == 1 and row["desired"] == 2
        assert row["unmet"], row


async def test_diff_is_zero_in_sync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    watch = tmp_path / "desired"
    watch.mkdir()
    (watch / "gemma.yaml").write_text(profile_yaml("gemma"))
    (watch / "policy.yaml").write_text(
        "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
        "spec:\n  mode: automatic\n"
    )
    async with controller(tmp_path, watch=watch) as h:
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        await h.converge([node])
        doc = await h.status()
        assert diff_exit(doc, monkeypatch) == 0
        report = diff_cmd.drift_report(doc)
        assert (
            report["in_sync"] and report["revisions"]["desired"] == report["revisions"]["last_good"]
        )
        assert [(m["sync"], m["health"]) for m in report["models"]] == [("Synced", "Healthy")]
