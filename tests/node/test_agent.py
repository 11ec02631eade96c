"""The agent loop against the real controller on loopback: registration, lease then control
heartbeats, commands admitted through the shared fence, executed, and acknowledged with
durations; a controller restart that forgot the host gets a new registration."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import httpx
import pytest

import gridctl.controller.admission as admission
from gridctl.cli.main import main
from gridctl.credentials import write_secret_file
from gridctl.errors import PermanentError, TransientError
from gridctl.node.actuator import PortRange
from gridctl.node.agent import (
    RETRY_BOUNDS,
    RETRY_SECONDS,
    come_back_in,
    require_safe_controller_url,
)
from gridctl.node.daemon import NodeConfig, NodeParts, build_node
from tests.node.controller_harness import ControllerHarness, running_controller, wait_until

HOST = "host-a"


@dataclass
class Running:
    fake: ControllerHarness
    parts: NodeParts
    state_dir: Path
    artifact: tuple[str, str]


def make_artifact(tmp_path: Path) -> tuple[str, str]:
    data = b"GGUF-test-weights" * 1000
    path = tmp_path / "weights.gguf"
    path.write_bytes(data)
    return path.as_uri(), hashlib.sha256(data).hexdigest()


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    state_dir = tmp_path / "node"
    with running_controller(tmp_path / "controller") as fake:
        token_file = tmp_path / "node.token"
        write_secret_file(token_file, fake.token(HOST) + "\n")
        config = NodeConfig(
            host_id=HOST,
            controller_url=fake.url,
            token_file=token_file,
            state_dir=state_dir,
            capacity_mb=4096,
            failure_domain="rack-1",
            tags=("test",),
            port_range=PortRange(29900, 29909),
            heartbeat_seconds=0.2,
            binary=Path("/nonexistent/llama-server"),
        )
        parts = build_node(config, instance_id="test-instance")
        parts.executor.recover()
        parts.executor.start()
        stop = threading.Event()
        loop = threading.Thread(target=parts.agent.run, args=(stop,), daemon=True)
        loop.start()
        try:
            yield Running(fake, parts, state_dir, make_artifact(tmp_path))
        finally:
            stop.set()
            loop.join(10)
            parts.executor.stop()
            parts.agent.close()
            parts.store.close()


def test_registers_then_lease_heartbeat_then_control_heartbeat(running: Running) -> None:
    fake = running.fake
    assert fake.service is not None  # the router records a request it served at 1234.0
    fake.service.registry.request_started("host-z", "gemma-3-270m", 1234.0)
    fake.service.registry.request_finished("host-z", "gemma-3-270m", 1234.0)
    wait_until(lambda: len(fake.heartbeats) >= 4, 60, "heartbeats")
    reg = fake.registrations[0]
    assert reg["role"] == "allocator" and reg["host_id"] == HOST
    assert reg["resources"]["capacity_mb"] == 4096
    assert reg["resources"]["failure_domain"] == "rack-1" and reg["resources"]["tags"] == ["test"]
    assert reg["resources"]["disk_free_mb"] > 0 and reg["resources"]["disk_total_mb"] > 0
    assert reg["allocator"]["state"] == "accepting"
    assert "engine_api_key" not in reg["allocator"]  # no ready child: the key stays home
    flags = [hb["request_commands"] for hb in fake.heartbeats[:4]]
    assert flags == [False, True, False, True]
    assert running.parts.store.last_used_watermarks() == {"gemma-3-270m": 1234.0}


def test_command_is_executed_and_acknowledged_with_duration(running: Running) -> None:
    fake, (uri, sha) = running.fake, running.artifact
    fake.enqueue(
        fake.command(
            "load",
            "m1",
            HOST,
            "act-load-1",
            artifact_sha256=sha,
            artifact_source=uri,
            artifact_size_mb=1,
        )
    )
    ack = wait_until(lambda: fake.terminal_ack("act-load-1"), 60, "load ack")
    print("ack:", ack)
    assert ack["status"] == "succeeded", ack
    assert isinstance(ack["duration_seconds"], float) and ack["duration_seconds"] >= 0
    assert ack["artifact_fetched"] is True
    row = wait_until(lambda: fake.last_residency("m1"), 60, "residency row")
    assert row["state"] == "cached" and row["artifact_sha256"] == sha and row["memory_mb"] == 0
    cached = fake.last_inventory()["allocator"]["cached_models"]  # type: ignore[index]
    assert [c["model_id"] for c in cached] == ["m1"]

    fake.enqueue(
        fake.command(
            "load",
            "m1",
            HOST,
            "act-load-2",
            artifact_sha256=sha,
            artifact_source=uri,
            artifact_size_mb=1,
        )
    )
    ack2 = wait_until(lambda: fake.terminal_ack("act-load-2"), 60, "second load ack")
    assert ack2["status"] == "succeeded" and ack2["artifact_fetched"] is False


def test_fence_and_dependency_rejections_are_acknowledged(running: Running) -> None:
    fake, (uri, sha) = running.fake, running.artifact
    fake.enqueue(fake.command("load", "m1", HOST, "ok-1", artifact_sha256=sha, artifact_source=uri))
    assert wait_until(lambda: fake.terminal_ack("ok-1"), 60)["status"] == "succeeded"
    old = fake.authority()
    fake.restart()  # a new controller term; the old controller's commands are now stale
    new = fake.authority()
    assert new["controller_term"] > old["controller_term"], (old, new)
    fake.enqueue(fake.command("load", "m1", HOST, "ok-2", artifact_sha256=sha, artifact_source=uri))
    assert wait_until(lambda: fake.terminal_ack("ok-2"), 60)["status"] == "succeeded"
    fake.enqueue(
        fake.command("drain", "m1", HOST, "old-term", **old),
        fake.command("drain", "m1", HOST, "other-ctl", controller_id="ctl-rival"),
        fake.command("warm", "m1", HOST, "needs-dep", dependencies=["never-ran"]),
        fake.command("drain", "m1", HOST, "recommendation", executable=False),
    )
    expected = {
        "old-term": "stale_term",
        "other-ctl": "conflicting_controller",
        "needs-dep": "dependency_not_succeeded",
        "recommendation": "not_executable",
    }
    for action_id, reason in expected.items():
        ack = wait_until(lambda a=action_id: fake.terminal_ack(a), 60, action_id)
        assert ack["status"] == "rejected" and ack["reason"] == reason, ack


def test_failed_action_reports_its_reason(running: Running) -> None:
    fake = running.fake
    fake.enqueue(fake.command("drain", "ghost", HOST, "drain-ghost"))
    ack = wait_until(lambda: fake.terminal_ack("drain-ghost"), 60)
    assert ack["status"] == "failed" and ack["reason"] == "not_resident"
    assert isinstance(ack["duration_seconds"], float)


def test_local_override_is_reported_and_cancels_new_work(running: Running) -> None:
    fake, (uri, sha), state = running.fake, running.artifact, str(running.state_dir)
    assert main(["node", "drain", "--state-dir", state, "--reason", "going home"]) == 0
    wait_until(lambda: fake.last_state() == "draining", 60, "draining")
    fake.enqueue(
        fake.command(
            "load", "m1", HOST, "load-while-draining", artifact_sha256=sha, artifact_source=uri
        )
    )
    ack = wait_until(lambda: fake.terminal_ack("load-while-draining"), 60)
    assert ack["status"] == "cancelled" and ack["reason"] == "local_admission_closed"

    assert main(["node", "quarantine", "--state-dir", state, "--reason", "thermal"]) == 0
    wait_until(lambda: fake.last_state() == "quarantined", 60)
    assert main(["node", "resume", "--state-dir", state]) == 0
    wait_until(lambda: fake.last_state() == "accepting", 60)

    # long enough to be reported even on a loaded machine, short enough to watch expire
    assert main(["node", "pause", "--state-dir", state, "--for-seconds", "3"]) == 0
    wait_until(lambda: fake.last_state() == "paused", 60)
    wait_until(lambda: fake.last_state() == "accepting", 60, "expiry")
    assert running.parts.store.override() is None  # the expired override was cleared durably


def test_controller_that_forgot_the_host_gets_a_new_registration(running: Running) -> None:
    fake = running.fake
    wait_until(lambda: fake.registrations and fake.heartbeats, 60)
    fake.restart()  # the real controller's registry starts empty: it answers "not registered"
    wait_until(lambda: len(fake.registrations) >= 2, 60, "re-registration")
    beats = len(fake.heartbeats)
    wait_until(lambda: len(fake.heartbeats) > beats, 60, "heartbeats after re-registration")


def test_credential_for_another_host_is_refused_with_403(tmp_path: Path) -> None:
    with running_controller(tmp_path / "controller") as fake:
        token_file = tmp_path / "node.token"
        write_secret_file(token_file, fake.token("host-b"))
        config = NodeConfig(
            HOST,
            fake.url,
            token_file,
            tmp_path / "node",
            capacity_mb=1024,
            binary=Path("/nonexistent"),
        )
        parts = build_node(config)
        try:
            with pytest.raises(PermanentError, match="403"):
                parts.agent.register()
        finally:
            parts.agent.close()
            parts.store.close()
    assert fake.refused == [403] and fake.registrations == []


def test_plain_http_off_loopback_is_refused() -> None:
    for url in ("http://127.0.0.1:22100", "http://localhost:1", "https://grid.example"):
        require_safe_controller_url(url)
    for url in ("http://10.0.0.5:22100", "http://grid.example", "ftp://x"):
        with pytest.raises(PermanentError):
            require_safe_controller_url(url)


def test_every_report_carries_this_runs_boot_id_and_a_growing_sequence(running: Running) -> None:
    """The controller keeps the newest (boot id, sequence) of each host; the agent's
    reports move it forward, so a replay of any of them is refused."""
    fake = running.fake
    assert fake.service is not None
    sequences = fake.service.registry.sequences
    wait_until(lambda: len(fake.heartbeats) >= 3, 60, "heartbeats")
    first = sequences.watermark(HOST)
    assert first is not None
    assert first[0] == running.parts.agent.boot_id and first[1] >= 3
    wait_until(lambda: (sequences.watermark(HOST) or first)[1] > first[1], 60, "a later report")


def test_steady_heartbeats_are_lease_renewals_naming_the_last_full_inventory(
    running: Running,
) -> None:
    fake = running.fake
    wait_until(lambda: sum("allocator" not in hb for hb in fake.heartbeats) >= 3, 60, "leases")
    with fake.lock:
        reports = [*fake.registrations[:1], *fake.heartbeats]
    assert "inventory_digest" in reports[0] and "allocator" in reports[0]  # registration
    held = None
    for report in reports:
        if "allocator" in report:
            held = report["inventory_digest"]
        else:  # a lease: no inventory, the digest of the last full one, load and receipts
            assert set(report) >= {"node_id", "inventory_digest", "load", "acknowledgements"}
            assert "resources" not in report and report["inventory_digest"] == held
    status = running.parts.agent.status
    assert status["lease_renewals"] >= 3 and status["heartbeats"] >= status["lease_renewals"]


def test_a_controller_that_lost_the_inventory_gets_it_in_full(running: Running) -> None:
    fake = running.fake
    assert fake.service is not None
    registry = fake.service.registry
    wait_until(lambda: any("allocator" not in hb for hb in fake.heartbeats), 60, "a lease")
    with registry._lock:  # the controller's state is lost (as after a failover)
        record = registry._hosts[HOST]
        registry._hosts[HOST] = replace(record, inventory_digest="lost")
    fulls = len(fake.inventories)
    wait_until(lambda: len(fake.inventories) > fulls, 60, "the full inventory")
    taken = wait_until(lambda: (registry.host(HOST) or record).inventory_digest != "lost", 60)
    assert taken
    agent = running.parts.agent
    wait_until(lambda: registry.host(HOST).inventory_digest == agent.inventory.digest, 60)  # type: ignore[union-attr]


def test_a_controller_behind_its_fleet_defers_registration_and_names_when(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission, "GATE_FROM_HOSTS", 0)  # every fleet is large here
    monkeypatch.setattr(admission, "LAG_LIMIT_SECONDS", -1.0)  # and always behind
    with running_controller(tmp_path / "controller") as fake:
        token_file = tmp_path / "node.token"
        write_secret_file(token_file, fake.token(HOST))
        config = NodeConfig(
            HOST, fake.url, token_file, tmp_path / "node", capacity_mb=1024,
            binary=Path("/nonexistent"),
        )  # fmt: skip
        parts = build_node(config)
        try:
            with pytest.raises(TransientError, match="behind") as caught:
                parts.agent.register()
            low, high = admission.RETRY_SECONDS
            assert low <= caught.value.retry_after <= high  # the controller's own time
            assert fake.registrations == []
            monkeypatch.setattr(admission, "LAG_LIMIT_SECONDS", 3600.0)  # caught up
            parts.agent.register()
            assert len(fake.registrations) == 1
        finally:
            parts.agent.close()
            parts.store.close()


def refusal(body: object = None, **headers: str) -> httpx.Response:
    if body is None:
        return httpx.Response(503, headers=headers, content=b"not json")
    return httpx.Response(503, headers=headers, json=body)


def test_the_time_to_come_back_is_the_controllers_within_bounds() -> None:
    low, high = RETRY_BOUNDS
    named = {"error": {"message": "behind", "retry_after_seconds": 7.25}}
    assert come_back_in(refusal(named, **{"Retry-After": "9"})) == 7.25  # the body's, exact
    assert come_back_in(refusal(**{"Retry-After": "9"})) == 9.0  # else the header's
    assert come_back_in(refusal({"error": {"retry_after_seconds": True}})) == RETRY_SECONDS
    assert come_back_in(refusal()) == RETRY_SECONDS  # neither
    assert (
        come_back_in(refusal(**{"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"})) == RETRY_SECONDS
    )
    assert come_back_in(refusal(**{"Retry-After": "nan"})) == RETRY_SECONDS
    assert come_back_in(refusal({"error": {"retry_after_seconds": 0.01}})) == low
    assert come_back_in(refusal({"error": {"retry_after_seconds": 1e9}})) == high
