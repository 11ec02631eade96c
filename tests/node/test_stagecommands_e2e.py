"""Split claims and stops arrive as fenced commands and end as receipts (real processes).

Each command goes the way a controller's command goes on a node: the wire schema and
the controller fence at intake (``CommandIntake``), then the executor's worker thread
(``CommandExecutor``), which hands split kinds to the stage host. The stage server and
its tunnel are real processes; the receipt is what the controller would read back.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from gridctl.config.schemas import validator
from gridctl.domain.states import HostState
from gridctl.node.executor import CommandExecutor
from gridctl.node.intake import CommandIntake
from gridctl.node.records import Receipt
from gridctl.node.reports import allocator_envelope
from gridctl.node.stagehost import StageHost, StageHostSettings
from gridctl.node.statestore import NodeStateStore
from tests.node.controller_harness import wire_command
from tests.node.stage_certs import fleet_ca, fleet_identity
from tests.node.test_actuator import actuator
from tests.node.test_rpc_engine_e2e import _stage_server
from tests.node.test_stageclaims import NOW, gemma_claim, stop_of

pytestmark = pytest.mark.e2e

HOST = "host-a"
_TERMINAL = ("succeeded", "failed", "rejected", "cancelled")


class Node:
    """A node's intake and executor over one store, with or without a stage host."""

    def __init__(self, tmp_path: Path, stages: bool) -> None:
        self.act = actuator(tmp_path)
        self.store: NodeStateStore = self.act.store
        self.stages: StageHost | None = None
        if stages:
            ca = fleet_ca(tmp_path / "ctl")
            identity = fleet_identity(ca, tmp_path / "stage", HOST, ["127.0.0.1"])
            settings = StageHostSettings(_stage_server(), identity, "127.0.0.1", tmp_path / "l")
            self.stages = StageHost(self.store, settings)
        wall = lambda: NOW / 1000  # noqa: E731 - the claims' lease clock, in seconds
        self.intake = CommandIntake(self.store, HOST, clock=wall)
        self.executor = CommandExecutor(
            self.act, lambda: HostState.ACCEPTING, clock=wall, stages=self.stages
        )
        self.executor.start()
        self.sent = 0

    def send(self, kind: str, **fields: Any) -> Receipt:
        self.sent += 1
        action_id = f"{kind}-{self.sent}"
        command = {**wire_command("drain", "gemma", HOST, action_id), "kind": kind, **fields}
        admitted = self.intake.admit(command, remaining_ttl=30, request_duration=0)
        if admitted is not None:
            self.executor.submit(admitted)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            receipt = self.store.receipt(action_id)
            if receipt is not None and receipt.status in _TERMINAL:
                return receipt
            self.executor.changed.wait(0.05)
            self.executor.changed.clear()
        raise AssertionError(f"{action_id} did not finish: {self.store.receipt(action_id)}")

    def stage_pids(self) -> list[int]:
        assert self.stages is not None
        return [r.server.pid for r in self.stages.running().values()]

    def close(self) -> None:
        self.executor.stop()
        if self.stages is not None:
            self.stages.close()
        self.store.close()


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    made = Node(tmp_path, stages=True)
    try:
        yield made
    finally:
        made.close()


def test_a_claim_starts_the_stage_and_a_stale_replay_is_refused_by_name(node: Node) -> None:
    first = node.send("split_claim", split_claim=gemma_claim(1).as_json())
    assert (first.status, first.reason) == ("succeeded", ""), first.message
    assert first.message.startswith("stage 2 of 2, layers 9-17, term 1 via 127.0.0.1:")
    (pid_1,) = node.stage_pids()

    second = node.send("split_claim", split_claim=gemma_claim(2, topology="t2").as_json())
    assert second.status == "succeeded", second.message
    (pid_2,) = node.stage_pids()
    assert pid_2 != pid_1 and not psutil.pid_exists(pid_1)  # the newer term replaced it

    replay = node.send("split_claim", split_claim=gemma_claim(1).as_json())
    assert (replay.status, replay.reason) == ("rejected", "stale_term")
    assert node.stage_pids() == [pid_2]  # the old term's late command changed nothing

    old_stop = node.send("split_release", split_stop=_stop(gemma_claim(2), term=1))
    assert (old_stop.status, old_stop.reason) == ("rejected", "stale_term")
    assert node.stage_pids() == [pid_2]

    stop = node.send("split_release", split_stop=_stop(gemma_claim(2)))
    assert stop.status == "succeeded", stop.message
    assert node.stage_pids() == []
    assert not psutil.pid_exists(pid_2) or psutil.Process(pid_2).status() == "zombie"


def test_malformed_and_mismatched_commands_change_nothing(node: Node) -> None:
    missing = node.send("split_claim")  # the schema requires the claim for this kind
    assert (missing.status, missing.reason) == ("rejected", "malformed_command")

    wrong_stage = gemma_claim(1).as_json()
    wrong_stage["stage"] = {"index": 5, "count": 2, "layer_start": 0, "layer_end": 9}
    bad = node.send("split_claim", split_claim=wrong_stage)
    assert (bad.status, bad.reason) == ("rejected", "malformed_command")
    assert "/stage/index" in bad.message

    other = gemma_claim(1).as_json()
    other["claim"] = {**other["claim"], "model_id": "other-model"}  # type: ignore[dict-item]
    mismatch = node.send("split_claim", split_claim=other)
    assert (mismatch.status, mismatch.reason) == ("rejected", "model_mismatch")
    assert node.stage_pids() == [] and node.stages is not None and node.stages.book.held() == ()


def test_a_node_without_a_stage_server_refuses_both_and_does_not_advertise_them(
    tmp_path: Path,
) -> None:
    plain = Node(tmp_path, stages=False)
    try:
        claim = plain.send("split_claim", split_claim=gemma_claim(1).as_json())
        stop = plain.send("split_release", split_stop=_stop(gemma_claim(1)))
        assert (claim.status, claim.reason) == ("rejected", "no_stage_host")
        assert (stop.status, stop.reason) == ("rejected", "no_stage_host")
    finally:
        plain.close()


@pytest.mark.parametrize("stage_host", [False, True])
def test_the_heartbeat_advertises_split_capabilities_only_on_a_stage_host(
    stage_host: bool,
) -> None:
    envelope = allocator_envelope(
        HostState.ACCEPTING,
        [],
        [],
        NOW / 1000,
        endpoint_of=lambda _r: None,
        engine_api_key="k",
        max_concurrency=1,
        stage_host=stage_host,
    )
    errors = list(validator("wire/allocator-envelope.schema.json").iter_errors(envelope))
    assert errors == []
    capabilities = envelope["actuator_capabilities"]
    assert isinstance(capabilities, list)
    assert ("split_claim" in capabilities) is stage_host
    assert ("split_release" in capabilities) is stage_host


def _stop(claim: Any, term: int | None = None) -> dict[str, object]:
    stop = stop_of(claim, term)
    return {
        "model_id": stop.model_id,
        "package_ref": stop.package_ref,
        "manifest_sha256": stop.manifest_sha256,
        "coordinator_id": stop.coordinator_id,
        "coordinator_term": stop.coordinator_term,
    }
