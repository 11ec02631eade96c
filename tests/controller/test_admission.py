"""Registrations wait while the serving loop is behind a large fleet (``admission``): the
lag probe on a real event loop, the gate on both sides of its bounds, and the real
controller app answering 503 with a time to come back while heartbeats go on."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gridctl.controller.admission as admission
from gridctl.controller.admission import (
    GATE_FROM_HOSTS,
    LAG_LIMIT_SECONDS,
    RETRY_SECONDS,
    LoopLag,
    RegistrationGate,
    retry_after_header,
)
from tests.controller.simnodes import SimNode, sim_service
from tests.controller.test_http_flow import POLICY, profile

HELD_SECONDS = 0.4


def test_the_probe_sees_a_loop_held_busy_and_then_free_again() -> None:
    async def run() -> tuple[float, float]:
        lag = LoopLag()
        task = asyncio.create_task(lag.watch())
        try:
            await asyncio.sleep(0.2)  # a few probes of a free loop
            time.sleep(HELD_SECONDS)  # the loop runs nothing else meanwhile
            while lag.seconds < HELD_SECONDS - admission.PROBE_SECONDS:
                await asyncio.sleep(0)  # the probe that was due runs now, late
            held = lag.seconds
            deadline = time.monotonic() + 30
            while lag.seconds >= held and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return held, lag.seconds
        finally:
            task.cancel()

    held, after = asyncio.run(run())
    assert held >= HELD_SECONDS - admission.PROBE_SECONDS
    assert after < held  # a probe on the free loop again


@given(
    lag=st.floats(min_value=0, max_value=60, allow_nan=False),
    hosts=st.integers(min_value=0, max_value=20_000),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_the_gate_defers_only_a_large_fleet_behind_its_limit(
    lag: float, hosts: int, seed: int
) -> None:
    import random

    probe = LoopLag()
    probe.seconds = lag
    gate = RegistrationGate(probe, lambda: hosts, random.Random(seed))
    wait = gate.wait()
    if lag <= LAG_LIMIT_SECONDS or hosts < GATE_FROM_HOSTS:
        assert wait is None and gate.deferred == 0
    else:
        assert wait is not None and gate.deferred == 1
        assert RETRY_SECONDS[0] <= wait <= RETRY_SECONDS[1]
        assert float(retry_after_header(wait)) >= wait  # never sooner than the body says


def test_the_bounds_on_both_sides() -> None:
    import random

    probe = LoopLag()
    gate = RegistrationGate(probe, lambda: GATE_FROM_HOSTS, random.Random(1))
    probe.seconds = LAG_LIMIT_SECONDS
    assert gate.wait() is None  # at the limit: taken
    probe.seconds = LAG_LIMIT_SECONDS + 0.001
    assert gate.wait() is not None  # past it: deferred
    small = RegistrationGate(probe, lambda: GATE_FROM_HOSTS - 1, random.Random(1))
    assert small.wait() is None  # a smaller fleet is never asked to wait


def registry_text(service: Any) -> list[str]:
    return sorted(repr(r) for r in service.registry.hosts())


def test_the_app_defers_registrations_not_heartbeats_while_behind(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(admission, "GATE_FROM_HOSTS", 1)  # one host is "large" here
    service, clock = sim_service(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    app = service.build_app()

    async def run() -> None:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ctl") as client:
            first = SimNode.for_controller(tmp_path / "state", "h1", client, clock)
            second = SimNode.for_controller(tmp_path / "state", "h2", client, clock)
            assert (await first.register()).status_code == 200  # no host yet: never gated
            service.loop_lag.seconds = 1.0  # behind (the probe is not running here)
            before = registry_text(service)
            refused = await second.register()
            assert refused.status_code == 503, refused.text
            error = refused.json()["error"]
            wait = error["retry_after_seconds"]
            assert RETRY_SECONDS[0] <= wait <= RETRY_SECONDS[1]
            assert "behind" in error["message"]
            assert int(refused.headers["retry-after"]) >= wait
            assert registry_text(service) == before  # nothing of h2 was taken
            await first.heartbeat()  # a registered host's heartbeat is answered as ever
            metrics = (await client.get("/metrics")).text
            assert "gridctl_registrations_deferred_total 1.0" in metrics
            assert "gridctl_serving_loop_lag_seconds 1.0" in metrics
            service.loop_lag.seconds = 0.0  # caught up
            assert (await second.register()).status_code == 200
            assert service.registry.host("h2") is not None

    asyncio.run(run())
