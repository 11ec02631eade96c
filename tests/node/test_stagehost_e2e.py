"""A stage host runs ggml-rpc-server exactly while it holds an accepted claim (real processes).

The stage server must listen on 127.0.0.1 and nowhere else, the TLS tunnel opens and
closes with the claim, a newer term replaces the process, a stale one changes
nothing, and a restarted node brings back what its persisted claims say.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from gridctl.node.stagehost import RunningStage, StageHost, StageHostSettings
from gridctl.node.stageservers import listening_addresses
from gridctl.node.statestore import NodeStateStore
from tests.node.stage_certs import fleet_ca, fleet_identity
from tests.node.test_rpc_engine_e2e import _stage_server
from tests.node.test_stageclaims import HOUR_MS, NOW, gemma_claim, stop_of

pytestmark = pytest.mark.e2e


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _stage_servers_of_this_test() -> list[psutil.Process]:
    me = psutil.Process()
    return [p for p in me.children(recursive=True) if "ggml-rpc-server" in p.name()]


def _refuses_connections(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except OSError:
        return True
    return False


def _only(host: StageHost) -> RunningStage:
    (running,) = host.running().values()
    return running


@pytest.fixture
def settings(tmp_path: Path) -> StageHostSettings:
    ca = fleet_ca(tmp_path / "ctl")
    identity = fleet_identity(ca, tmp_path / "stage", "stage-a", ["127.0.0.1"])
    return StageHostSettings(_stage_server(), identity, "127.0.0.1", tmp_path / "logs")


@pytest.fixture
def host(tmp_path: Path, settings: StageHostSettings) -> Iterator[StageHost]:
    store = NodeStateStore(tmp_path / "node.db")
    stage_host = StageHost(store, settings)
    try:
        yield stage_host
    finally:
        stage_host.close()
        store.close()


def test_the_stage_server_runs_only_under_an_accepted_claim(host: StageHost) -> None:
    refused = host.offer(gemma_claim(1, lease_ms=-1), NOW)  # an expired lease is refused
    assert refused.decision.reason == "expired_lease"
    assert host.running() == {} and _stage_servers_of_this_test() == []

    host.offer(gemma_claim(1), NOW)
    first = _only(host)
    assert listening_addresses(first.server.pid) == [("127.0.0.1", first.server.port)]
    assert first.advertised[0] == "127.0.0.1" and not _refuses_connections(first.advertised[1])

    stale = host.offer(gemma_claim(1, topology="t9"), NOW + 1)
    assert stale.decision.reason == "conflicting_same_term" and _only(host) == first

    host.offer(gemma_claim(2, topology="t2"), NOW + 2)  # supersedes: a new process
    second = _only(host)
    assert _gone(first.server.pid) and _refuses_connections(first.advertised[1])
    assert second.server.pid != first.server.pid
    assert host.offer(gemma_claim(1), NOW + 3).decision.reason == "stale_term"
    assert host.release(stop_of(gemma_claim(1)), NOW + 3).reason == "stale_term"
    assert _only(host) == second

    assert host.release(stop_of(gemma_claim(2, topology="t2")), NOW + 4).accepted
    assert host.running() == {} and _gone(second.server.pid)
    assert _refuses_connections(second.advertised[1])
    assert _stage_servers_of_this_test() == []


def test_a_restarted_node_resumes_live_claims_and_stops_expired_ones(
    tmp_path: Path, host: StageHost, settings: StageHostSettings
) -> None:
    host.offer(gemma_claim(3), NOW)
    host.close()  # the node stops; its claim stays persisted

    store = NodeStateStore(tmp_path / "node.db")
    again = StageHost(store, settings)
    try:
        again.resume(NOW + HOUR_MS)
        resumed = _only(again)
        assert resumed.stage_claim == gemma_claim(3)
        assert listening_addresses(resumed.server.pid) == [("127.0.0.1", resumed.server.port)]
        assert again.expire(NOW + 4 * HOUR_MS + 1) == (gemma_claim(3),)
        assert again.running() == {} and _gone(resumed.server.pid)
        assert again.offer(gemma_claim(2), NOW).decision.reason == "stale_term"
    finally:
        again.close()
        store.close()


def test_a_killed_nodes_stage_server_is_stopped_and_replaced_on_resume(
    tmp_path: Path, host: StageHost, settings: StageHostSettings
) -> None:
    host.offer(gemma_claim(4), NOW)
    orphan = _only(host)  # the node "dies" here: nothing of it is closed

    store = NodeStateStore(tmp_path / "node.db")
    again = StageHost(store, settings)
    try:
        again.resume(NOW + 1)
        orphan.server.process.wait(timeout=10)  # stopped by the resumed node, reaped here
        replacement = _only(again)
        assert replacement.server.pid != orphan.server.pid
        assert listening_addresses(replacement.server.pid) == [
            ("127.0.0.1", replacement.server.port)
        ]
    finally:
        orphan.tunnel.close()
        host._running.clear()  # the dead node's handles: its process is already gone
        again.close()
        store.close()


def test_a_stage_server_that_dies_stops_being_served_and_its_claim_still_fences(
    host: StageHost,
) -> None:
    host.offer(gemma_claim(5), NOW)
    first = _only(host)
    assert host.reap() == ()  # alive: nothing to reap
    first.server.process.kill()
    first.server.process.wait(timeout=10)
    assert host.reap() == (gemma_claim(5),)
    assert host.running() == {} and host.observed() == ()
    assert _refuses_connections(first.advertised[1])  # its tunnel is closed
    # the claim is still the accepted one: an older term is refused, a newer one serves
    assert host.offer(gemma_claim(4), NOW + 1).decision.reason == "stale_term"
    host.offer(gemma_claim(6, topology="t6"), NOW + 2)
    replacement = _only(host)
    assert replacement.server.pid != first.server.pid
    assert replacement.stage_claim.claim.coordinator_term == 6
