"""Circuit breakers with a controllable clock, through real HTTP and on their own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from gridctl.router.breakers import Breakers, on_circuit_opening
from tests.router.engines import FakeEngine, RouterRig, chat

MakeEngine = Callable[..., FakeEngine]
KEY = ("h", "http://h", "m")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_backoff_doubles_up_to_the_cap_and_a_success_resets_it() -> None:
    clock = Clock()
    breakers = Breakers(clock)
    breakers.record(KEY, 500)
    assert breakers.admit(KEY)  # one failure does not open
    breakers.record(KEY, 503)
    backoffs = [breakers.backoff_left(KEY)]
    for _ in range(7):
        clock.now += backoffs[-1]
        assert breakers.admit(KEY)  # the half-open probe
        breakers.record(KEY, None)  # transport failure
        backoffs.append(breakers.backoff_left(KEY))
    assert backoffs == [1, 2, 4, 8, 16, 30, 30, 30]
    clock.now += 30
    assert breakers.admit(KEY)
    breakers.record(KEY, 200)
    assert breakers.backoff_left(KEY) == 0
    breakers.record(KEY, 500)
    assert breakers.admit(KEY)  # the streak restarted from zero


def test_half_open_admits_exactly_one_probe() -> None:
    clock = Clock()
    breakers = Breakers(clock)
    breakers.record(KEY, 500)
    breakers.record(KEY, 500)
    assert not breakers.admit(KEY)
    clock.now += 1
    assert [breakers.admit(KEY) for _ in range(5)] == [True, False, False, False, False]
    breakers.record(KEY, 404)  # a caller error neither reopens nor closes; it frees the probe
    assert breakers.admit(KEY)


def test_caller_errors_never_open_and_429_opens_for_one_second() -> None:
    clock = Clock()
    breakers = Breakers(clock)
    for status in (400, 401, 404, 413, 422) * 4:
        breakers.record(KEY, status)
        assert breakers.admit(KEY)
    breakers.record(KEY, 429)
    assert not breakers.admit(KEY)
    clock.now += 0.99
    assert not breakers.admit(KEY)
    clock.now += 0.01
    assert breakers.admit(KEY)


@pytest.mark.anyio
async def test_two_500s_open_the_route_and_nothing_is_replayed(engines: MakeEngine) -> None:
    bad = engines("bad", concurrency=4)
    good = engines("good", concurrency=4)
    rig = RouterRig.build(admission_wait=0.2)
    rig.add(bad)
    rig.add(good)
    rig.registry.request_started("good", "m", rig.clock())  # bad is preferred (less loaded)
    bad.statuses.extend([500, 500, 500, 500])
    async with rig.client() as client:
        first = await chat(client)
        second = await chat(client)
        # the caller gets the engine's error; the POST is not retried anywhere
        assert (first.status_code, second.status_code) == (500, 500)
        assert (bad.posts, good.posts) == (2, 0)
        # the circuit is open: later requests go to the healthy peer
        for _ in range(3):
            assert (await chat(client)).status_code == 200
        assert (bad.posts, good.posts) == (2, 3)
        # alone, an open route is unavailable rather than retried
        rig.remove(good)
        assert (await chat(client)).status_code == 503
        assert bad.posts == 2
        # after the backoff exactly one probe goes through, concurrent requests do not
        rig.clock.now += 1.0
        bad.delay = 0.3
        replies = await asyncio.gather(*(chat(client) for _ in range(4)))
        assert sorted(r.status_code for r in replies) == [500, 503, 503, 503]
        assert bad.posts == 3
        assert rig.router.breakers.backoff_left(("bad", bad.endpoint, "m")) == pytest.approx(2.0)
        # the next probe succeeds and resets the circuit
        rig.clock.now += 2.0
        bad.statuses.clear()
        bad.delay = 0.0
        assert (await chat(client)).status_code == 200
        assert (await chat(client)).status_code == 200
        assert bad.posts == 5
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_429_closes_for_a_second_and_400_never_opens(engines: MakeEngine) -> None:
    engine = engines("e", concurrency=4)
    rig = RouterRig.build(admission_wait=0.2)
    rig.add(engine)
    async with rig.client() as client:
        engine.statuses.extend([400] * 6)
        assert [(await chat(client)).status_code for _ in range(6)] == [400] * 6
        assert (await chat(client)).status_code == 200
        engine.statuses.append(429)
        assert (await chat(client)).status_code == 429
        assert (await chat(client)).status_code == 503  # closed for one second
        rig.clock.now += 1.0
        assert (await chat(client)).status_code == 200
    assert engine.posts == 9  # one POST per admitted client request
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_transport_failure_opens_after_two_and_is_not_replayed(
    engines: MakeEngine,
) -> None:
    good = engines("good", concurrency=4)
    dead = FakeEngine("dead")  # never started: connection refused
    rig = RouterRig.build(admission_wait=0.2)
    rig.add(dead)
    rig.add(good)
    rig.registry.request_started("good", "m", rig.clock())
    async with rig.client() as client:
        assert [(await chat(client)).status_code for _ in range(2)] == [502, 502]
        assert good.posts == 0  # a failed POST is never replayed on the peer
        assert (await chat(client)).status_code == 200
        assert good.posts == 1
    await rig.upstream.aclose()


def test_each_opening_is_heard_by_its_listeners() -> None:
    """The controller's metrics subscribe this way (tests/metrics counts them end to end)."""
    opened: list[tuple[str, str]] = []
    unsubscribe = on_circuit_opening(lambda m, h: opened.append((m, h)))
    try:
        clock = Clock()
        breakers = Breakers(clock)
        breakers.record(KEY, 500)
        breakers.record(KEY, 500)
        breakers.record(("h2", "http://h2", "m"), 429)
    finally:
        unsubscribe()
    assert opened == [("m", "h"), ("m", "h2")]
    breakers.record(("h3", "http://h3", "m"), 429)
    assert opened == [("m", "h"), ("m", "h2")]  # unsubscribed: heard no more


def test_a_failing_opening_listener_never_affects_the_breaker() -> None:
    def broken(model: str, host: str) -> None:
        raise RuntimeError("metrics down")

    unsubscribe = on_circuit_opening(broken)
    try:
        breakers = Breakers(Clock())
        breakers.record(KEY, 429)
        assert not breakers.admit(KEY)  # opened all the same
    finally:
        unsubscribe()
