"""Saved plans against an in-process controller: apply, stale refusal, watched directories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.cli.main import main
from tests.controller.simnodes import GEMMA_SHA
from tests.gitops.inprocess import controller, desired_dir

pytestmark = pytest.mark.anyio


async def test_applied_plan_becomes_the_target_and_converges(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        directory = desired_dir(tmp_path / "desired", gemma=1)
        plan = await h.saved_plan(directory)
        assert plan["changes"] is True
        assert [(a["kind"], a["host_id"], a["executable"]) for a in plan["actions"]] == [
            ("warm", "local-1", True)
        ]
        twin = await h.saved_plan(directory)  # made from the same inputs
        assert twin["inputs"]["digest"] == plan["inputs"]["digest"]

        applied = await h.apply(plan)
        assert applied.status_code == 200, applied.text
        body = applied.json()
        assert body["revision"] == plan["desired"]["revision"]
        assert body["effective_mode"] == "automatic"
        assert body["pending_action_ids"] == [plan["actions"][0]["action_id"]]
        assert body["planned_but_absent"] == [] and body["not_in_plan"] == []
        status = await h.status()
        assert status["desired"]["revision"] == plan["desired"]["revision"]
        assert any(e["event"] == "plan_applied" for e in status["history"])

        await h.converge([node])
        assert (await h.model("gemma"))["health"] == "Healthy"

        stale = await h.apply(twin)
        assert stale.status_code == 409
        error = stale.json()["error"]
        assert error["message"].startswith(
            "stale plan: the controller would now act differently after residencies, history"
        )
        assert "plan again" in error["message"].splitlines()[0]
        assert error["actions"]["removed"] == ["warm gemma on local-1 (executable)"]
        assert "\n  - warm gemma on local-1 (executable)\n" in error["message"]
        moved = {row["input"]: row for row in error["moved"]}
        assert moved["residencies"]["added"] == [
            f"local-1/gemma ready managed {GEMMA_SHA[:12]} llama.cpp 640 MB"
        ]
        assert [line.split()[0] for line in moved["revision"]["added"]] == ["previous"]
        assert "moved residencies: +local-1/gemma ready" in error["message"]

        again = await h.saved_plan(directory)
        assert again["changes"] is False and again["actions"] == []


async def test_recommend_mode_proposes_and_an_applied_plan_runs_exactly_its_ids(
    tmp_path: Path,
) -> None:
    async with controller(tmp_path) as h:
        node = h.node("local-1", cached={"gemma": GEMMA_SHA})
        assert (await node.register()).status_code == 200
        await h.set_mode("recommend")
        two = desired_dir(tmp_path / "desired", gemma=1, other=1)
        await h.converge([node], rounds=2)
        assert node.executed == []  # recommend: proposals only
        plan = await h.saved_plan(two)
        assert {a["model_id"] for a in plan["actions"]} == {"gemma", "other"}
        # review: only gemma's work is approved, the rest of the plan is cut away
        reviewed = dict(plan, actions=[a for a in plan["actions"] if a["model_id"] == "gemma"])
        reviewed["deferred"] = []
        refused = await h.apply(reviewed)
        assert refused.status_code == 409  # a plan must be applied whole, as it was made
        assert "act differently" in refused.json()["error"]["message"]

        applied = await h.apply(plan)
        assert applied.status_code == 200, applied.text
        body = applied.json()
        ids = sorted(a["action_id"] for a in plan["actions"])
        assert body["mode"] == "recommend" and body["approved_action_ids"] == ids
        assert body["issued_not_in_plan"] == []
        await h.converge([node], rounds=6)
        issued = [e["action_id"] for e in (await h.status())["history"] if e["event"] == "issued"]
        assert sorted(set(issued)) == ids
        assert sorted(c["action_id"] for c in node.executed) == ids
        assert (await h.model("gemma"))["health"] == "Healthy"

        # a new proposal after the plan finished is proposed, never executed
        three = desired_dir(tmp_path / "desired", gemma=2, other=1)
        await h.apply_files(three)
        await h.converge([node], rounds=3)
        assert sorted(c["action_id"] for c in node.executed) == ids


async def test_a_host_joining_that_changes_no_action_is_a_note(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        assert (await h.node("local-1").register()).status_code == 200
        plan = await h.saved_plan(desired_dir(tmp_path / "desired", gemma=1))
        assert (await h.node("local-2", failure_domain="zone-b").register()).status_code == 200
        applied = await h.apply(plan)
        assert applied.status_code == 200, applied.text
        assert applied.json()["notes"] == ["hosts moved since the plan was made; no action changed"]


async def test_watched_controller_refuses_a_plan_its_revision_would_not_take(
    tmp_path: Path,
) -> None:
    watch = desired_dir(tmp_path / "watched", gemma=1)
    async with controller(tmp_path, watch=watch) as h:
        for host, domain in (("local-1", "zone-a"), ("local-2", "zone-b")):
            node = h.node(host, failure_domain=domain, cached={"gemma": GEMMA_SHA})
            assert (await node.register()).status_code == 200
        other = desired_dir(tmp_path / "other", gemma=2)
        plan = await h.saved_plan(other)
        refused = await h.apply(plan)
        assert refused.status_code == 409
        message = refused.json()["error"]["message"]
        first = message.splitlines()[0]
        assert first.startswith("stale plan: revision ")
        assert "is in force (the plan was made" in first
        assert "plan again" in first
        assert any(line.startswith("  - warm gemma on local-") for line in message.splitlines())
        same = await h.saved_plan(watch)
        assert (await h.apply(same)).status_code == 200


async def test_bad_and_offline_plans_are_refused(tmp_path: Path) -> None:
    async with controller(tmp_path) as h:
        assert (await h.apply({"format": "nope"})).status_code == 400
        plan = await h.saved_plan(desired_dir(tmp_path / "desired", gemma=1))
        offline = dict(plan, inputs=None)
        refused = await h.apply(offline)
        assert refused.status_code == 409
        assert "snapshot file" in refused.json()["error"]["message"]
        broken = json.loads(json.dumps(plan))
        broken["desired"]["files"] = {"../escape.yaml": "x: 1"}
        assert (await h.apply(broken)).status_code == 400
        no_token = await h.client.post("/allocator/apply", json=plan)
        assert no_token.status_code == 401


def test_plan_json_actions_and_out_from_a_snapshot_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory = desired_dir(tmp_path / "desired", gemma=1)
    snapshot = {
        "schema_version": 1,
        "now": 1000.0,
        "hosts": [
            {
                "host_id": "h1",
                "last_heartbeat": 999.0,
                "resources": {"capacity_mb": 4096, "runtimes": ["llama.cpp"]},
                "allocator": {
                    "schema_version": 1,
                    "state": "accepting",
                    "residencies": [],
                    "cached_models": [{"model_id": "gemma", "artifact_sha256": GEMMA_SHA}],
                },
            }
        ],
        "pending_actions": [],
        "history": [],
    }
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snapshot))
    out = tmp_path / "plan.json"
    args = ["plan", str(directory), "--against", str(path), "--json", "--out", str(out)]
    assert main([*args, "--detailed-exitcode"]) == 2
    doc = json.loads(capsys.readouterr().out)
    (action,) = doc["actions"]
    assert set(action) >= {
        "action_id",
        "kind",
        "host_id",
        "model_id",
        "depends_on",
        "executable",
        "blocked",
        "reason",
    }
    assert (action["kind"], action["host_id"], action["executable"]) == ("warm", "h1", True)
    saved = json.loads(out.read_text())
    assert saved["format"] == "gridctl.plan/v1" and saved["inputs"] is None
    assert sorted(saved["desired"]["files"]) == ["gemma.yaml", "policy.yaml"]

    # with the warm already pending, a dry run proposes the same action (stable id), not a twin
    snapshot["pending_actions"] = [dict(action, delivered=True)]
    path.write_text(json.dumps(snapshot))
    assert main(["plan", str(directory), "--against", str(path), "--json"]) == 0
    assert [a["action_id"] for a in json.loads(capsys.readouterr().out)["actions"]] == [
        action["action_id"]
    ]

    # converged: the replica is ready, nothing pending
    snapshot["pending_actions"] = []
    host = snapshot["hosts"][0]
    host["allocator"]["residencies"] = [  # type: ignore[index]
        {"model_id": "gemma", "memory_mb": 640, "state": "ready", "artifact_sha256": GEMMA_SHA}
    ]
    path.write_text(json.dumps(snapshot))
    assert main(["plan", str(directory), "--against", str(path), "--detailed-exitcode"]) == 0
    assert "0 to place, 0 to destroy, 0 to replace, 0 held, 0 unsatisfied" in (
        capsys.readouterr().out
    )
