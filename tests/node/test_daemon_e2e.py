"""The real node daemon process, a real llama-server child and the Gemma file, driven over
HTTP by the real controller (in this process, see ``controller_harness``): warm, serve,
SIGKILL the daemon, adopt the same PID, drain, unload, SIGKILL a child, and stop."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.credentials import write_secret_file
from gridctl.node.daemon import daemon_identity, read_daemon_record
from gridctl.node.processes import Liveness, check_identity, signal_proven
from tests.node.conftest import (
    GEMMA_SHA256,
    GEMMA_SOURCE,
    MODEL_ID,
    free_port_range,
    stop_children_of,
)
from tests.node.controller_harness import running_controller, wait_until

# real node and engine processes; the controller runs inside the test process: slow, not e2e
pytestmark = pytest.mark.slow
HOST = "host-e2e"


def gridctl(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gridctl", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def started_failure(done: subprocess.CompletedProcess[str], state_dir: Path, fake: Any) -> str:
    """What a failed ``node start`` said, the daemon's log and what the controller saw."""
    log = state_dir / "logs" / "daemon.log"
    tail = log.read_text(encoding="utf-8", errors="replace")[-4000:] if log.exists() else ""
    return (
        f"{done.stdout}{done.stderr}\n--- daemon.log (tail)\n{tail}\n"
        f"--- controller: {len(fake.registrations)} registrations, "
        f"refused statuses {fake.refused[-5:]}"
    )


def status(state_dir: Path) -> dict[str, Any]:
    done = gridctl("node", "status", "--state-dir", str(state_dir), "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def kill_daemon_by_proof(state_dir: Path) -> None:
    record = read_daemon_record(state_dir)
    identity = daemon_identity(record) if record else None
    if identity is not None and check_identity(identity) is Liveness.PROVEN:
        signal_proven(identity, signal.SIGKILL)


@pytest.fixture
def node_setup(tmp_path: Path, shared_artifacts: Path, llama_binary: Path) -> Iterator[Any]:
    state_dir = tmp_path / "node"
    ports = free_port_range()
    with running_controller(tmp_path / "controller") as fake:
        token_file = tmp_path / "node.token"
        write_secret_file(token_file, fake.token(HOST) + "\n")
        start_args = [
            "node",
            "start",
            "--controller",
            fake.url,
            "--token-file",
            str(token_file),
            "--host-id",
            HOST,
            "--state-dir",
            str(state_dir),
            "--capacity-mb",
            "4096",
            "--failure-domain",
            "rack-e2e",
            "--tags",
            "e2e,cpu",
            "--port-range",
            f"{ports.first}-{ports.last}",
            "--heartbeat-seconds",
            "0.5",
            "--engine-threads",
            "1",
            "--engine-ctx",
            "1024",
            "--artifact-dir",
            str(shared_artifacts),
            "--llama-server",
            str(llama_binary),
            "--stop-idle-seconds",
            "10",
            # a loaded machine: registration is awaited with a generous deadline
            "--start-timeout",
            "240",
        ]
        try:
            yield fake, state_dir, start_args
        finally:
            kill_daemon_by_proof(state_dir)
            stop_children_of(state_dir)


def test_daemon_lifecycle_with_restart_adoption(node_setup: Any) -> None:
    fake, state_dir, start_args = node_setup
    t0 = time.monotonic()
    started = gridctl(*start_args)
    assert started.returncode == 0, started_failure(started, state_dir, fake)
    print(f"node start -> registered: {time.monotonic() - t0:.2f}s")
    assert fake.registrations[-1]["resources"]["failure_domain"] == "rack-e2e"

    t0 = time.monotonic()
    fake.enqueue(
        fake.command(
            "load",
            MODEL_ID,
            HOST,
            "load-1",
            artifact_sha256=GEMMA_SHA256,
            artifact_source=GEMMA_SOURCE,
            artifact_size_mb=242,
        ),
        fake.command(
            "warm", MODEL_ID, HOST, "warm-1", artifact_sha256=GEMMA_SHA256, dependencies=["load-1"]
        ),
    )
    load = wait_until(lambda: fake.terminal_ack("load-1"), 120, "load ack")
    warm = wait_until(lambda: fake.terminal_ack("warm-1"), 180, "warm ack")
    assert load["status"] == "succeeded" and warm["status"] == "succeeded", (load, warm)
    print(
        f"load ack {load['duration_seconds']}s (fetched={load['artifact_fetched']}), "
        f"warm ack {warm['duration_seconds']}s; commands->ready acks in "
        f"{time.monotonic() - t0:.2f}s"
    )
    row = wait_until(
        lambda: (r := fake.last_residency(MODEL_ID)) and r.get("endpoint") and r, 30, "endpoint"
    )
    assert row["state"] == "ready" and row["artifact_sha256"] == GEMMA_SHA256
    assert row["runtime"] == "llama.cpp" and row["managed"] is True and row["memory_mb"] == 640
    key = fake.last_inventory()["allocator"]["engine_api_key"]
    endpoint = row["endpoint"]

    answer = httpx.post(
        f"{endpoint}/v1/chat/completions",
        json={"model": MODEL_ID, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )
    assert answer.status_code == 200
    assert httpx.get(f"{endpoint}/slots", timeout=5).status_code == 401

    before = status(state_dir)
    child_pid = before["residencies"][0]["pid"]
    assert key not in json.dumps(before)
    assert key.encode() not in Path(f"/proc/{child_pid}/cmdline").read_bytes()
    assert key.encode() not in Path(f"/proc/{child_pid}/environ").read_bytes()
    daemon = before["daemon"]
    assert daemon["running"] is True

    # SIGKILL the daemon: the child survives; a new daemon adopts exactly that PID
    os.kill(daemon["pid"], signal.SIGKILL)
    wait_until(lambda: not status(state_dir)["daemon"]["running"], 60, "daemon gone")
    assert Path(f"/proc/{child_pid}").exists()
    registrations = len(fake.registrations)
    t0 = time.monotonic()
    restarted = gridctl(*start_args)
    assert restarted.returncode == 0, started_failure(restarted, state_dir, fake)
    wait_until(lambda: len(fake.registrations) > registrations, 60, "re-registration")
    print(f"restart -> registered again: {time.monotonic() - t0:.2f}s")
    after = status(state_dir)
    assert after["daemon"]["pid"] != daemon["pid"]
    adopted = after["residencies"][0]
    assert adopted["pid"] == child_pid and adopted["state"] == "ready" and not adopted["fenced"]
    print(f"adopted child pid {child_pid} after daemon SIGKILL: {adopted['message']}")

    fake.enqueue(fake.command("drain", MODEL_ID, HOST, "drain-1"))
    assert wait_until(lambda: fake.terminal_ack("drain-1"), 60)["status"] == "succeeded"
    wait_until(lambda: fake.last_residency(MODEL_ID)["state"] == "draining", 60, "draining")
    fake.enqueue(fake.command("unload", MODEL_ID, HOST, "unload-1"))
    unload = wait_until(lambda: fake.terminal_ack("unload-1"), 60)
    assert unload["status"] == "succeeded", unload
    wait_until(lambda: fake.last_residency(MODEL_ID)["state"] == "cached", 60, "cached")
    wait_until(lambda: not Path(f"/proc/{child_pid}").exists(), 60, "adopted child gone")
    print(f"adopted child drained and unloaded ({unload['duration_seconds']}s)")

    # a SIGKILLed child is reported failed in the next heartbeats
    fake.enqueue(fake.command("warm", MODEL_ID, HOST, "warm-2", artifact_sha256=GEMMA_SHA256))
    assert wait_until(lambda: fake.terminal_ack("warm-2"), 180)["status"] == "succeeded"
    second_pid = status(state_dir)["residencies"][0]["pid"]
    os.kill(second_pid, signal.SIGKILL)
    t0 = time.monotonic()
    failed = wait_until(
        lambda: (r := fake.last_residency(MODEL_ID)) and r["state"] == "failed" and r, 30
    )
    print(
        f"SIGKILLed child {second_pid} reported failed in a heartbeat after "
        f"{time.monotonic() - t0:.2f}s"
    )
    assert "endpoint" not in failed

    fake.enqueue(fake.command("warm", MODEL_ID, HOST, "warm-3", artifact_sha256=GEMMA_SHA256))
    assert wait_until(lambda: fake.terminal_ack("warm-3"), 180)["status"] == "succeeded"
    third_pid = status(state_dir)["residencies"][0]["pid"]
    t0 = time.monotonic()
    stopped = gridctl("node", "stop", "--state-dir", str(state_dir), "--timeout", "60")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    # the daemon drained and stopped its child itself: it needed no SIGKILL
    assert "SIGKILL" not in stopped.stdout, stopped.stdout
    print(f"node stop (drain + stop child): {time.monotonic() - t0:.2f}s")
    assert not Path(f"/proc/{third_pid}").exists()
    final = status(state_dir)
    assert final["daemon"]["running"] is False
    assert final["residencies"][0]["state"] == "cached"
    assert fake.last_state() == "draining"
    log_text = (state_dir / "logs" / "daemon.log").read_text()
    assert key not in log_text
