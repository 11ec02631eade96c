"""A route that just appeared is probed soon, not at the probe loop's next period: a
replica that became ready is corroborated (so routable) without waiting a whole period,
and a route seen before is no reason to probe early."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, SimResidency, engine_handler
from tests.controller.test_http_flow import POLICY, profile

pytestmark = pytest.mark.anyio
DEADLINE = 30.0


async def test_a_new_route_is_corroborated_long_before_the_next_probe_period(
    tmp_path: Path,
) -> None:
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "gemma.yaml").write_text(profile("gemma"))
    (watch / "policy.yaml").write_text(POLICY)
    clock = Clock()
    probed: list[str] = []

    def engine(request: httpx.Request) -> httpx.Response:
        probed.append(request.url.path)
        return engine_handler(request)

    service = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            watch_dir=watch,
            clock=clock,
            probe_interval=3600.0,  # the periodic pass alone would never get there
            upstream_transport=httpx.MockTransport(engine),
        )
    )
    app = service.build_app()
    registry = service.registry
    async with app.router.lifespan_context(app):
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c")
        async with client:
            node = SimNode.for_controller(service.options.state_dir, "local-1", client, clock)
            assert (await node.register()).status_code == 200
            await node.heartbeat(request_commands=False)
            assert registry.routable("gemma", clock()) == []  # no replica yet
            node.residencies["gemma"] = SimResidency("gemma", 640, "ready", GEMMA_SHA, clock())
            added = registry.routes_added
            await node.heartbeat(request_commands=False)
            assert registry.routes_added == added + 1
            end = time.monotonic() + DEADLINE
            while not registry.routable("gemma", clock()) and time.monotonic() < end:
                await asyncio.sleep(0.05)
            (route,) = registry.routable("gemma", clock())
            assert route.host_id == "local-1" and route.corroborated_at == clock()
            assert probed, "the engine was never probed"
            # the same route again is no news: nothing wakes the loop early for it
            await node.heartbeat(request_commands=False)
            assert registry.routes_added == added + 1
            assert registry.routable("gemma", clock()) != []


async def test_a_new_route_wakes_the_probe_loop_at_once(tmp_path: Path) -> None:
    """The probe loop does not look for new routes on a period: the registry's wake-up
    is set up while the loop runs, fires when a route appears, and is gone after."""
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "gemma.yaml").write_text(profile("gemma"))
    (watch / "policy.yaml").write_text(POLICY)
    clock = Clock()
    service = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            watch_dir=watch,
            clock=clock,
            probe_interval=3600.0,
            upstream_transport=httpx.MockTransport(engine_handler),
        )
    )
    app = service.build_app()
    registry = service.registry
    woken: list[int] = []
    async with app.router.lifespan_context(app):
        end = time.monotonic() + DEADLINE
        while registry.on_route_added is None and time.monotonic() < end:
            await asyncio.sleep(0.01)
        wake = registry.on_route_added
        assert wake is not None, "the probe loop installed no wake-up"

        def counted() -> None:
            woken.append(registry.routes_added)
            wake()

        registry.on_route_added = counted
        client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://c")
        async with client:
            node = SimNode.for_controller(service.options.state_dir, "local-1", client, clock)
            assert (await node.register()).status_code == 200
            await node.heartbeat(request_commands=False)
            assert woken == []  # no route, no wake-up
            node.residencies["gemma"] = SimResidency("gemma", 640, "ready", GEMMA_SHA, clock())
            await node.heartbeat(request_commands=False)
            assert woken == [registry.routes_added]
            while not registry.routable("gemma", clock()) and time.monotonic() < end:
                await asyncio.sleep(0.05)
            assert registry.routable("gemma", clock()) != []
    assert registry.on_route_added is None  # the loop stopped: nothing left to wake
