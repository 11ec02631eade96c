"""The tick loop rests after a tick as long as that tick took, so inputs that arrive
faster than ticks end cannot keep the tick thread (and the planning process) busy all
the time; and a quiet large fleet's periodic tick comes a second per 1,000 hosts (the
real service and its tick thread, in process)."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given
from hypothesis import strategies as st

import gridctl.controller.serving as serving
from gridctl.controller.serving import quiet_period, tick_rest
from gridctl.tick.computing import compute_tick
from tests.controller.simnodes import SimNode, sim_service
from tests.controller.test_http_flow import POLICY, profile

SLOW_SECONDS = 0.15  # what each tick's computation takes here
DEADLINE = 60.0


def tick_until(service: Any, compute: Callable[[Any], Any], count: int) -> None:
    """Run the service's tick loop, planning with ``compute``, until it planned ``count``
    times (or fail at ``DEADLINE``)."""
    calls = 0
    enough = threading.Event()

    def counted(inputs: Any) -> Any:
        nonlocal calls
        outcome = compute(inputs)
        calls += 1
        if calls >= count:
            enough.set()
        return outcome

    service.controller.compute = counted
    service.start_ticking()
    try:
        assert enough.wait(DEADLINE), f"only {calls} ticks in {DEADLINE} s"
    finally:
        service.stop_ticking()


@given(
    took=st.floats(min_value=0, max_value=3600, allow_nan=False),
    since=st.floats(min_value=0, max_value=3600, allow_nan=False),
)
def test_the_rest_is_what_remains_of_the_last_ticks_duration(took: float, since: float) -> None:
    rest = tick_rest(took, since)
    assert rest >= 0
    assert since + rest >= took  # the next tick never starts sooner than the last one took
    assert rest == 0 or since + rest == took  # and never later than that


def test_ticks_dirtied_without_pause_still_rest_as_long_as_they_took(tmp_path: Path) -> None:
    service, _clock = sim_service(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    service.build_app()
    ctl = service.controller
    spans: list[tuple[float, float]] = []

    def slow(inputs: Any) -> Any:
        started = time.monotonic()
        time.sleep(SLOW_SECONDS)
        outcome = compute_tick(inputs)
        spans.append((started, time.monotonic()))
        ctl.mark_dirty()  # an input arrived meanwhile: the next tick is due at once
        return outcome

    tick_until(service, slow, 6)
    for (start, end), (after, _) in itertools.pairwise(spans):
        assert after - end >= end - start, (after - end, end - start)


@given(
    interval=st.floats(min_value=0.001, max_value=60, allow_nan=False),
    hosts=st.integers(min_value=0, max_value=100_000),
    stale=st.floats(min_value=0.01, max_value=3600, allow_nan=False),
)
def test_a_quiet_fleet_ticks_a_second_per_thousand_hosts_within_its_staleness_bound(
    interval: float, hosts: int, stale: float
) -> None:
    period = quiet_period(interval, hosts, stale)
    assert period >= interval  # never more often than the operator's interval
    assert period <= max(interval, stale / 4)  # a silent host is still found in time
    if hosts <= interval * 1000:
        assert period == interval  # fleets this small keep the interval
    elif stale / 4 >= hosts / 1000:
        assert period == hosts / 1000


def test_the_service_ticks_a_quiet_fleet_on_its_fleet_sized_period(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Three hosts at 10 per second (for the test's sake, 1,000 in the product): the
    periodic tick of the unchanged fleet comes every 0.3 s, not every 0.05 s, and an
    unchanged heartbeat counts as covered by a plan up to two of those periods old."""
    monkeypatch.setattr(serving, "QUIET_HOSTS_PER_SECOND", 10)
    service, clock = sim_service(
        tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY}, tick_interval=0.05
    )
    app = service.build_app()
    ctl = service.controller
    starts: list[float] = []

    def counted(inputs: Any) -> Any:
        starts.append(time.monotonic())
        return compute_tick(inputs)

    async def register_three() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ctl") as client:
            for name in ("h1", "h2", "h3"):
                node = SimNode.for_controller(tmp_path / "state", name, client, clock)
                assert (await node.register()).status_code == 200

    asyncio.run(register_three())
    tick_until(service, counted, 8)
    gaps = [after - before for before, after in itertools.pairwise(starts[2:])]
    assert all(gap >= 0.3 - 0.01 for gap in gaps), gaps  # the first ones saw registrations
    assert ctl.cover_seconds == 0.6
