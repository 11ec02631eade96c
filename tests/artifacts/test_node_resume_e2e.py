"""A node daemon killed with SIGKILL mid-transfer resumes the download after its restart.

Real processes: the node daemon (``gridctl node start --foreground``) and a paced
artifact server; the real controller runs in this process (``controller_harness``). The
heartbeat carries the transfer's progress while it runs; after the kill the
artifact-named partial file stays, and the restarted node's load resumes it with a Range
request.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gridctl.credentials import write_secret_file
from tests.artifacts.conftest import REPO_ROOT, ServerProcess, make_weights, wait_until
from tests.node.conftest import free_port_range
from tests.node.controller_harness import ControllerHarness, running_controller
from tests.node.controller_harness import wait_until as wait_for

# real node processes; the controller runs inside the test process: slow, not e2e
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
MIB = 1024 * 1024
HOST = "host-resume"
MODEL = "tiny"


def start_node(
    url: str, token_file: Path, state_dir: Path, endpoint: str, log: Path
) -> subprocess.Popen[bytes]:
    ports = free_port_range()
    argv = [sys.executable, "-m", "gridctl", "node", "start", "--foreground"]
    argv += ["--controller", url, "--token-file", str(token_file), "--host-id", HOST]
    argv += ["--state-dir", str(state_dir), "--capacity-mb", "2048", "--heartbeat-seconds", "0.3"]
    argv += ["--port-range", f"{ports.first}-{ports.last}", "--llama-server", sys.executable]
    env = {**os.environ, "GRIDCTL_HF_ENDPOINT": endpoint}
    with open(log, "ab") as sink:
        return subprocess.Popen(argv, env=env, cwd=REPO_ROOT, stdout=sink, stderr=sink)


def transfers(fake: ControllerHarness) -> list[dict[str, Any]]:
    inventory = fake.last_inventory()
    return list(inventory["allocator"].get("transfers", [])) if inventory else []


def test_sigkill_mid_transfer_then_restart_resumes(
    tmp_path: Path, artifact_server: Callable[..., ServerProcess]
) -> None:
    weights = make_weights(tmp_path / "hub", 12 * MIB)
    server = artifact_server(weights.root, "--bytes-per-second", str(2 * MIB))
    token_file = tmp_path / "node.token"
    state_dir, log = tmp_path / "node", tmp_path / "node.log"
    load = {"artifact_sha256": weights.sha256, "artifact_source": weights.source}
    load["artifact_size_mb"] = 64  # type: ignore[assignment]
    with running_controller(tmp_path / "controller") as fake:
        url = fake.url
        write_secret_file(token_file, fake.token(HOST) + "\n")
        node = start_node(url, token_file, state_dir, server.url, log)
        try:
            fake.enqueue(fake.command("load", MODEL, HOST, "load-1", **load))
            wait_until(
                lambda: any(t["bytes_done"] > 2 * MIB for t in transfers(fake)),
                what="a heartbeat reporting the transfer in flight",
            )
            seen = transfers(fake)[0]
            assert seen["model_id"] == MODEL and seen["bytes_total"] == 12 * MIB
            assert seen["artifact_sha256"] == weights.sha256 and seen["source"] == weights.source
            node.send_signal(signal.SIGKILL)
            node.wait(timeout=30)
        finally:
            if node.poll() is None:
                node.kill()
        partial = state_dir / "artifacts" / "staging" / f"{weights.sha256}.partial"
        kept = partial.stat().st_size
        assert 2 * MIB <= kept < 12 * MIB
        node = start_node(url, token_file, state_dir, server.url, log)
        try:
            fake.enqueue(fake.command("load", MODEL, HOST, "load-2", **load))
            ack = wait_for(lambda: fake.terminal_ack("load-2"), what="the second load's receipt")
            assert ack["status"] == "succeeded", ack
            assert ack["artifact_fetched"] is True

            def counted() -> int:
                inventory = fake.last_inventory()
                return (
                    int(inventory["allocator"]["artifact_bytes_fetched_total"]) if inventory else 0
                )

            received = wait_for(lambda: counted() or None, what="the bytes counter")
        finally:
            node.send_signal(signal.SIGTERM)
            node.wait(timeout=60)
    offsets = [int(m) for m in re.findall(r"range=bytes=(\d+)- status=206", server.log())]
    assert len(offsets) == 1 and kept - MIB <= offsets[0] <= kept, (kept, server.log())
    assert received == 12 * MIB - offsets[0]  # only the resumed remainder crossed the network
    published = state_dir / "artifacts" / "objects" / f"{weights.sha256}.gguf"
    assert published.read_bytes() == weights.data and not partial.exists()
    full = server.lines("range=- status=200")
    assert len(full) == 1 and "aborted" in full[0]  # the killed transfer; never restarted
