"""The operator's rollout on real processes: observe, recommend, a saved plan applied in
automatic mode, a stale twin refused, and ``--detailed-exitcode`` on both sides.

One controller without --watch (desired state arrives by ``gridctl apply``), two node
daemons, real llama-server children; every step goes through the ``gridctl`` CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.harness import GEMMA, ROOT, ApiFleet, make_api_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def fleet(tmp_path: Path) -> Iterator[ApiFleet]:
    fleet = make_api_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1))
    fleet.repo.commit("gemma baseline")
    yield fleet
    fleet.stop()


def gridctl(fleet: ApiFleet, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GRIDCTL_CONTROLLER": fleet.url,
        "GRIDCTL_TOKEN_FILE": str(fleet.state_dir / "controller" / "operator.token"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    print(f"$ gridctl {' '.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr}")
    return done


def heartbeats_after(fleet: ApiFleet, at: float, count: int = 2) -> None:
    """Wait until every host has heartbeated ``count`` intervals after controller time ``at``."""
    wait_for(
        f"{count} heartbeats from every host",
        lambda: all(h["last_heartbeat"] >= at + 2.0 * count for h in fleet.status()["hosts"]),
        deadline=60,
    )


def quiet_inputs(fleet: ApiFleet) -> None:
    """Wait until the live inputs digest holds across a heartbeat (cache scans settle)."""

    def digest() -> str:
        response = fleet.admin("GET", "/allocator/snapshot")
        response.raise_for_status()
        return str(response.json()["inputs"]["digest"])

    def steady() -> bool:
        before = digest()
        heartbeats_after(fleet, fleet.status()["now"], count=1)
        return digest() == before

    wait_for("steady plan inputs", steady, deadline=90, interval=0)


def gemma_row(fleet: ApiFleet) -> dict[str, Any]:
    (row,) = [m for m in fleet.status()["models"] if m["model_id"] == GEMMA]
    return row


def test_rollout_observe_recommend_apply_and_stale_plan(fleet: ApiFleet, tmp_path: Path) -> None:
    fleet.start()
    try:
        wait_for("two hosts registered", lambda: len(fleet.status()["hosts"]) == 2, deadline=60)
    except AssertionError:
        print(fleet.log())
        raise
    checkout = str(fleet.repo.path)

    # 1. observe: the plan is applied, drift is recorded, nothing executes
    assert gridctl(fleet, "mode", "observe", "--reason", "rollout step 1").returncode == 0
    first = tmp_path / "observe.json"
    planned = gridctl(
        fleet, "plan", checkout, "--against", fleet.url, "--out", str(first), "--detailed-exitcode"
    )
    assert planned.returncode == 2
    assert f"+ {GEMMA} on local-" in planned.stdout
    applied = gridctl(fleet, "apply", str(first))
    assert applied.returncode == 0 and "controller mode observe" in applied.stdout
    status = fleet.status()
    assert status["desired"]["revision"] == fleet.repo.git("rev-parse", "HEAD")
    deferred = status["reconciliation"]["deferred"]
    assert deferred and {a["blocked"] for a in deferred} == {"observe_mode"}
    assert (gemma_row(fleet)["health"], gemma_row(fleet)["sync"]) == ("Suspended", "OutOfSync")
    diff = gridctl(fleet, "diff")
    assert diff.returncode == 1 and "operator override observe" in diff.stdout
    heartbeats_after(fleet, status["now"])
    assert fleet.status()["pending_commands"] == [] and fleet.live_copies(GEMMA) == []

    # 2. recommend: actions are proposed, none executable, nothing executes
    assert gridctl(fleet, "mode", "recommend").returncode == 0
    status = fleet.status()
    proposed = status["reconciliation"]["actions"]
    assert proposed and not any(a["executable"] for a in proposed)
    dry = gridctl(fleet, "apply", checkout, "--dry-run")
    assert dry.returncode == 0 and "mode recommend (operator override)" in dry.stdout
    assert f"warm   {GEMMA} on local-" in dry.stdout and "[executable]" not in dry.stdout
    heartbeats_after(fleet, status["now"])
    assert fleet.live_copies(GEMMA) == [] and fleet.engine_children() == []

    # 3. automatic (git's mode, the override cleared): the baseline converges
    assert gridctl(fleet, "mode", "--clear").returncode == 0
    wait_for("one routable replica", lambda: len(fleet.routable(GEMMA)) == 1, deadline=180)
    assert (
        gridctl(fleet, "plan", checkout, "--against", fleet.url, "--detailed-exitcode").returncode
        == 0
    )
    assert gridctl(fleet, "diff").returncode == 0

    # 4. a change: two saved plans from the same observation; the first applied converges
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=2))
    revision = fleet.repo.commit("two replicas")
    quiet_inputs(fleet)
    plan_b, plan_c = tmp_path / "b.json", tmp_path / "c.json"
    for out in (plan_b, plan_c):
        made = gridctl(
            fleet,
            "plan",
            checkout,
            "--against",
            fleet.url,
            "--out",
            str(out),
            "--detailed-exitcode",
        )
        assert made.returncode == 2  # a pending change
    saved_b = json.loads(plan_b.read_text())
    assert saved_b["desired"]["revision"] == revision
    assert saved_b["inputs"]["digest"] == json.loads(plan_c.read_text())["inputs"]["digest"]
    assert [a["kind"] for a in saved_b["actions"]][:1] in (["load"], ["warm"])
    applied = gridctl(fleet, "apply", str(plan_b))
    assert applied.returncode == 0, applied.stderr
    assert "controller mode automatic" in applied.stdout
    hosts = wait_for(
        "two routable replicas",
        lambda: (h := fleet.routable(GEMMA)) and len(h) == 2 and h,
        deadline=180,
    )
    assert hosts == ["local-1", "local-2"]

    # 5. the twin was made before heartbeats changed the fleet: its actions differ now, so it
    # is refused, naming the changed actions and the inputs that moved
    stale = gridctl(fleet, "apply", str(plan_c))
    assert stale.returncode == 1
    assert "stale plan: the controller would now act differently after " in stale.stderr
    assert "residencies" in stale.stderr.splitlines()[0]
    assert "plan again" in stale.stderr
    assert "moved residencies: " in stale.stderr
    assert f"+local-2/{GEMMA} ready managed" in stale.stderr
    assert "moved revision: +previous profiles " in stale.stderr
    assert fleet.status()["desired"]["revision"] == revision

    # 6. converged: no changes, in sync, and /metrics saw the work
    wait_for(
        "no pending commands",
        lambda: fleet.status()["pending_commands"] == [],
        deadline=60,
    )
    assert (
        gridctl(fleet, "plan", checkout, "--against", fleet.url, "--detailed-exitcode").returncode
        == 0
    )
    assert gridctl(fleet, "diff").returncode == 0
    metrics = httpx.get(fleet.url + "/metrics", timeout=10).text
    assert 'gridctl_residencies{ownership="managed",state="ready"} 2.0' in metrics
