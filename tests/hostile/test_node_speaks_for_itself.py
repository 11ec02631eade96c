"""A node's credential lets it speak only for its own host, and only forward in time.

The real controller app in-process (ASGI) with simulated nodes, each holding a
credential for its own host id: another host's action acknowledged, a row naming
another host, and replayed or stripped reports are refused and change nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import GEMMA_SHA, ONE_GEMMA, SimNode, sim_service

pytestmark = pytest.mark.anyio


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ControllerService]:
    service, _clock = sim_service(tmp_path, ONE_GEMMA)
    yield service


def client(service: ControllerService) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    )


def node(service: ControllerService, host_id: str, http: httpx.AsyncClient, **kw: Any) -> SimNode:
    clock = service.options.clock
    return SimNode.for_controller(service.options.state_dir, host_id, http, clock, **kw)


async def post_heartbeat(sim: SimNode, **extra: Any) -> httpx.Response:
    body = {
        "node_id": sim.host_id,
        "resources": sim.resources(),
        "allocator": sim.envelope(),
        "request_commands": False,
        **extra,
    }
    return await sim.client.post(f"/nodes/{sim.host_id}/heartbeat", json=body, headers=sim.headers)


async def pending_action_of(service: ControllerService, sim: SimNode) -> str:
    """Register ``sim`` with gemma cached and tick until a command for it is pending."""
    assert (await sim.register()).status_code == 200
    await post_heartbeat(sim)
    service.controller.tick()
    pending = [p for p in service.controller.store.pending() if p.action.host_id == sim.host_id]
    assert pending, "the controller planned nothing for the node"
    return pending[0].action.action_id


async def test_acknowledging_another_hosts_action_is_refused_counted_and_logged_once(
    service: ControllerService, caplog: pytest.LogCaptureFixture
) -> None:
    async with client(service) as http:
        victim = node(service, "host-a", http, cached={"gemma": GEMMA_SHA})
        intruder = node(service, "host-b", http)
        action_id = await pending_action_of(service, victim)
        assert (await intruder.register()).status_code == 200
        events_before = len(service.controller.events)
        forged = {"action_id": action_id, "status": "rejected", "message": "not mine"}
        with caplog.at_level(logging.WARNING, logger="gridctl.controller.hostclaims"):
            for _ in range(3):
                answer = await post_heartbeat(intruder, acknowledgements=[forged])
                assert answer.status_code == 200, answer.text
    still = {p.action.action_id for p in service.controller.store.pending()}
    assert action_id in still  # neither rejected nor finished
    assert len(service.controller.events) == events_before  # no event was written
    assert service.controller.store.foreign_claims.snapshot() == {
        ("host-b", "host-a", "acknowledgement"): 3
    }
    refusals = [r for r in caplog.records if "host-b" in r.getMessage()]
    assert len(refusals) == 1  # logged once, counted every time
    async with client(service) as http:
        metrics = (await http.get("/metrics")).text
    assert (
        'gridctl_foreign_claims_refused_total{kind="acknowledgement",owner="host-a",'
        'sender="host-b"} 3.0'
    ) in metrics


async def test_the_owner_still_finishes_its_own_action(service: ControllerService) -> None:
    async with client(service) as http:
        owner = node(service, "host-a", http, cached={"gemma": GEMMA_SHA})
        action_id = await pending_action_of(service, owner)
        done = {"action_id": action_id, "status": "failed", "message": "own failure"}
        assert (await post_heartbeat(owner, acknowledgements=[done])).status_code == 200
    assert action_id not in {p.action.action_id for p in service.controller.store.pending()}
    assert service.controller.store.foreign_claims.snapshot() == {}


async def test_a_residency_or_transfer_naming_another_host_is_refused_whole(
    service: ControllerService,
) -> None:
    async with client(service) as http:
        sim = node(service, "host-b", http)
        assert (await sim.register()).status_code == 200
        before = service.registry.host("host-b")
        envelope = sim.envelope()
        envelope["residencies"] = [
            {"model_id": "gemma", "memory_mb": 640, "state": "ready", "host_id": "host-a"}
        ]
        answer = await http.post(
            "/nodes/host-b/heartbeat",
            headers=sim.headers,
            json={"node_id": "host-b", "allocator": envelope, "request_commands": False},
        )
        assert answer.status_code == 403
        assert answer.json()["error"]["pointer"] == "/allocator/residencies/0/host_id"
        envelope = sim.envelope()
        envelope["transfers"] = [
            {"model_id": "gemma", "artifact_sha256": GEMMA_SHA, "bytes_done": 1, "host_id": "x-1"}
        ]
        answer = await http.post(
            "/nodes/host-b/heartbeat",
            headers=sim.headers,
            json={"node_id": "host-b", "allocator": envelope, "request_commands": False},
        )
        assert answer.status_code == 403
        own = sim.envelope()
        own["residencies"] = [
            {"model_id": "m", "memory_mb": 1, "state": "cached", "host_id": "host-b"}
        ]
        fine = await http.post(
            "/nodes/host-b/heartbeat",
            headers=sim.headers,
            json={"node_id": "host-b", "allocator": own, "request_commands": False},
        )
        assert fine.status_code == 200, fine.text
    assert before is not None
    counts = service.registry.foreign_claims.snapshot()
    assert counts == {("host-b", "host-a", "residency"): 1, ("host-b", "x-1", "transfer"): 1}


async def test_replayed_overtaken_and_stripped_heartbeats_are_409_and_change_nothing(
    service: ControllerService,
) -> None:
    clock = service.options.clock
    async with client(service) as http:
        sim = node(service, "host-a", http)
        assert (await sim.register()).status_code == 200
        assert (await post_heartbeat(sim, boot_id="boot1", sequence=5)).status_code == 200
        clock.now += 1  # type: ignore[attr-defined]
        seen = service.registry.host("host-a")
        assert seen is not None
        sim.state = "draining"  # what a replay would overwrite, if it were applied
        for stale in (
            {"boot_id": "boot1", "sequence": 5},  # the same report again
            {"boot_id": "boot1", "sequence": 4},  # overtaken by a newer one
            {},  # the fields stripped off
        ):
            answer = await post_heartbeat(sim, **stale)
            assert answer.status_code == 409, (stale, answer.text)
            after = service.registry.host("host-a")
            assert after is not None and after.last_heartbeat == seen.last_heartbeat
            assert after.state == seen.state
        assert (await post_heartbeat(sim, boot_id="boot1", sequence=6)).status_code == 200
        # the node restarted: a new boot starts its own sequence, the old boot is over
        assert (await post_heartbeat(sim, boot_id="boot2", sequence=1)).status_code == 200
        old = await post_heartbeat(sim, boot_id="boot1", sequence=99)
        assert old.status_code == 409
        assert old.json()["error"]["pointer"] == "/boot_id"


async def test_a_boot_id_needs_its_sequence(service: ControllerService) -> None:
    async with client(service) as http:
        sim = node(service, "host-a", http)
        assert (await sim.register()).status_code == 200
        answer = await post_heartbeat(sim, boot_id="boot1")
        assert answer.status_code == 400
        assert "sequence" in answer.json()["error"]["message"]
