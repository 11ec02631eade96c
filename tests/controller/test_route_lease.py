"""The policy's ``route_lease_seconds`` is the live controller's route lease.

A route stays live for the lease after its host's last heartbeat and its last
probe; the controller reads the lease from the revision in force, as the lab
and the delivery rule do, so a policy that shortens it drops a silent host's
routes sooner, and a new revision changes it without a restart. The controller
is the real one in-process behind its real app; the node speaks the real wire
protocol (``tests.controller.simnodes``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, sim_service, watched_dir
from tests.controller.test_http_flow import POLICY, converge, profile

pytestmark = pytest.mark.anyio


def policy(lease: float | None) -> str:
    extra = "  heartbeat_stale_seconds: 300\n"  # the host stays placeable: only the lease ends
    if lease is not None:
        extra += f"  route_lease_seconds: {lease}\n  destructive_min_route_lease_seconds: 5\n"
    return POLICY + extra


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[tuple[ControllerService, Clock, Path]]:
    watch = watched_dir(tmp_path, {"gemma.yaml": profile("gemma", 1, 1), "policy.yaml": policy(20)})
    service, clock = sim_service(tmp_path, watch_dir=watch)
    app = service.build_app()
    service.start_ticking()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            tmp_path / "state", "local-1", client, clock, cached={"gemma": GEMMA_SHA}
        )
        await node.register()
        await converge(service, [node])
        assert [r.host_id for r in service.registry.routable("gemma", clock())] == ["local-1"]
        yield service, clock, watch
    service.stop_ticking()


def routable(service: ControllerService, clock: Clock) -> list[str]:
    return [r.host_id for r in service.registry.routable("gemma", clock())]


async def test_a_silent_host_routes_for_the_policys_lease_and_no_longer(rig: tuple) -> None:
    service, clock, _watch = rig
    start = clock()
    left = service.registry.route_lease_left("gemma", "local-1", start)
    assert 0 < left <= 20
    clock.now = start + left - 0.5
    assert routable(service, clock) == ["local-1"]
    clock.now = start + left + 0.5  # the default lease (60 s) would still route here
    assert routable(service, clock) == []


async def test_a_new_revision_changes_the_lease_without_a_restart(rig: tuple) -> None:
    service, clock, watch = rig
    start = clock()
    (watch / "policy.yaml").write_text(policy(40))
    assert service.source is not None
    service.source.reload()
    assert service.registry.route_lease_seconds == 40.0
    clock.now = start + 30  # past the old lease of 20 s
    assert routable(service, clock) == ["local-1"]
    assert 9 <= service.registry.route_lease_left("gemma", "local-1", clock()) <= 10
    clock.now = start + 41
    assert routable(service, clock) == []
