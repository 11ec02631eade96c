"""Acceptance, with real processes: a `gridctl controller` and fake hosts that hold their
own credentials, made by `gridctl token write`, speaking HTTP to it.

A node's acknowledgement of another host's pending action is refused (the action stays
pending, no event, the refusal counted); a replayed heartbeat is a 409; a poisoned report
is a 400 and the fleet keeps planning and rendering; a join bundle naming an existing host
is refused; a certificate for the controller's address is refused.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives.asymmetric import ec

from gridctl.fleetca import build_csr
from tests.e2e.harness import GEMMA_SHA, ROOT, DesiredRepo, free_port, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROFILE = f"""\
apiVersion: gridctl/v1
kind: ModelProfile
metadata: {{name: gemma}}
spec:
  memory_mb: 640
  artifact: {{sha256: {GEMMA_SHA}}}
  min_replicas: 1
  max_replicas: 1
  min_residency_seconds: 0
"""
POLICY = """\
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata: {name: p}
spec: {mode: automatic}
"""


class FakeHost:
    """A host that speaks the wire protocol with its own credential file."""

    def __init__(self, url: str, host_id: str, token: str, cached: bool) -> None:
        self.url, self.host_id, self.token, self.cached = url, host_id, token, cached
        self.sequence = 0

    def envelope(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "state": "accepting",
            "cached_models": (
                [{"model_id": "gemma", "artifact_sha256": GEMMA_SHA}] if self.cached else []
            ),
            "residencies": [],
            "actuator_capabilities": ["load", "warm", "drain", "unload"],
        }

    def send(self, method: str, path: str, body: dict[str, Any]) -> httpx.Response:
        return httpx.request(
            method,
            self.url + path,
            json=body,
            headers={"X-Grid-Allocator-Node-Token": self.token},
            timeout=30,
        )

    def stamped(self, body: dict[str, Any]) -> dict[str, Any]:
        self.sequence += 1
        return {**body, "boot_id": f"boot-{self.host_id}", "sequence": self.sequence}

    def register(self) -> httpx.Response:
        body = {
            "role": "allocator",
            "host_id": self.host_id,
            "resources": {"capacity_mb": 4096, "failure_domain": self.host_id},
            "allocator": self.envelope(),
        }
        return self.send("PUT", f"/nodes/{self.host_id}", self.stamped(body))

    def heartbeat_body(self, **extra: Any) -> dict[str, Any]:
        body = {"node_id": self.host_id, "allocator": self.envelope(), **extra}
        return self.stamped(body)

    def heartbeat(self, **extra: Any) -> httpx.Response:
        return self.send("POST", f"/nodes/{self.host_id}/heartbeat", self.heartbeat_body(**extra))


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    repo = DesiredRepo(tmp_path / "desired")
    repo.write("gemma.yaml", PROFILE)
    repo.write("policy.yaml", POLICY)
    repo.commit("gemma, automatic")
    state, port = tmp_path / "state", free_port()
    args = [sys.executable, "-m", "gridctl", "controller", "--watch", str(repo.path)]
    args += ["--state", str(state), "--listen", f"127.0.0.1:{port}"]
    url = f"http://127.0.0.1:{port}"
    with (tmp_path / "controller.log").open("wb") as log:
        process = subprocess.Popen(
            args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    try:
        wait_for("the controller", lambda: httpx.get(url + "/healthz", timeout=2).is_success, 90)
        yield url, state
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    log_text = (tmp_path / "controller.log").read_text(errors="replace")
    assert "Traceback" not in log_text, log_text[-4000:]


WRITE = (sys.executable, "-m", "gridctl", "token", "write")


def finished(url: str, action_id: str) -> list[str]:
    """The outcome events (``*_succeeded``, ``*_failed``, ...) of one action in status."""
    history = httpx.get(url + "/allocator/status", timeout=10).json().get("history", [])
    outcomes = ("_succeeded", "_failed", "_rejected", "_cancelled")
    return [
        e["event"]
        for e in history
        if e.get("action_id") == action_id and e["event"].endswith(outcomes)
    ]


def credential(state: Path, host_id: str, directory: Path) -> str:
    path = directory / f"{host_id}.token"
    subprocess.run(
        [*WRITE, "--host-id", host_id, str(path), "--state", str(state)],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    return path.read_text().strip()


def test_a_fleet_holds_against_its_own_nodes(controller: tuple[str, Path], tmp_path: Path) -> None:
    url, state = controller
    victim = FakeHost(url, "host-a", credential(state, "host-a", tmp_path), cached=True)
    intruder = FakeHost(url, "host-b", credential(state, "host-b", tmp_path), cached=False)
    assert victim.register().status_code == 200
    assert intruder.register().status_code == 200

    def commands() -> list[dict[str, Any]] | None:
        answer = victim.heartbeat(request_commands=True)
        assert answer.status_code == 200, answer.text
        return answer.json()["allocator"]["commands"] or None

    (command, *_) = wait_for("a command for host-a", commands, deadline=60)
    action_id = command["action_id"]

    # another host's acknowledgement: refused, the action still pending, no event
    forged = {"action_id": action_id, "status": "failed", "message": "not mine"}
    answer = intruder.heartbeat(request_commands=False, acknowledgements=[forged])
    assert answer.status_code == 200, answer.text
    assert finished(url, action_id) == []  # still pending: no outcome event
    metrics = httpx.get(url + "/metrics", timeout=10).text
    assert 'owner="host-a",sender="host-b"} 1.0' in metrics

    # a replayed heartbeat: 409, and the owner's own acknowledgement still finishes it
    replay = victim.heartbeat_body(request_commands=False)
    path = f"/nodes/{victim.host_id}/heartbeat"
    assert victim.send("POST", path, replay).status_code == 200
    assert victim.send("POST", path, replay).status_code == 409
    done = {"action_id": action_id, "status": "failed", "message": "own failure"}
    assert victim.heartbeat(request_commands=False, acknowledgements=[done]).status_code == 200
    assert finished(url, action_id) == ["warm_failed"]

    # a poisoned report: 400, nothing stored, and the fleet still plans and renders
    poisoned = (
        b'{"role": "allocator", "host_id": "host-b", "resources": {"capacity_mb": '
        + b"1" * 401
        + b'}, "allocator": {"schema_version": 1, "state": "\\ud800"}}'
    )
    refused = httpx.put(
        url + "/nodes/host-b",
        content=poisoned,
        headers={"X-Grid-Allocator-Node-Token": intruder.token, "Content-Type": "application/json"},
        timeout=10,
    )
    assert refused.status_code == 400
    operator = {"X-Grid-Allocator-Token": (state / "operator.token").read_text().strip()}
    tick = httpx.post(url + "/allocator/tick", headers=operator, timeout=60)
    assert tick.status_code == 200 and tick.json()["ok"], tick.text
    assert httpx.get(url + "/allocator/status", timeout=10).status_code == 200
    assert httpx.get(url + "/metrics", timeout=10).status_code == 200

    # joining: an unbound bundle naming an existing host, a CSR for the controller's address
    bundle = httpx.post(
        url + "/allocator/join-tokens",
        json={"controller": "https://ctl.example.test", "ttl_seconds": 600},
        headers=operator,
        timeout=10,
    )
    assert bundle.status_code == 200, bundle.text
    secret = bundle.json()["bootstrap_secret"]
    key = ec.generate_private_key(ec.SECP256R1())

    def join(host_id: str, addresses: list[str]) -> httpx.Response:
        body = {
            "bootstrap_secret": secret,
            "host_id": host_id,
            "advertise": addresses,
            "csr": build_csr(key, host_id, addresses),
        }
        return httpx.post(url + "/join", json=body, timeout=10)

    takeover = join("host-a", ["10.9.9.9"])
    assert takeover.status_code == 409, takeover.text
    impostor = join("laptop-9", ["10.9.9.9", "127.0.0.1"])
    assert impostor.status_code == 400, impostor.text
    assert "names the controller" in impostor.json()["error"]["message"]
