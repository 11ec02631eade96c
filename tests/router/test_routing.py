"""Routing on an in-process router over real loopback engines."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from gridctl.router import affinity, proxy
from gridctl.router.attribution import Estimate
from gridctl.router.choosing import Candidate, choose
from gridctl.routes import EngineRoute
from tests.router.engines import MODEL, FakeEngine, RouterRig, chat, registration

MakeEngine = Callable[..., FakeEngine]


@pytest.mark.anyio
async def test_wide_engine_with_spare_slots_beats_an_idle_narrow_one_when_faster(
    engines: MakeEngine,
) -> None:
    # the narrow engine is 75 times slower: a loaded machine's overhead on every
    # measured request (seen above half a second with three test workers and a
    # benchmark on two cores) cannot turn the comparison around
    narrow = engines("narrow", concurrency=1, delay=1.5)
    wide = engines("wide", concurrency=8, delay=0.02)
    rig = RouterRig.build()
    rig.add(narrow)
    rig.add(wide)
    async with rig.client() as client:
        # Without measurements the idle narrow engine wins on load (0/1 < 3/8).
        for _ in range(3):
            rig.registry.request_started("wide", MODEL, rig.clock())
        assert (await chat(client)).status_code == 200
        assert (narrow.posts, wide.posts) == (1, 0)
        for _ in range(3):
            rig.registry.request_finished("wide", MODEL, rig.clock())
        # Concurrent traffic measures both engines (the narrow one holds one at a time).
        replies = await asyncio.gather(*(chat(client) for _ in range(12)))
        assert all(r.status_code == 200 for r in replies)
        assert narrow.peak == 1  # the hard admission boundary held
        assert rig.router.attribution.estimate("wide", MODEL, wide_sha()).latency_seconds
        # Now three requests are running on the wide engine and the narrow one is idle:
        # the wide engine's estimate (one fast wave) is lower, so it wins.
        for _ in range(3):
            rig.registry.request_started("wide", MODEL, rig.clock())
        before = (narrow.posts, wide.posts)
        assert (await chat(client)).status_code == 200
        assert (narrow.posts, wide.posts) == (before[0], before[1] + 1)
    await rig.upstream.aclose()


def heartbeat(engine: FakeEngine, queue_depth: int) -> dict[str, object]:
    body = registration(engine)
    return {
        "node_id": engine.name,
        "load": {"queue_depth": queue_depth, "active_tasks": 0},
        "resources": body["resources"],
        "allocator": body["allocator"],
    }


def wide_sha() -> str:
    from tests.router.engines import SHA

    return SHA


@pytest.mark.anyio
async def test_a_backlog_moves_traffic_to_the_clear_peer(engines: MakeEngine) -> None:
    a = engines("a", concurrency=2, delay=0.02)
    b = engines("b", concurrency=2, delay=0.04)
    rig = RouterRig.build()
    rig.add(a)
    rig.add(b)
    rig.registry.heartbeat("a", heartbeat(a, queue_depth=6), rig.clock())
    # a is measured faster, yet its advertised queue puts this request three waves back
    for _ in range(8):
        rig.router.attribution.record("a", MODEL, wide_sha(), 0.02, 10)
        rig.router.attribution.record("b", MODEL, wide_sha(), 0.04, 10)
    async with rig.client() as client:
        for _ in range(6):
            assert (await chat(client)).status_code == 200
        assert (a.posts, b.posts) == (0, 6)
        rig.registry.heartbeat("a", heartbeat(a, queue_depth=0), rig.clock())
        assert (await chat(client)).status_code == 200
        assert a.posts == 1
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_throttled_hosts_come_second_and_their_multiplier_limits_admission(
    engines: MakeEngine,
) -> None:
    calm = engines("calm", concurrency=1, delay=0.2)
    hot = engines("hot", concurrency=4, delay=0.2)
    rig = RouterRig.build()
    rig.add(calm)
    rig.add(hot, state="throttled", multiplier=0.5)
    async with rig.client() as client:
        replies = await asyncio.gather(*(chat(client) for _ in range(9)))
    assert all(r.status_code == 200 for r in replies)
    assert calm.peak == 1 and hot.peak <= 2  # 4 slots x 0.5 on the throttled host
    assert calm.posts >= 1 and calm.posts + hot.posts == 9
    await rig.upstream.aclose()


def route(host: str) -> EngineRoute:
    return EngineRoute(
        host, MODEL, f"http://{host}", None, max_concurrency=4, advertised_concurrency=4
    )


def assignment(hosts: list[str], keys: list[bytes]) -> dict[bytes, str]:
    candidates = [Candidate(route(h)) for h in hosts]
    chosen = {}
    for key in keys:
        picked = choose(candidates, affinity=key)
        assert picked is not None
        chosen[key] = picked.host_id
    return chosen


def test_affinity_spreads_keys_and_remaps_only_the_changed_engine() -> None:
    keys = [affinity.hash_key(f"session-{i}") for i in range(1000)]
    assert all(k is not None for k in keys)
    digests = [k for k in keys if k is not None]
    four = assignment(["e1", "e2", "e3", "e4"], digests)
    spread = Counter(four.values())
    assert set(spread) == {"e1", "e2", "e3", "e4"}
    assert min(spread.values()) >= 180, spread
    five = assignment(["e1", "e2", "e3", "e4", "e5"], digests)
    moved = {k for k in digests if four[k] != five[k]}
    assert moved and all(five[k] == "e5" for k in moved)
    three = assignment(["e1", "e2", "e4"], digests)
    moved = {k for k in digests if four[k] != three[k]}
    assert moved == {k for k in digests if four[k] == "e3"}


def test_affinity_considers_only_routes_near_the_best_estimate() -> None:
    key = affinity.hash_key("s")
    assert key is not None
    fast, slow = route("fast"), route("slow")
    home = choose([Candidate(fast), Candidate(slow)], affinity=key)
    assert home is not None
    other = "slow" if home.host_id == "fast" else "fast"
    far = {
        home.host_id: Candidate(route(home.host_id), estimate=Estimate(1.0, 1.0, None, 0.0)),
        other: Candidate(route(other), estimate=Estimate(0.1, 1.0, None, 0.0)),
    }
    assert choose(list(far.values()), affinity=key) == route(other)


def test_affinity_keys_are_validated() -> None:
    assert affinity.hash_key("x" * 256) is not None
    assert affinity.hash_key("x" * 257) is None
    assert affinity.hash_key("é" * 129) is None  # 258 UTF-8 bytes
    assert affinity.hash_key("bad\nkey") is None
    assert affinity.hash_key("") is None


@pytest.mark.anyio
async def test_affinity_key_sticks_and_is_never_forwarded(engines: MakeEngine) -> None:
    rig = RouterRig.build()
    fleet = [engines(f"e{i}", concurrency=4) for i in range(3)]
    for engine in fleet:
        rig.add(engine)
    async with rig.client() as client:
        for _ in range(6):
            reply = await chat(client, headers={"X-Grid-Affinity-Key": "conversation-42"})
            assert reply.status_code == 200
    assert sorted(e.posts for e in fleet) == [0, 0, 6]
    for engine in fleet:
        for seen in engine.headers:
            assert "x-grid-affinity-key" not in seen
            assert seen["authorization"] == f"Bearer key-{engine.name}"
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_a_full_engine_queues_requests_at_the_router_with_a_bound(
    engines: MakeEngine,
) -> None:
    engine = engines("one", concurrency=1, delay=0.15)
    rig = RouterRig.build(admission_wait=5.0)
    rig.add(engine)
    seen: list[object] = []
    rig.tap.add(seen.append)
    async with rig.client() as client:
        replies = await asyncio.gather(*(chat(client) for _ in range(4)))
        assert [r.status_code for r in replies] == [200] * 4
        assert engine.peak == 1  # never more than the advertised slots
        rig.router.ctx.admission_wait_seconds = 0.05
        engine.delay = 0.5
        late = await asyncio.gather(chat(client), chat(client))
        assert sorted(r.status_code for r in late) == [200, 503]
    assert rig.tap.flush(5)
    assert max(o.queue_depth for o in seen) >= 1  # queue pressure reaches the demand side
    await rig.upstream.aclose()


async def until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Wait (polling the loop) until ``condition`` holds: a slot taken, a queue formed;
    fail after ``timeout`` seconds instead of waiting for ever."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.002)


def count_tries(rig: RouterRig) -> list[int]:
    """How many times the router tries to admit a request (``[n]``, counted as it runs):
    the real ``_try_admit`` behind a counter."""
    tries = [0]
    real_try = rig.router._try_admit

    def counted(*args: Any) -> Any:
        tries[0] += 1
        return real_try(*args)

    rig.router._try_admit = counted  # type: ignore[method-assign,assignment]
    return tries


async def served_in_line(
    rig: RouterRig, engine: FakeEngine, requests: int
) -> tuple[list[int], list[int]]:
    """``requests`` chats for an engine with one slot, the first taking it and each of the
    rest joining the router's line before the next arrives: their statuses (in arrival
    order) and the order in which the router admitted them to the engine (by arrival
    index, read off what the engine received: the order answers reach their callers also
    depends on how soon each caller's task runs on a loaded machine)."""
    async with rig.client() as client:

        async def ask(i: int) -> int:
            reply = await chat(client, max_tokens=i + 1)  # a valid body that names its request
            return reply.status_code

        engine.held = True  # the first answer waits until the whole line has formed
        first = asyncio.ensure_future(ask(0))
        await until(lambda: engine.active > 0)  # the slot is taken
        queued: list[asyncio.Future[int]] = []
        for i in range(1, requests):
            queued.append(asyncio.ensure_future(ask(i)))
            await until(lambda: rig.router._waiting.get(MODEL, 0) >= len(queued))
        engine.held = False
        statuses = await asyncio.gather(first, *queued)
    order = [int(tokens) - 1 for tokens in engine.max_tokens if isinstance(tokens, int)]
    return list(statuses), order


@pytest.mark.anyio
async def test_a_released_slot_wakes_one_waiter_and_waiters_are_served_first_come_first(
    engines: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Requests queued at the router for a full engine: each release hands its slot to the
    longest-waiting request alone, so a release costs one re-choice however long the
    queue (waking every waiter cost one per waiter, on the cores the engines use)."""
    monkeypatch.setattr(proxy, "RECHECK_SECONDS", 30.0)  # only releases wake a waiter
    engine = engines("one", concurrency=1, delay=0.05)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    tries = count_tries(rig)
    statuses, order = await served_in_line(rig, engine, 16)
    assert statuses == [200] * 16 and engine.peak == 1
    assert order == list(range(16))
    # one try on arrival each, and one per release for the 15 that queued
    assert tries[0] == 16 + 15
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_a_waiter_whose_caller_left_is_skipped_and_the_next_gets_the_slot(
    engines: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(proxy, "RECHECK_SECONDS", 30.0)  # a lost wake-up would wait that long
    engine = engines("one", concurrency=1, delay=0.2)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    async with rig.client() as client:
        first = asyncio.ensure_future(chat(client))
        await until(lambda: engine.active > 0)
        leaving = asyncio.ensure_future(chat(client))
        await until(lambda: rig.router._waiting.get(MODEL, 0) >= 1)
        staying = asyncio.ensure_future(chat(client))
        await until(lambda: rig.router._waiting.get(MODEL, 0) >= 2)
        leaving.cancel()  # the first in line goes away before its turn
        started = time.monotonic()
        assert (await first).status_code == 200
        assert (await staying).status_code == 200
        # served on the release, not on a periodic look
        assert time.monotonic() - started < 10.0
    with contextlib.suppress(asyncio.CancelledError):
        await leaving
    assert engine.peak == 1 and rig.router._waiting.get(MODEL) == 0
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_only_the_first_in_line_looks_again_while_no_slot_is_released(
    engines: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between releases a queued request looks for a slot no release freed (a replica that
    became routable) every ``RECHECK_SECONDS``; only the first in line does, since those
    behind it would find what it finds, and a look that finds nothing keeps its place at
    the front: the line is still served first come, first served."""
    monkeypatch.setattr(proxy, "RECHECK_SECONDS", 0.05)
    engine = engines("one", concurrency=1, delay=0.3)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    tries = count_tries(rig)
    started = time.monotonic()
    statuses, order = await served_in_line(rig, engine, 7)
    elapsed = time.monotonic() - started
    assert statuses == [200] * 7 and engine.peak == 1
    assert order == list(range(7))
    # one try on arrival and one per wake-up each, plus the looks: at most one per
    # ``RECHECK_SECONDS`` while a request is first in line, and one more as each of the
    # six becomes first (its own look comes due sooner); each of the six that waited
    # looking too would make about six times as many
    assert tries[0] <= 7 + 6 + elapsed / 0.05 + 6, (tries[0], elapsed)
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_a_replica_that_becomes_routable_takes_the_whole_queue_at_once(
    engines: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No release frees the new replica's slots: the first in line finds one on its look,
    and each admission after such a look lets the next in line look at once."""
    monkeypatch.setattr(proxy, "RECHECK_SECONDS", 3.0)
    slow = engines("slow", concurrency=1, delay=10.0)  # busy until the queue has moved
    fresh = engines("fresh", concurrency=4)
    rig = RouterRig.build(admission_wait=60.0)
    rig.add(slow)
    async with rig.client() as client:
        stuck = asyncio.ensure_future(chat(client))
        await until(lambda: slow.active > 0)
        waiting = [asyncio.ensure_future(chat(client)) for _ in range(4)]
        await until(lambda: rig.router._waiting.get(MODEL, 0) >= 4)
        added = time.monotonic()
        rig.add(fresh)
        replies = await asyncio.gather(*waiting)
        took = time.monotonic() - added
        stuck.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stuck
    assert [r.status_code for r in replies] == [200] * 4 and fresh.posts == 4
    # one look (at most three seconds away), then the rest in a cascade; a look each,
    # in line, would take three more looks (nine seconds or more): the margin between
    # the two is wide enough for a loaded machine
    assert took < 7.5, took
    await rig.upstream.aclose()
