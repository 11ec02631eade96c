"""Observation never changes a response or delays it; features carry no content."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import anyio
import pytest

from gridctl.router.telemetry import RequestObservation, TelemetryTap
from tests.router.engines import FakeEngine, RouterRig, chat

MakeEngine = Callable[..., FakeEngine]


async def latencies(rig: RouterRig, n: int) -> tuple[list[float], list[bytes]]:
    samples, bodies = [], []
    async with rig.client() as client:
        for _ in range(n):
            started = time.perf_counter()
            reply = await chat(client)
            samples.append(time.perf_counter() - started)
            assert reply.status_code == 200
            bodies.append(reply.content)
    return samples, bodies


@pytest.mark.anyio
async def test_a_raising_or_blocking_sink_changes_neither_response_nor_latency(
    engines: MakeEngine,
) -> None:
    engine = engines("e", concurrency=4)
    results = {}
    release = threading.Event()
    seen: list[RequestObservation] = []

    def raising(_obs: RequestObservation) -> None:
        raise RuntimeError("sink is broken")

    def blocking(obs: RequestObservation) -> None:
        seen.append(obs)
        release.wait(30)

    for name, sinks in (("none", []), ("raising", [raising]), ("blocking", [blocking])):
        rig = RouterRig.build()
        rig.add(engine)
        for sink in sinks:
            rig.tap.add(sink)
        await latencies(rig, 5)  # warm the connection pool
        results[name] = await latencies(rig, 40)
        await rig.upstream.aclose()
    release.set()
    for name in ("raising", "blocking"):
        samples, bodies = results[name]
        assert bodies == results["none"][1]
        # a sink on the request path would hold every request for the sink's 30 s block;
        # no ratio to the sink-free run: wall-clock ratios are noise on a busy machine
        assert max(samples) < 10.0, (name, max(samples))
    # observations reach the sinks from the tap's worker thread, after the answer is
    # written and a gathering window later: wait for it (generously) instead of racing it
    deadline = time.monotonic() + 30.0
    while not seen and time.monotonic() < deadline:
        await anyio.sleep(0.01)
    assert seen and seen[0].outcome == "ok"


def test_a_full_queue_drops_instead_of_waiting() -> None:
    tap = TelemetryTap(limit=2)
    gate = threading.Event()
    tap.add(lambda _obs: gate.wait(10))
    obs = RequestObservation(0.0, "chat", "m", "m", "h", "ok", 200, 0.1)
    started = time.perf_counter()
    for _ in range(50):
        tap.emit(obs)
    assert time.perf_counter() - started < 0.5
    assert tap.dropped >= 47
    gate.set()
    assert tap.flush(5)


@pytest.mark.anyio
async def test_on_a_loop_a_timer_wakes_the_worker_after_the_window_and_flush_still_drains() -> None:
    tap = TelemetryTap()
    seen: list[RequestObservation] = []
    tap.add(seen.append)
    obs = RequestObservation(0.0, "chat", "m", "m", "h", "ok", 200, 0.1)
    tap.emit(obs)  # starts the worker
    assert tap.flush(5) and len(seen) == 1
    deadline = time.monotonic() + 10

    async def worker_asleep() -> None:
        while not tap._asleep and time.monotonic() < deadline:
            await anyio.sleep(0.005)

    await worker_asleep()
    tap.emit(obs)
    assert tap._wake_deferred  # the emitting request woke no thread
    while len(seen) < 2 and time.monotonic() < deadline:  # the loop's timer does
        await anyio.sleep(0.005)
    assert len(seen) == 2 and not tap._wake_deferred
    await worker_asleep()
    tap.emit(obs)
    # flushing on the loop thread, before the timer could fire, wakes the worker itself
    assert tap.flush(5) and len(seen) == 3


@pytest.mark.anyio
async def test_features_are_structural_and_the_session_is_double_hashed(
    engines: MakeEngine,
) -> None:
    engine = engines("e", concurrency=4)
    rig = RouterRig.build()
    rig.add(engine)
    seen: list[RequestObservation] = []
    rig.tap.add(seen.append)
    image = [{"type": "text", "text": "secret"}, {"type": "image_url", "image_url": {"url": "x"}}]
    async with rig.client() as client:
        await chat(client, headers={"X-Grid-Affinity-Key": "user-7"}, max_tokens=5)
        await chat(client, tools=[{"type": "function", "function": {"name": "f"}}])
        await client.post(
            "/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": image}]},
        )
        await chat(client, stream=True)
    assert rig.tap.flush(5)
    assert [o.workload for o in seen] == ["general", "agentic", "image", "general"]
    assert [o.modality for o in seen] == ["text", "text", "image", "text"]
    assert seen[0].session and "user-7" not in seen[0].session and seen[1].session is None
    assert seen[3].output_units == 4  # usage from the SSE stream
    text = repr(seen)
    assert "secret" not in text
    estimate = rig.router.attribution.estimate("e", "m", "ab" * 32)
    assert estimate.latency_seconds and estimate.tokens_per_second
    await rig.upstream.aclose()
