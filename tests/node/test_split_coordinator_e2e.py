"""A split's coordinator engine on a node (real processes, loopback, the fleet's TLS).

Two hosts' ``StageHost``s hold accepted claims of one generation of Gemma: host A is
the coordinator and stage 0 (layers 0-8), host B stage 1 (layers 9-17); each stage
server sits behind its TLS tunnel. A ``warm`` with ``split_serve`` goes through A's
intake and executor: the load fence on A's own claim, one ``CoordinatorForwarder``
per stage, then ``llama-server --rpc`` over them. The engine must answer a chat
completion on its own endpoint with both stage servers holding weights, the heartbeat
must name its split term, and an unload must take the forwarders with the engine
while the stages keep serving. A stale replay, a malformed ``split_serve`` and a host
without a stage host start nothing; a restarted node stops a recorded coordinator
child instead of adopting it, and a coordinator child that dies takes its forwarders.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from gridctl.config.schemas import validator
from gridctl.domain.states import HostState, ResidencyState
from gridctl.node.actuator import HEALTH_FAILURES_BEFORE_FAILED
from gridctl.node.agent import NodeAgent
from gridctl.node.executor import CommandExecutor
from gridctl.node.intake import CommandIntake
from gridctl.node.processes import Liveness, check_identity, signal_proven
from gridctl.node.records import Receipt
from gridctl.node.reports import HostFacts, allocator_envelope
from gridctl.node.rpctunnel import TlsIdentity
from gridctl.node.stageclaims import StageAssignment, StageClaim
from gridctl.node.stagehost import StageHost, StageHostSettings
from gridctl.node.statestore import NodeStateStore
from gridctl.split import Claim
from tests.node.conftest import (
    GEMMA_SHA256,
    GEMMA_SOURCE,
    MODEL_ID,
    NodeParts,
    build_parts,
    free_port_range,
    gemma_load,
    stop_children_of,
)
from tests.node.controller_harness import running_controller, wire_command
from tests.node.stage_certs import fleet_ca, fleet_identity
from tests.node.test_rpc_engine_e2e import _stage_server

pytestmark = pytest.mark.e2e

HOUR_MS = 3_600_000
LAYERS = 18  # Gemma 3 270M's blocks
_TERMINAL = ("succeeded", "failed", "rejected", "cancelled")


def now_ms() -> int:
    return int(time.time() * 1000)


def stage_claim(term: int, index: int, *, coordinator: str = "host-a") -> StageClaim:
    claim = Claim(
        model_id=MODEL_ID,
        package_ref=GEMMA_SOURCE,
        manifest_sha256=GEMMA_SHA256,
        coordinator_id=coordinator,
        coordinator_term=term,
        topology_id=f"topology-{term}",
        run_id=f"run-{term}",
        participant_set_hash="participants",
        topology_hash=f"topology-hash-{term}",
        lease_until_unix_ms=now_ms() + 4 * HOUR_MS,
    )
    half = LAYERS // 2
    return StageClaim(claim, StageAssignment(index, 2, half * index, half * (index + 1)))


def split_serve(term: int, endpoints: list[str]) -> dict[str, Any]:
    """The wire's ``split_serve`` for generation ``term`` over stages A and B."""
    claim = stage_claim(term, 0).claim
    half = LAYERS // 2
    return {
        "claim": {
            "model_id": claim.model_id, "package_ref": claim.package_ref,
            "manifest_sha256": claim.manifest_sha256, "coordinator_id": claim.coordinator_id,
            "coordinator_term": term, "topology_id": claim.topology_id, "run_id": claim.run_id,
        },
        "stages": [
            {"host_id": host, "endpoint": endpoint, "layer_start": half * i,
             "layer_end": half * (i + 1)}
            for i, (host, endpoint) in enumerate(zip(("host-a", "host-b"), endpoints, strict=True))
        ],
    }  # fmt: skip


def listening_ports() -> set[int]:
    """The TCP ports this test process listens on (the forwarders run in it)."""
    return {
        c.laddr.port
        for c in psutil.Process().net_connections("tcp")
        if c.status == psutil.CONN_LISTEN
    }


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


@dataclass
class StageSide:
    store: NodeStateStore
    stages: StageHost

    def endpoint(self) -> str:
        (running,) = self.stages.running().values()
        host, port = running.advertised
        return f"{host}:{port}"

    def server_pid(self) -> int:
        (running,) = self.stages.running().values()
        return running.server.pid


def stage_side(store: NodeStateStore, identity: TlsIdentity, logs: Path) -> StageSide:
    return StageSide(store, StageHost(store, StageHostSettings(_stage_server(), identity,
                                                               "127.0.0.1", logs)))  # fmt: skip


class Coordinator:
    """Host A: its actuator, intake and executor over one store, and its stage host."""

    def __init__(self, parts: NodeParts, stages: StageHost | None) -> None:
        self.parts, self.stages = parts, stages
        self.intake = CommandIntake(parts.store, "host-a")
        self.executor = CommandExecutor(parts.actuator, lambda: HostState.ACCEPTING, stages=stages)
        self.executor.start()
        self.sent = 0

    def send(self, kind: str, **fields: Any) -> Receipt:
        self.sent += 1
        action_id = f"{kind}-{self.sent}"
        command = wire_command(kind, MODEL_ID, "host-a", action_id, **fields)
        admitted = self.intake.admit(command, remaining_ttl=60, request_duration=0)
        if admitted is not None:
            self.executor.submit(admitted)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            receipt = self.parts.store.receipt(action_id)
            if receipt is not None and receipt.status in _TERMINAL:
                return receipt
            self.executor.changed.wait(0.1)
            self.executor.changed.clear()
        raise AssertionError(f"{action_id} did not finish: {self.parts.store.receipt(action_id)}")

    def warm(self, serve: dict[str, Any]) -> Receipt:
        return self.send("warm", artifact_sha256=GEMMA_SHA256, split_serve=serve)

    def engine_log(self) -> str:
        return self.parts.runtime.log_tail(MODEL_ID, 2000)


@dataclass
class Fleet:
    a: Coordinator
    a_stage: StageSide
    b_stage: StageSide
    identities: dict[str, TlsIdentity]

    def claim(self, term: int) -> None:
        """Both hosts accept generation ``term`` (A stage 0, B stage 1)."""
        for index, side in enumerate((self.a_stage, self.b_stage)):
            outcome = side.stages.offer(stage_claim(term, index), now_ms())
            assert outcome.decision.accepted, outcome.decision

    def serve(self, term: int) -> dict[str, Any]:
        return split_serve(term, [self.a_stage.endpoint(), self.b_stage.endpoint()])


@pytest.fixture
def fleet(tmp_path: Path, shared_artifacts: Path, llama_binary: Path) -> Iterator[Fleet]:
    ca = fleet_ca(tmp_path / "ctl")
    identities = {h: fleet_identity(ca, tmp_path / f"{h}-tls", h, ["127.0.0.1"])
                  for h in ("host-a", "host-b")}  # fmt: skip
    parts = build_parts(tmp_path / "a-node", shared_artifacts, llama_binary, free_port_range())
    a_stage = stage_side(parts.store, identities["host-a"], tmp_path / "a-stage-logs")
    b_stage = stage_side(
        NodeStateStore(tmp_path / "b-node" / "node.sqlite3"), identities["host-b"],
        tmp_path / "b-stage-logs",
    )  # fmt: skip
    coordinator = Coordinator(parts, a_stage.stages)
    try:
        yield Fleet(coordinator, a_stage, b_stage, identities)
    finally:
        coordinator.executor.stop()
        parts.actuator.links.close_all()
        stop_children_of(tmp_path / "a-node")  # by proof only
        parts.runtime.reap()  # collect what was stopped: no zombie outlives the test
        for side in (a_stage, b_stage):
            side.stages.close()
        b_stage.store.close()
        parts.store.close()


def chat(parts: NodeParts, port: int) -> dict[str, Any]:
    answer = httpx.post(
        f"{parts.runtime.endpoint(port)}/v1/chat/completions",
        headers={"Authorization": f"Bearer {parts.api_key}"},
        json={"model": MODEL_ID, "messages": [{"role": "user", "content": "Say hello."}],
              "max_tokens": 8, "temperature": 0},
        timeout=120,
    )  # fmt: skip
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert isinstance(body, dict)
    return body


def warmed(fleet: Fleet) -> tuple[int, tuple[int, ...]]:
    """Claim term 1 on both hosts, load and warm the coordinator; its pid and forwarder ports."""
    fleet.claim(1)
    fleet.a.parts.actuator.load(gemma_load())
    receipt = fleet.a.warm(fleet.serve(1))
    assert (receipt.status, receipt.reason) == ("succeeded", ""), (receipt, fleet.a.engine_log())
    record = fleet.a.parts.store.residency(MODEL_ID)
    assert record is not None and record.pid is not None and record.split_term == 1
    return record.pid, fleet.a.parts.actuator.links.ports(MODEL_ID)


def test_the_coordinator_serves_through_its_forwarders_and_unload_takes_them(
    fleet: Fleet,
) -> None:
    fleet.claim(1)
    stage_pids = [fleet.a_stage.server_pid(), fleet.b_stage.server_pid()]
    idle_mb = [psutil.Process(pid).memory_info().rss >> 20 for pid in stage_pids]
    fleet.a.parts.actuator.load(gemma_load())
    receipt = fleet.a.warm(fleet.serve(1))
    assert (receipt.status, receipt.reason) == ("succeeded", ""), (receipt, fleet.a.engine_log())
    assert "split of 2 stages" in receipt.message

    parts = fleet.a.parts
    record = parts.store.residency(MODEL_ID)
    assert record is not None and record.state is ResidencyState.READY
    assert record.split_term == 1 and record.port is not None and record.identity is not None
    ports = parts.actuator.links.ports(MODEL_ID)
    assert len(ports) == 2 and set(ports) <= listening_ports()
    argv = list(record.identity.cmdline)  # the engine reaches the forwarders, nothing else
    assert argv[argv.index("--rpc") + 1] == ",".join(f"127.0.0.1:{p}" for p in ports)
    assert argv[argv.index("--tensor-split") + 1] == "9,9"

    body = chat(parts, record.port)
    assert body["choices"][0]["message"]["content"].strip(), body
    grown_mb = [
        (psutil.Process(pid).memory_info().rss >> 20) - idle
        for pid, idle in zip(stage_pids, idle_mb, strict=True)
    ]
    assert min(grown_mb) >= 8, grown_mb  # both stage servers hold part of the weights

    envelope = allocator_envelope(
        HostState.ACCEPTING, parts.store.residencies(), parts.store.cached_artifacts(),
        time.time(), endpoint_of=lambda r: parts.runtime.endpoint(r.port or 0),
        engine_api_key=parts.api_key, max_concurrency=2, stage_host=True,
        split_stages=fleet.a_stage.stages.observed(),
    )  # fmt: skip
    assert list(validator("wire/allocator-envelope.schema.json").iter_errors(envelope)) == []
    rows: list[dict[str, Any]] = envelope["residencies"]  # type: ignore[assignment]
    stage_rows: list[dict[str, Any]] = envelope["split_stages"]  # type: ignore[assignment]
    assert [row["split_term"] for row in rows] == [1] and rows[0]["endpoint"]
    assert [(r["stage_index"], r["layer_end"]) for r in stage_rows] == [(0, 9)]
    assert stage_rows[0]["endpoint"] == fleet.a_stage.endpoint()

    assert fleet.a.send("drain").status == "succeeded"
    assert set(ports) <= listening_ports()  # a draining engine still reaches its stages
    unloaded = fleet.a.send("unload")
    assert unloaded.status == "succeeded", unloaded.message
    assert gone(record.identity.pid)
    assert not set(ports) & listening_ports() and parts.actuator.links.models() == ()
    after = parts.store.residency(MODEL_ID)
    assert after is not None and after.split_term is None and after.pid is None
    # the stages keep serving under their unchanged claims
    assert [fleet.a_stage.server_pid(), fleet.b_stage.server_pid()] == stage_pids
    for side in (fleet.a_stage, fleet.b_stage):
        (held,) = side.stages.book.held()
        assert held.serving and held.stage_claim.claim.coordinator_term == 1


def test_through_the_real_controller_the_warm_succeeds_and_the_heartbeat_reports_the_split(
    fleet: Fleet, tmp_path: Path
) -> None:
    fleet.claim(1)
    parts = fleet.a.parts
    parts.actuator.load(gemma_load())
    with running_controller(tmp_path / "controller") as controller:
        agent = NodeAgent(
            facts=HostFacts(host_id="host-a", capacity_mb=8192),
            actuator=parts.actuator,
            executor=fleet.a.executor,
            intake=fleet.a.intake,
            controller_url=controller.url,
            token=lambda: controller.token("host-a"),
            engine_api_key=parts.api_key,
        )
        try:
            agent.register()
            agent.heartbeat(request_commands=False)
            inventory = controller.last_inventory()
            assert inventory is not None
            (stage_row,) = inventory["allocator"]["split_stages"]
            assert stage_row["endpoint"] == fleet.a_stage.endpoint()
            assert (stage_row["stage_index"], stage_row["coordinator_term"]) == (0, 1)

            serve = fleet.serve(1)
            warm = controller.command(
                "warm", MODEL_ID, "host-a", "warm-split", artifact_sha256=GEMMA_SHA256,
                split_serve=serve,
            )  # fmt: skip
            controller.enqueue(warm)
            deadline = time.monotonic() + 240
            while controller.terminal_ack("warm-split") is None:
                assert time.monotonic() < deadline, fleet.a.engine_log()
                agent.cycle()
                fleet.a.executor.changed.wait(0.2)
                fleet.a.executor.changed.clear()
            ack = controller.terminal_ack("warm-split")
            assert ack is not None and ack["status"] == "succeeded", (ack, fleet.a.engine_log())
            agent.heartbeat(request_commands=False)
            row = controller.last_residency(MODEL_ID)
            assert row is not None and row["state"] == "ready" and row["split_term"] == 1
            assert controller.refused == []
        finally:
            agent.close()


def test_a_restarted_node_stops_a_recorded_coordinator_instead_of_adopting_it(
    fleet: Fleet, tmp_path: Path, shared_artifacts: Path, llama_binary: Path
) -> None:
    pid, ports = warmed(fleet)
    fleet.a.executor.stop()
    fleet.a.parts.actuator.links.close_all()  # the old node process's forwarders die with it
    restarted = build_parts(
        tmp_path / "a-node", shared_artifacts, llama_binary, fleet.a.parts.ports
    )
    try:
        notes = restarted.actuator.recover()
        assert notes == [f"{MODEL_ID}: split coordinator {pid} stopped, not adopted "
                         "(its forwarders died)"]  # fmt: skip
        assert gone(pid)
        record = restarted.store.residency(MODEL_ID)
        assert record is not None and record.state is ResidencyState.CACHED
        assert record.pid is None and record.split_term is None
        assert restarted.actuator.links.models() == () and not set(ports) & listening_ports()
    finally:
        restarted.store.close()


def test_a_coordinator_child_that_dies_takes_its_forwarders(fleet: Fleet) -> None:
    pid, ports = warmed(fleet)
    record = fleet.a.parts.store.residency(MODEL_ID)
    assert record is not None and record.identity is not None
    assert signal_proven(record.identity, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while check_identity(record.identity) is not Liveness.DEAD and time.monotonic() < deadline:
        fleet.a.parts.runtime.reap()
        time.sleep(0.05)
    fleet.a.parts.actuator.refresh()
    after = fleet.a.parts.store.residency(MODEL_ID)
    assert after is not None and after.state is ResidencyState.FAILED and after.pid is None
    assert fleet.a.parts.actuator.links.models() == () and not set(ports) & listening_ports()
    assert gone(pid)


def test_a_coordinator_failing_its_health_probe_loses_its_forwarders(fleet: Fleet) -> None:
    pid, ports = warmed(fleet)
    record = fleet.a.parts.store.residency(MODEL_ID)
    assert record is not None and record.identity is not None
    assert signal_proven(record.identity, signal.SIGSTOP)  # alive, but answers nothing
    try:
        # the stop reaches each of the engine's threads when it is next scheduled: probe
        # only once every thread is stopped, or a thread still running answers the first
        def states() -> set[str]:
            found = set()
            for thread in psutil.Process(pid).threads():
                with contextlib.suppress(psutil.NoSuchProcess):  # a thread that just ended
                    found.add(psutil.Process(thread.id).status())
            return found

        deadline = time.monotonic() + 30
        while states() != {psutil.STATUS_STOPPED} and time.monotonic() < deadline:
            time.sleep(0.05)
        assert states() == {psutil.STATUS_STOPPED}, states()
        for _ in range(HEALTH_FAILURES_BEFORE_FAILED):
            fleet.a.parts.actuator.refresh()
        after = fleet.a.parts.store.residency(MODEL_ID)
        failures = fleet.a.parts.actuator._health_failures  # the probe's count, if it fails
        assert after is not None and after.state is ResidencyState.FAILED, (after, failures)
        assert after.message == "health_check_failed" and after.pid == pid
        assert fleet.a.parts.actuator.links.models() == () and not set(ports) & listening_ports()
    finally:
        signal_proven(record.identity, signal.SIGCONT)


def test_a_stopping_node_stops_the_coordinator_and_closes_its_forwarders(fleet: Fleet) -> None:
    pid, ports = warmed(fleet)
    notes = fleet.a.parts.actuator.shutdown(idle_timeout=5)
    assert notes == [f"{MODEL_ID}: pid {pid} stopped"]
    assert gone(pid) and fleet.a.parts.actuator.links.models() == ()
    assert not set(ports) & listening_ports()


def _nothing_started(fleet: Fleet) -> None:
    assert fleet.a.parts.actuator.links.models() == ()
    record = fleet.a.parts.store.residency(MODEL_ID)
    assert record is None or record.pid is None
    engines = [p for p in psutil.Process().children(recursive=True)
               if "llama-server" in p.name() and not gone(p.pid)]  # fmt: skip
    assert engines == []


def test_a_replayed_warm_of_a_superseded_term_is_refused_stale_term(fleet: Fleet) -> None:
    fleet.claim(1)
    old = fleet.serve(1)
    newer = fleet.a_stage.stages.offer(stage_claim(2, 0), now_ms())  # A's book takes term 2
    assert newer.decision.accepted and newer.decision.supersedes_term == 1
    replay = fleet.a.warm(old)
    assert (replay.status, replay.reason) == ("rejected", "stale_term"), replay.message
    _nothing_started(fleet)


@pytest.mark.parametrize(
    ("change", "reason", "words"),
    [
        (lambda s: {**s, "stages": s["stages"][:1]}, "malformed_command", "/stages"),
        (lambda s: {**s, "stages": [s["stages"][0], {**s["stages"][1], "layer_start": 10}]},
         "malformed_command", "/split_serve/stages/1/layer_start"),
        (lambda s: {**s, "stages": [{**s["stages"][0], "endpoint": "127.0.0.1:99999"},
                                    s["stages"][1]]},
         "malformed_command", "/split_serve/stages/0/endpoint"),
        (lambda s: {**s, "claim": {**s["claim"], "run_id": "run-9"}}, "topology_run_mismatch",
         "load fence"),
        (lambda s: {**s, "claim": {**s["claim"], "coordinator_term": 5}}, "term_mismatch",
         "load fence"),
        (lambda s: {**s, "claim": {**s["claim"], "manifest_sha256": "cd" * 32}}, "missing_claim",
         "load fence"),
        (lambda s: {**s, "claim": {**s["claim"], "coordinator_id": "host-b"}}, "not_coordinator",
         "host-b"),
        (lambda s: {**s, "stages": [{**s["stages"][0], "layer_end": 8},
                                    {**s["stages"][1], "layer_start": 8}]},
         "stage_mismatch", "stage 1 of 2"),
    ],
)  # fmt: skip
def test_a_warm_the_fence_or_the_wire_refuses_starts_nothing(
    fleet: Fleet, change: Any, reason: str, words: str
) -> None:
    fleet.claim(1)
    refused = fleet.a.warm(change(fleet.serve(1)))
    assert (refused.status, refused.reason) == ("rejected", reason), refused.message
    assert words in refused.message
    _nothing_started(fleet)


def test_a_host_without_a_stage_host_cannot_coordinate(
    tmp_path: Path, shared_artifacts: Path, llama_binary: Path
) -> None:
    parts = build_parts(tmp_path / "plain", shared_artifacts, llama_binary, free_port_range())
    plain = Coordinator(parts, None)
    try:
        serve = split_serve(1, ["127.0.0.1:40001", "127.0.0.1:40002"])
        refused = plain.warm(serve)
        assert (refused.status, refused.reason) == ("rejected", "no_stage_host")
        assert parts.actuator.links.models() == () and parts.store.residency(MODEL_ID) is None
    finally:
        plain.executor.stop()
        parts.store.close()


def test_the_residency_keeps_its_split_term_across_a_reopened_store(tmp_path: Path) -> None:
    from gridctl.node.records import ResidencyRecord

    store = NodeStateStore(tmp_path / "node.sqlite3")
    store.put_residency(ResidencyRecord(MODEL_ID, ResidencyState.READY, 640, split_term=7))
    store.put_residency(replace(ResidencyRecord("whole", ResidencyState.CACHED)))
    store.close()
    reopened = NodeStateStore(tmp_path / "node.sqlite3")
    try:
        terms = {r.model_id: r.split_term for r in reopened.residencies()}
        assert terms == {MODEL_ID: 7, "whole": None}
    finally:
        reopened.close()
