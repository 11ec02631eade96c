"""What keeps one controller serving a large fleet: unchanged heartbeats do not dirty
the plan, control polls wait without threads, status and 503 reasons are built once
per revision, and a credential's signature is checked once (the real app, in process)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from starlette.routing import Match, Route, Router

import gridctl.controller.app as app_module
import gridctl.controller.joining as joining_module
from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import (
    GEMMA_SHA,
    Clock,
    SimNode,
    SimResidency,
    sim_service,
)
from tests.controller.test_http_flow import POLICY, profile

pytestmark = pytest.mark.anyio


@pytest.fixture
def quiet(tmp_path: Path) -> Iterator[tuple[ControllerService, httpx.AsyncClient, Clock]]:
    """The real service and app with no tick thread: the test decides when ticks run."""
    service, clock = sim_service(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    )
    yield service, client, clock


def node(service: ControllerService, client: httpx.AsyncClient, clock: Clock, i: int) -> SimNode:
    return SimNode.for_controller(
        service.options.state_dir, f"local-{i}", client, clock, failure_domain=f"zone-{i}"
    )


async def test_an_unchanged_heartbeat_is_covered_by_the_last_tick_without_another(
    quiet: Any,
) -> None:
    service, client, clock = quiet
    ctl = service.controller
    async with client:
        host = node(service, client, clock, 1)
        await host.register()
        await host.heartbeat(request_commands=False)
        ctl.tick()
        ticks = ctl.view.ticks
        ctl.wake.clear()
        before = ctl.revisions.snapshot()
        answer = await host.heartbeat(request_commands=True)  # polls: answered at once
        assert [c["kind"] for c in answer["allocator"]["commands"]] == ["load"]
        assert ctl.revisions["dirty"] == before["dirty"] + 1  # the causal revision moved
        assert ctl.revisions["processed"] == ctl.revisions["success"] == ctl.revisions["dirty"]
        assert ctl.revisions["safety"] == before["safety"]
        assert not ctl.wake.is_set() and ctl.view.ticks == ticks
        # a heartbeat that changes what the planner reads dirties it and wakes the loop
        assert host.cached == {"gemma": GEMMA_SHA}  # the load ran
        host.acks = []  # (and its receipt is not what makes this heartbeat news)
        await host.heartbeat(request_commands=False)
        assert ctl.wake.is_set()
        assert ctl.revisions["processed"] < ctl.revisions["dirty"]


async def test_an_old_plan_does_not_cover_a_heartbeat(quiet: Any) -> None:
    service, client, clock = quiet
    ctl = service.controller
    async with client:
        host = node(service, client, clock, 1)
        await host.register()
        ctl.tick()
        ctl.wake.clear()
        clock.now += ctl.cover_seconds + 0.5  # time moved the plan's inputs
        await host.heartbeat(request_commands=False)
        assert ctl.wake.is_set()
        assert ctl.revisions["processed"] < ctl.revisions["dirty"]


async def test_reported_ages_jitter_without_changing_the_planning_snapshot(quiet: Any) -> None:
    service, client, clock = quiet
    async with client:
        host = node(service, client, clock, 1)
        host.residencies["gemma"] = SimResidency("gemma", 640, "ready", GEMMA_SHA, clock() - 60)
        await host.register()
        first = service.registry.host("local-1")
        assert first is not None
        host.residencies["gemma"].loaded_at -= 0.4  # the age arrives 0.4 s older
        await host.heartbeat(request_commands=False)
        second = service.registry.host("local-1")
        assert second is not None and second.residencies == first.residencies
        assert not service.registry.plans_differently(first, second, clock())
        host.residencies["gemma"].loaded_at -= 600  # a real restart of the engine
        await host.heartbeat(request_commands=False)
        third = service.registry.host("local-1")
        assert third is not None and third.residencies != first.residencies


def threads_waiting_for_a_tick() -> int:
    return sum(
        1
        for frame in sys._current_frames().values()
        if any(f.f_code.co_name == "wait_for_tick" for f in iter_stack(frame))
    )


def iter_stack(frame: Any) -> Iterator[Any]:
    while frame is not None:
        yield frame
        frame = frame.f_back


async def test_waiting_control_polls_hold_no_thread(quiet: Any) -> None:
    service, client, clock = quiet
    ctl = service.controller
    async with client:
        hosts = [node(service, client, clock, i) for i in range(1, 41)]
        for host in hosts:
            await host.register()
        with ctl.tick_lock:  # no tick can finish: every poll waits
            polls = [asyncio.create_task(h.heartbeat(request_commands=True)) for h in hosts]
            for _ in range(200):
                await asyncio.sleep(0.01)
                if service_waiters(service) == len(hosts):
                    break
            assert service_waiters(service) == len(hosts)
            assert threads_waiting_for_a_tick() == 0
            assert not any(p.done() for p in polls)
        await asyncio.to_thread(ctl.tick)
        answers = await asyncio.wait_for(asyncio.gather(*polls), 30)
    assert all("allocator" in a for a in answers)
    assert service_waiters(service) == 0


def service_waiters(service: ControllerService) -> int:
    (listener,) = service.controller.revision_listeners
    waiting: int = listener.__self__._waiters.waiting  # type: ignore[attr-defined]
    return waiting


async def test_status_is_built_once_per_revision(
    quiet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, client, clock = quiet
    built: list[int] = []
    real = app_module.build_status

    def counted(ctl: Any) -> dict[str, Any]:
        built.append(1)
        return real(ctl)

    monkeypatch.setattr(app_module, "build_status", counted)
    async with client:
        host = node(service, client, clock, 1)
        await host.register()
        service.controller.tick()
        first = (await client.get("/allocator/status")).json()
        await host.heartbeat(request_commands=False)  # unchanged: the same revision
        assert (await client.get("/allocator/status")).json() == first
        assert len(built) == 1
        host.cached["gemma"] = GEMMA_SHA
        await host.heartbeat(request_commands=False)  # a new planning input
        second = (await client.get("/allocator/status")).json()
        assert len(built) == 2
        assert second["hosts"][0]["cached_models"] == ["gemma"]


async def test_a_credential_signature_is_verified_once_expiry_still_every_time(
    quiet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, client, clock = quiet
    checked: list[int] = []
    real = joining_module.credential_claims

    def counted(*args: Any, **kw: Any) -> dict[str, object]:
        checked.append(1)
        return real(*args, **kw)

    monkeypatch.setattr(joining_module, "credential_claims", counted)
    async with client:
        host = node(service, client, clock, 1)
        await host.register()
        for _ in range(5):
            await host.heartbeat(request_commands=False)
        assert len(checked) == 1
        clock.now += 400 * 24 * 3600  # past any credential's lifetime
        expired = await client.post(
            "/nodes/local-1/heartbeat",
            json={"node_id": "local-1", "request_commands": False},
            headers=host.headers,
        )
        assert expired.status_code == 401
        assert "expired" in expired.json()["error"]["message"]


async def test_a_poll_of_a_host_with_nothing_pending_reads_no_store(
    quiet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    service, client, clock = quiet
    ctl = service.controller
    read: list[str] = []
    real = ctl.commands_for

    def counted(host_id: str, *, ticked: bool = True) -> list[dict[str, Any]]:
        read.append(host_id)
        return real(host_id, ticked=ticked)

    monkeypatch.setattr(ctl, "commands_for", counted)
    async with client:
        hosts = [node(service, client, clock, i) for i in (1, 2)]
        hosts[0].cached["gemma"] = GEMMA_SHA  # a warm is planned here, nothing on the other
        for host in hosts:
            await host.register()
        ctl.tick()
        pending = {p.action.host_id for p in service.store.pending()}
        assert pending == {"local-1"}
        warm = await hosts[0].heartbeat(request_commands=True)
        idle = await hosts[1].heartbeat(request_commands=True)
    assert [c["kind"] for c in warm["allocator"]["commands"]] == ["warm"]
    assert idle["allocator"]["commands"] == []
    assert read == ["local-1"]  # the idle host's poll never reached the store


async def test_unchanged_heartbeats_during_a_tick_are_covered_by_it_and_ask_for_no_other(
    quiet: Any,
) -> None:
    """A busy fleet sends unchanged heartbeats while every tick runs: they are covered when
    that tick ends, so the next unchanged one is answered at once and no tick follows."""
    from gridctl.tick.computing import compute_tick

    service, client, clock = quiet
    ctl = service.controller
    async with client:
        first, second = node(service, client, clock, 1), node(service, client, clock, 2)
        await first.register()
        await second.register()
        ctl.tick()
        await second.heartbeat(request_commands=False)  # second's unchanged copy is on record
        during: list[int] = []
        body = {
            "node_id": "local-2",
            "resources": second.resources(),
            "allocator": second.envelope(),
            "request_commands": False,
        }

        def planning_while_a_heartbeat_arrives(inputs: Any) -> Any:
            during.append(ctl.heartbeat("local-2", body))
            return compute_tick(inputs)

        ctl.mark_dirty()  # a semantic input: the tick below is for it
        ctl.compute = planning_while_a_heartbeat_arrives
        assert ctl.tick().ok
        ctl.compute = compute_tick
        assert ctl.revisions.covered(during[0]) is True  # covered by the tick it arrived during
        ctl.wake.clear()
        ticks = ctl.view.ticks
        await second.heartbeat(request_commands=True)
        assert not ctl.wake.is_set() and ctl.view.ticks == ticks
        assert ctl.revisions["processed"] == ctl.revisions["success"] == ctl.revisions["dirty"]


async def test_router_demand_wakes_the_tick_loop_but_holds_back_no_poll(quiet: Any) -> None:
    """A burst of requests is demand the next tick plans; the fleet's command polls are
    answered from the last tick meanwhile instead of waiting for that one."""
    service, client, clock = quiet
    ctl = service.controller
    async with client:
        host = node(service, client, clock, 1)
        await host.register()
        ctl.tick()
        await host.heartbeat(request_commands=False)
        ctl.wake.clear()
        ticks, demand = ctl.view.ticks, ctl.demand.revision
        for _ in range(5):
            answer = await client.post(
                "/v1/chat/completions",
                json={"model": "gemma", "messages": [{"role": "user", "content": "hi"}]},
            )
            assert answer.status_code == 503
        assert service.tap.flush()  # the observations reached the demand book
        assert ctl.demand.revision > demand
        assert ctl.wake.is_set()  # the tick loop is asked to plan the new demand
        assert (
            ctl.revisions.covered(ctl.revisions["dirty"]) is True
        )  # nothing for a poll to wait on
        await host.heartbeat(request_commands=True)
        assert ctl.view.ticks == ticks  # answered from the last tick
        assert ctl.revisions["processed"] == ctl.revisions["dirty"]


@given(
    st.lists(
        st.sampled_from(["", "nodes", "heartbeat", "local-1", "a b", "%2F", "x.y", "/"]),
        max_size=5,
    )
)
def test_the_heartbeat_front_takes_exactly_the_paths_the_route_takes(parts: list[str]) -> None:
    """``heartbeat_node`` against the real Starlette route it stands in front of."""
    path = "/" + "/".join(parts)
    route = Route("/nodes/{node_id}/heartbeat", lambda _request: None, methods=["POST"])
    match, child = route.matches({"type": "http", "path": path, "method": "POST"})
    expected = child["path_params"]["node_id"] if match is Match.FULL else None
    assert app_module.heartbeat_node(path) == expected


async def test_heartbeats_skip_the_routing_and_the_rest_reaches_the_routes(
    quiet: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's heartbeat is answered in front of the router (the same handler); another
    method or path on it gets the routes' own answers, as before."""
    service, client, clock = quiet
    routed: list[str] = []
    real = Router.__call__

    async def counting(self: Router, scope: Any, receive: Any, send: Any) -> None:
        routed.append(scope["path"])
        await real(self, scope, receive, send)

    monkeypatch.setattr(Router, "__call__", counting)
    async with client:
        host = node(service, client, clock, 1)
        await host.register()
        assert routed == ["/nodes/local-1"]
        answer = await host.heartbeat(request_commands=False)
        assert "allocator" in answer and routed == ["/nodes/local-1"]
        refused = await client.post("/nodes/local-1/heartbeat", content=b"{")
        assert refused.status_code == 401  # no credential: the guard's answer, unrouted
        assert "error" in refused.json() and len(routed) == 1
        assert (await client.get("/nodes/local-1/heartbeat")).status_code == 405
        assert (await client.post("/nodes/local-1/heartbeat/")).status_code in (307, 404)
        assert (await client.post("/nodes/a/b/heartbeat")).status_code == 404
        assert len(routed) == 4
