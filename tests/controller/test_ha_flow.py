"""Two controllers in-process on one PostgreSQL database, with a node speaking the wire.

The follower answers heartbeats with the leader's address and never enqueues
or delivers; when the leader stops renewing, the follower takes the next term
and continues the leader's work from the shared store without repeating it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.controller.stores.postgres import PostgresLocation
from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, engine_handler

from .test_http_flow import profile

POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
    "spec:\n  mode: automatic\n  controller_lease_seconds: 3\n"
)


def _wait(what: str, probe: Any, deadline: float = 20.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def pair(tmp_path: Path, pg_location: PostgresLocation) -> Iterator[Any]:
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "gemma.yaml").write_text(profile("gemma", max_replicas=1))
    (watch / "policy.yaml").write_text(POLICY)
    clock = Clock()
    services = []
    for port in (22901, 22902):
        service = ControllerService(
            ServiceOptions(
                state_dir=tmp_path / "state",  # shared credentials; the state is in PostgreSQL
                watch_dir=watch,
                port=port,
                clock=clock,
                upstream_transport=httpx.MockTransport(engine_handler),
                store=pg_location,
            )
        )
        service.build_app()
        services.append(service)
    yield services, clock, tmp_path / "state"
    for service in services:
        service.stop_ticking()


def _crash(service: ControllerService) -> None:
    """Stop ticking and renewing without handing the lease back (as a killed process)."""
    service._stop.set()
    service.controller.wake.set()
    for thread in (service._tick_thread, service._renew_thread):
        if thread is not None:
            thread.join(timeout=30)
    service._tick_thread = service._renew_thread = None
    service.lease = None  # so the fixture's stop cannot release it either


@pytest.mark.anyio
async def test_follower_redirects_then_takes_over_and_continues_without_repeating(
    pair: Any,
) -> None:
    (leader, follower), clock, state_dir = pair
    assert (
        leader.controller.steering.holds_authority() and follower.controller.steering.is_follower()
    )
    term = leader.controller.authority.term
    leader.start_ticking()
    follower.start_ticking()
    apps = [httpx.ASGITransport(app=s.build_app()) for s in (leader, follower)]
    async with (
        httpx.AsyncClient(transport=apps[0], base_url="http://a") as to_leader,
        httpx.AsyncClient(transport=apps[1], base_url="http://b") as to_follower,
    ):
        node = SimNode.for_controller(
            state_dir, "local-1", to_follower, clock, cached={"gemma": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        for _ in range(3):
            answer = await node.heartbeat()
            assert answer["allocator"]["leader_url"] == "http://127.0.0.1:22901"
            assert answer["allocator"]["commands"] == []
        assert follower.store.pending() == () and node.executed == []

        node.client = to_leader
        assert (await node.register()).status_code == 200
        _wait("the leader to issue", lambda: leader.store.pending())
        for _ in range(5):
            answer = await node.heartbeat()
            assert "leader_url" not in answer["allocator"]
            if node.executed:
                break
        assert [c["kind"] for c in node.executed] == ["warm"]
        assert node.executed[0]["controller_term"] == term
        # a request the leader's router saw becomes outcome evidence in the shared store
        leader.controller.demand.observe(
            RequestObservation(clock(), "chat", "gemma", "gemma", "local-1", "ok", 200, 0.4)
        )
        leader.controller.mark_dirty()
        evidence = _wait("evidence in the store", lambda: leader.store.evidence())
        assert not follower.controller.demand.evidence_bodies()
        # its demand bucket too; the follower's own router saw unbound coding work
        _wait("demand rows in the store", lambda: leader.store.demand_rows())
        follower.controller.demand.observe(
            RequestObservation(
                clock(), "chat", None, None, None, "rejected", 503, 0.1, workload="coding"
            )
        )

        _crash(leader)  # the warm's acknowledgement has not reached anyone yet
        taken = _wait("the follower to take over", follower.controller.steering.holds_authority)
        assert taken and follower.controller.authority.term == term + 1
        assert set(follower.controller.demand.evidence_bodies()) == set(evidence)
        # the leader's learned demand is laid over the follower's own
        assert follower.controller.demand.series_sizes() == {"gemma": 1}
        assert [w.workload for w in follower.controller.demand.picture(clock()).workloads] == [
            "coding"
        ]
        _wait("the old leader to stop", lambda: not leader.controller.steering.holds_authority())
        assert leader.controller.commands_for("local-1") == []

        node.client = to_follower
        for _ in range(4):
            answer = await node.heartbeat()
            assert "leader_url" not in answer["allocator"]
        assert [c["kind"] for c in node.executed] == ["warm"]  # nothing ran twice
        (entry,) = [h for h in follower.store.history() if h.kind.value == "warm"]
        assert entry.status.value == "succeeded"
        assert follower.store.pending() == ()
