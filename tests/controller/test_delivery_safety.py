"""Delivery of drains and unloads, branch by branch (allocator.md, "A drain or unload is
stricter"): the safety revision gate, the revalidation after the durable marker, the
durable removal of a suppressed poll's markers, and a failed removal shown in status.

The controller is the real one in-process behind its real app; nodes speak the
real wire protocol (``tests.controller.simnodes``). Where a branch needs time to
pass or a write to fail *during* the marker write, the real store's method is
wrapped to do that and then call through.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import (
    GEMMA_SHA,
    Clock,
    SimNode,
    sim_service,
    watched_dir,
)
from tests.controller.test_http_flow import POLICY, converge, profile

pytestmark = pytest.mark.anyio


@dataclass
class Fleet:
    service: ControllerService
    client: httpx.AsyncClient
    clock: Clock
    victim: SimNode
    keeper: SimNode
    drain_id: str

    def delivered(self) -> bool:
        (held,) = [p for p in self.service.store.pending() if p.action_id == self.drain_id]
        return held.delivered

    async def refresh_keeper(self, then_advance: float) -> None:
        """The keeper renews its routes, then ``then_advance`` seconds pass."""
        await self.keeper.heartbeat(request_commands=False)
        await self.service.probe_once(self.service.upstream)
        self.clock.now += then_advance

    async def victim_poll(self) -> list[str]:
        data = await self.victim.heartbeat(request_commands=True)
        return [c["kind"] for c in data["allocator"]["commands"]]


@pytest.fixture
async def fleet(tmp_path: Path) -> AsyncIterator[Fleet]:
    """Two replicas of gemma, then a desired state of one: a drain is pending."""
    files = {
        "policy.yaml": POLICY + "  heartbeat_stale_seconds: 45\n  mutation_cooldown_seconds: 0\n",
        "gemma.yaml": profile("gemma", min_replicas=2, max_replicas=2),
    }
    watch = watched_dir(tmp_path, files)
    service, clock = sim_service(tmp_path, watch_dir=watch)
    app = service.build_app()
    service.start_ticking()
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        nodes = {
            f"local-{i}": SimNode.for_controller(
                tmp_path / "state",
                f"local-{i}",
                client,
                clock,
                failure_domain=f"zone-{i}",
                cached={"gemma": GEMMA_SHA},
            )
            for i in (1, 2)
        }
        for node in nodes.values():
            await node.register()
        await converge(service, list(nodes.values()))
        assert len(service.registry.routable("gemma", clock())) == 2
        (watch / "gemma.yaml").write_text(profile("gemma", min_replicas=1, max_replicas=1))
        assert service.source is not None
        service.source.reload()
        service.controller.tick()
        (drain,) = [p.action for p in service.store.pending() if p.action.kind.value == "drain"]
        victim = nodes[drain.host_id]
        keeper = next(n for h, n in nodes.items() if h != drain.host_id)
        pending = [p for p in service.store.pending() if p.action.kind.value == "drain"]
        yield Fleet(service, client, clock, victim, keeper, pending[0].action_id)
    service.stop_ticking()


def during_marker_write(fleet: Fleet, effect: Callable[[], None]) -> None:
    """Run ``effect`` while the delivery marker is being written (after it is durable)."""
    store = fleet.service.store
    mark = store.mark_delivered

    def marking(action_ids: Iterable[str], at: float | None = None) -> None:
        mark(action_ids, at)
        effect()

    store.mark_delivered = marking  # type: ignore[method-assign]


async def test_drain_is_delivered_when_the_proof_holds_to_the_end(fleet: Fleet) -> None:
    await fleet.refresh_keeper(then_advance=20.0)  # 40 s of replacement lease left
    assert await fleet.victim_poll() == ["drain"]
    assert fleet.delivered()


async def test_a_heartbeat_whose_tick_failed_gets_no_commands(fleet: Fleet) -> None:
    await fleet.refresh_keeper(then_advance=20.0)
    controller = fleet.service.controller
    store = fleet.service.store
    apply_tick = store.apply_tick

    def failing_apply(*args: Any, **kw: Any) -> None:
        raise RuntimeError("store unavailable")  # the tick fails after planning

    store.apply_tick = failing_apply  # type: ignore[method-assign]
    try:
        assert await fleet.victim_poll() == []
        last = controller.view.tick
        assert last is not None and not last.ok
        assert not fleet.delivered()
    finally:
        store.apply_tick = apply_tick  # type: ignore[method-assign]
    assert await fleet.victim_poll() == ["drain"]  # the next successful tick delivers


async def test_drain_waits_while_the_safety_revision_is_ahead_of_the_last_tick(
    fleet: Fleet,
) -> None:
    await fleet.refresh_keeper(then_advance=20.0)
    await fleet.victim.heartbeat(request_commands=False)
    controller = fleet.service.controller
    assert controller.revisions.wait(controller.revisions["dirty"], 30.0)
    with controller.tick_lock:  # no tick may run: the safety change stays unplanned
        controller.mark_dirty(safety=True)
        assert [c["kind"] for c in controller.commands_for(fleet.victim.host_id)] == []
        assert "destructive safety changed" in (controller.delivery.safety_error or "")
        assert not fleet.delivered()
    assert controller.revisions.wait(controller.revisions["dirty"], 30.0)
    # a tick planned from the current safety revision: now it may go
    assert [c["kind"] for c in controller.commands_for(fleet.victim.host_id)] == ["drain"]


async def test_replacement_lease_running_out_during_the_marker_write_withdraws_it(
    fleet: Fleet,
) -> None:
    await fleet.refresh_keeper(then_advance=20.0)  # 40 s left when the poll starts

    def slow_write() -> None:
        fleet.clock.now += 15.0  # 25 s left at the final check: inside the 30 s margin

    during_marker_write(fleet, slow_write)
    assert await fleet.victim_poll() == []
    assert not fleet.delivered()  # the marker was removed durably
    controller = fleet.service.controller
    assert "held back" in (controller.delivery.safety_error or "")
    withdrawn = [e for e in controller.events if e["event"] == "delivery_withdrawn"]
    assert [e["action_id"] for e in withdrawn] == [fleet.drain_id]


async def test_safety_change_during_the_marker_write_withdraws_it(fleet: Fleet) -> None:
    """A safety change no successful tick has planned from yet withdraws the drain. The
    background tick loop wakes on the change, and a tick that planned from it before the
    revalidation would make the delivery legitimate again (the rule is "the last
    successful tick planned from the current safety revision"): ticks fail from the change
    on, so none can, however the threads are scheduled."""
    await fleet.refresh_keeper(then_advance=20.0)
    controller = fleet.service.controller
    store = fleet.service.store
    apply_tick = store.apply_tick

    def failing_apply(*args: Any, **kw: Any) -> None:
        raise RuntimeError("store unavailable")

    def change() -> None:
        controller.note_input(semantic=True, safety=True)
        store.apply_tick = failing_apply  # type: ignore[method-assign]

    during_marker_write(fleet, change)
    try:
        assert await fleet.victim_poll() == []
    finally:
        store.apply_tick = apply_tick  # type: ignore[method-assign]
    assert not fleet.delivered()
    assert "while the delivery marker was written" in (controller.delivery.safety_error or "")


async def test_failed_compensation_keeps_the_marker_and_shows_it_in_status(
    fleet: Fleet,
) -> None:
    await fleet.refresh_keeper(then_advance=20.0)
    store = fleet.service.store

    def failing_clear(action_ids: Iterable[str]) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    store.clear_delivered = failing_clear  # type: ignore[method-assign]
    during_marker_write(fleet, lambda: setattr(fleet.clock, "now", fleet.clock.now + 15.0))
    assert await fleet.victim_poll() == []  # suppressed all the same
    assert fleet.delivered()  # conservatively: it may have been delivered
    status: dict[str, Any] = (await fleet.client.get("/allocator/status")).json()
    assert list(validator("wire/status.schema.json").iter_errors(status)) == []
    uncertain = status["uncertain_delivery_markers"]
    assert list(uncertain) == [fleet.drain_id]
    assert "disk I/O error" in uncertain[fleet.drain_id]
