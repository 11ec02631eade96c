"""GitOps that tells the truth, on real processes: controller, node daemons, llama-server.

* commits, not edits: an uncommitted removal changes nothing and is shown as a dirty
  working tree; its dry run prints the destroy and exits 2; committing it drains and
  unloads; an amend that only rewrites ``.git`` is picked up;
* a remote bare repository with ``--repo`` and ``--verify-commits``: an unsigned push is
  rejected with the reason in status and the signed revision stays; a signed push
  converges;
* recommend mode: an applied plan executes exactly its action ids, and its twin, made
  before the heartbeats that moved the fleet, is refused as stale;
* a priority preemption of a lower-priority model's only replica converges: the
  high-priority model becomes ready and the victim's shortfall is reported.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from gridctl.fleetrun import partition_capacity
from tests.e2e.harness import (
    GEMMA,
    DesiredRepo,
    Fleet,
    make_api_fleet,
    make_fleet,
    profile_yaml,
    wait_for,
)
from tests.gitops.test_rollout_e2e import gridctl, heartbeats_after, quiet_inputs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def desired(fleet: Fleet) -> dict[str, Any]:
    found: dict[str, Any] = fleet.status()["desired"]
    return found


def started(fleet: Fleet, hosts: int) -> None:
    try:
        wait_for(
            f"{hosts} host(s) registered",
            lambda: len(fleet.status()["hosts"]) == hosts,
            deadline=90,
        )
    except AssertionError:
        print(fleet.log())
        raise


def test_commits_are_the_desired_state_and_the_dry_run_shows_the_destroy(
    tmp_path: Path,
) -> None:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    baseline = fleet.repo.commit("gemma baseline")
    fleet.start(machines=1)
    try:
        started(fleet, 1)
        wait_for("one routable replica", lambda: fleet.routable(GEMMA) == ["local-1"], 240)

        # 1. an uncommitted removal: shown dirty, applies nothing
        fleet.repo.remove("gemma.yaml")
        wait_for(
            "the dirty working tree in status",
            lambda: (desired(fleet).get("working_tree") or {}).get("dirty"),
            deadline=60,
        )
        source = desired(fleet)
        assert source["source"] == "git" and source["revision"] == baseline
        assert source["working_tree"]["paths"] == ["gemma.yaml"]
        shown = gridctl(fleet, "status")
        assert "dirty working tree, not applied: gemma.yaml" in shown.stdout
        heartbeats_after(fleet, fleet.status()["now"])
        assert fleet.routable(GEMMA) == ["local-1"]

        # 2. its dry run on the controller: the destroy, exit 2, nothing persisted
        dry = gridctl(
            fleet,
            "plan",
            str(fleet.repo.path),
            "--against",
            fleet.url,
            "--detailed-exitcode",
        )
        assert dry.returncode == 2
        assert f"  - {GEMMA} on local-1: drain" in dry.stdout
        assert "profile removed" in dry.stdout
        status = fleet.status()
        assert status["desired"]["revision"] == baseline and status["pending_commands"] == []
        assert status["tombstones"] == []

        # 3. committed: drained and unloaded
        removal = fleet.repo.commit("retire gemma")
        wait_for("the removal in force", lambda: desired(fleet)["revision"] == removal, 60)
        wait_for(
            "every copy drained and unloaded",
            lambda: fleet.live_copies(GEMMA) == [] and fleet.engine_children() == [],
            deadline=180,
        )
        events = [e["event"] for e in fleet.status()["history"]]
        assert "profile_retired" in events

        # 4. an amend only rewrites .git: picked up from the ref event
        fleet.repo.git("commit", "-q", "--amend", "--allow-empty", "-m", "retire gemma (reworded)")
        amended = fleet.repo.git("rev-parse", "HEAD")
        assert amended != removal
        wait_for("the amended commit in force", lambda: desired(fleet)["revision"] == amended, 30)
    except AssertionError:
        print(fleet.log())
        raise
    finally:
        fleet.stop()


def ssh_key(directory: Path, name: str) -> tuple[Path, str]:
    key = directory / name
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True
    )
    return key, (directory / f"{name}.pub").read_text().strip()


def signed_commit(repo: DesiredRepo, key: Path, message: str) -> str:
    repo.git("add", "-A")
    repo.git(
        "-c", "gpg.format=ssh", "-c", f"user.signingkey={key}", "commit", "-q", "-S", "-m", message
    )
    return repo.git("rev-parse", "HEAD")


def test_a_remote_with_signed_commits_converges_and_refuses_an_unsigned_push(
    tmp_path: Path,
) -> None:
    fleet = make_api_fleet(tmp_path)
    repo = fleet.repo
    keys = tmp_path / "keys"
    keys.mkdir()
    key, public = ssh_key(keys, "release")
    signers = keys / "allowed_signers"
    signers.write_text(f"e2e@example.invalid {public}\n")
    repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1))
    good = signed_commit(repo, key, "gemma baseline, signed")
    branch = repo.git("symbolic-ref", "--short", "HEAD")
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(repo.path), str(bare)], check=True)
    fleet.controller_args = [
        *("--repo", f"file://{bare}", "--ref", branch, "--interval", "1s"),
        *("--verify-commits", "--allowed-signers", str(signers)),
    ]
    fleet.start(machines=2)
    try:
        started(fleet, 2)
        source = desired(fleet)
        assert (source["source"], source["revision"], source["verify_commits"]) == (
            "git",
            good,
            True,
        )
        wait_for("one routable replica", lambda: len(fleet.routable(GEMMA)) == 1, 240)

        repo.remove("gemma.yaml")
        unsigned = repo.commit("unsigned removal")
        repo.git("push", "-q", str(bare), branch)
        wait_for(
            "the unsigned commit rejected",
            lambda: desired(fleet)["rejected_revision"] == unsigned,
            deadline=60,
        )
        source = desired(fleet)
        assert source["revision"] == good
        (rejected,) = [r for r in source["rejected"] if r["revision"] == unsigned]
        assert rejected["errors"][0]["message"] == f"rejected: commit {unsigned[:12]} is not signed"
        diff = gridctl(fleet, "diff")
        assert diff.returncode == 1 and f"revision: {unsigned} rejected" in diff.stdout
        assert len(fleet.routable(GEMMA)) == 1

        repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=2))
        second = signed_commit(repo, key, "two replicas, signed")
        repo.git("push", "-q", str(bare), branch)
        wait_for("the signed push in force", lambda: desired(fleet)["revision"] == second, 60)
        wait_for("two routable replicas", lambda: len(fleet.routable(GEMMA)) == 2, 240)
        assert desired(fleet)["rejected_revision"] is None
    except AssertionError:
        print(fleet.log())
        raise
    finally:
        fleet.stop()


def test_recommend_mode_apply_executes_exactly_the_plan_and_refuses_its_stale_twin(
    tmp_path: Path,
) -> None:
    fleet = make_api_fleet(tmp_path, mode="recommend")
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1))
    fleet.repo.commit("gemma baseline")
    fleet.start(machines=2)
    try:
        started(fleet, 2)
        quiet_inputs(fleet)
        checkout = str(fleet.repo.path)
        first, twin = tmp_path / "plan.json", tmp_path / "twin.json"
        for out in (first, twin):
            made = gridctl(
                fleet, "plan", checkout, "--against", fleet.url, "--out", str(out),
                "--detailed-exitcode",
            )  # fmt: skip
            assert made.returncode == 2
        plan = json.loads(first.read_text())
        assert plan["inputs"]["digest"] == json.loads(twin.read_text())["inputs"]["digest"]
        ids = sorted(a["action_id"] for a in [*plan["actions"], *plan["deferred"]])
        assert ids and plan["mode"] == "recommend"

        applied = gridctl(fleet, "apply", str(first))
        assert applied.returncode == 0, applied.stderr
        assert f"recommend mode: {len(ids)} action(s) of the plan made executable" in (
            applied.stdout
        )
        wait_for("one routable replica", lambda: len(fleet.routable(GEMMA)) == 1, 240)
        wait_for("nothing pending", lambda: fleet.status()["pending_commands"] == [], 60)
        history = fleet.status()["history"]
        issued = sorted({e["action_id"] for e in history if e["event"] == "issued"})
        assert issued == ids  # nothing else was issued

        stale = gridctl(fleet, "apply", str(twin))
        assert stale.returncode == 1
        assert "stale plan: " in stale.stderr and "residencies" in stale.stderr
        assert f"+local-1/{GEMMA} ready managed" in stale.stderr or (
            f"+local-2/{GEMMA} ready managed" in stale.stderr
        )
        after = fleet.status()["history"]
        assert sorted({e["action_id"] for e in after if e["event"] == "issued"}) == ids
    except AssertionError:
        print(fleet.log())
        raise
    finally:
        fleet.stop()


def test_priority_preemption_of_a_single_replica_converges(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    share = int(partition_capacity(1) * 0.6)  # two of these never fit on the one host
    low = profile_yaml(GEMMA, min_replicas=1, max_replicas=1, extra="  priority: 10\n")
    fleet.repo.write("low.yaml", low.replace("memory_mb: 640", f"memory_mb: {share}"))
    fleet.repo.commit("a low-priority baseline")
    fleet.start(machines=1)
    try:
        started(fleet, 1)
        host = fleet.status()["hosts"][0]
        assert 2 * share > host["capacity_mb"] - host["reserved_mb"]
        wait_for("the low-priority replica", lambda: fleet.routable(GEMMA) == ["local-1"], 240)

        high = profile_yaml("gemma-critical", min_replicas=1, max_replicas=1)
        high = high.replace("memory_mb: 640", f"memory_mb: {share}") + "  priority: 90\n"
        fleet.repo.write("high.yaml", high)
        fleet.repo.commit("a critical model")
        wait_for(
            "the critical model ready",
            lambda: fleet.routable("gemma-critical") == ["local-1"],
            deadline=300,
        )
        assert fleet.live_copies(GEMMA) == []
        status = fleet.status()
        (victim,) = [m for m in status["models"] if m["model_id"] == GEMMA]
        assert victim["ready"] == 0 and victim["desired"] == 1
        shortfalls = [u for u in status["unmet_constraints"] if u["model_id"] == GEMMA]
        assert shortfalls and shortfalls[0]["code"] == "insufficient_capacity"
        events = [(e["event"], e.get("model_id")) for e in status["history"]]
        assert ("drain_succeeded", GEMMA) in events or ("issued", GEMMA) in events
    except AssertionError:
        print(fleet.log())
        status = fleet.status()
        print(json.dumps([status["reconciliation"], status["unmet_constraints"]], indent=1))
        print(json.dumps(status["history"][-30:], indent=1))
        raise
    finally:
        fleet.stop()
