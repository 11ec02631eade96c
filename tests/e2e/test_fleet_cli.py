"""`gridctl fleet up|status|watch|down` and `gridctl chat` against a detached real fleet."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e.harness import GEMMA, ROOT, make_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


def gridctl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gridctl", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_detached_fleet_is_idempotent_observable_and_stoppable(tmp_path: Path) -> None:
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1))
    fleet.repo.commit("baseline")
    common = [
        "--watch",
        str(fleet.repo.path),
        "--state-dir",
        str(fleet.state_dir),
        "--port",
        str(fleet.port),
        "--engine-port-base",
        str(fleet.engine_port_base),
    ]
    up = gridctl("fleet", "up", *common)
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"OpenAI base URL: {fleet.url}/v1" in up.stdout
        wait_for("gemma routable", lambda: fleet.routable(GEMMA), deadline=180)
        fleet.engine_children()

        again = gridctl("fleet", "up", *common)
        assert again.returncode == 0 and "already running" in again.stdout
        other = gridctl(
            "fleet",
            "up",
            *common[:-2],
            "--engine-port-base",
            str(fleet.engine_port_base + 5000),
            "--machines",
            "3",
        )
        assert other.returncode == 1 and "different settings" in other.stderr

        status = gridctl("fleet", "status", "--state-dir", str(fleet.state_dir), "--json")
        assert status.returncode == 0, status.stderr
        summary = json.loads(status.stdout)
        assert all(summary["processes"].values())
        assert summary["hosts"] == {"local-1": "accepting", "local-2": "accepting"}
        assert summary["models"][GEMMA].startswith("Healthy")

        chat = gridctl(
            "chat", "--controller", fleet.url, "-m", GEMMA, "Say hi", "--max-tokens", "8"
        )
        assert chat.returncode == 0 and chat.stdout.strip(), chat.stderr
        missing = gridctl("chat", "--controller", fleet.url, "-m", "nope", "hi")
        assert missing.returncode == 1 and "HTTP 404" in missing.stderr

        watch = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gridctl",
                "fleet",
                "watch",
                "--state-dir",
                str(fleet.state_dir),
            ],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert watch.stdout is not None
        first = watch.stdout.readline()
        assert GEMMA in first  # the current residencies are reported first
        watch.send_signal(signal.SIGINT)
        rest, _ = watch.communicate(timeout=30)
        assert "the fleet keeps running" in rest
        assert fleet.routable(GEMMA)
    finally:
        down = gridctl("fleet", "down", "--state-dir", str(fleet.state_dir), timeout=180)
        fleet.stop()
    assert down.returncode == 0, down.stdout + down.stderr
    wait_for("engine children gone", lambda: not fleet.engine_children(), deadline=60)
    assert gridctl("fleet", "status", "--state-dir", str(fleet.state_dir)).returncode == 1
