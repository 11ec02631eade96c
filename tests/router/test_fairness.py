"""Callers share a model's slots: one router key or loopback client cannot hold them all.

The router over real loopback engines (``tests.router.engines``); two callers are two
loopback client addresses, as the router tells anonymous loopback callers apart.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain import ControllerPolicy
from gridctl.router import proxy
from gridctl.router.fairness import ANONYMOUS, CallerShares, caller_of, share_of
from tests.router.engines import MODEL, FakeEngine, RouterRig, chat
from tests.router.test_routing import until

MakeEngine = Callable[..., FakeEngine]
HOG, OTHER = "127.0.0.2", "127.0.0.3"


def admissions(rig: RouterRig) -> list[str]:
    """The callers in the order the router admits them: the real ``admitted`` behind a
    recorder."""
    seen: list[str] = []
    real = rig.router.shares.admitted

    def recorded(model: str, caller: str) -> None:
        seen.append(caller.removeprefix("address:"))
        real(model, caller)

    rig.router.shares.admitted = recorded  # type: ignore[method-assign]
    return seen


@pytest.mark.anyio
async def test_a_released_slot_goes_to_the_caller_holding_none_before_the_hogs_line(
    engines: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One caller holds both slots and has six more requests waiting; another caller's one
    request is served at the first release, not after the six."""
    monkeypatch.setattr(proxy, "RECHECK_SECONDS", 30.0)  # only releases hand out slots
    engine = engines("one", concurrency=2, delay=0.15)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    order = admissions(rig)
    async with rig.client(HOG) as hog, rig.client(OTHER) as other:
        held = [asyncio.ensure_future(chat(hog)) for _ in range(2)]
        await until(lambda: engine.active == 2)
        queued = []
        for n in range(1, 7):
            queued.append(asyncio.ensure_future(chat(hog)))
            await until(lambda n=n: rig.router._waiting.get(MODEL, 0) >= n)  # type: ignore[misc]
        late = asyncio.ensure_future(chat(other))
        await until(lambda: rig.router._waiting.get(MODEL, 0) >= 7)
        replies = await asyncio.gather(*held, *queued, late)
    assert [r.status_code for r in replies] == [200] * 9
    assert engine.peak == 2
    assert order == [HOG, HOG, OTHER] + [HOG] * 6
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_one_caller_alone_uses_every_slot_first_come_first_served(
    engines: MakeEngine,
) -> None:
    """Sharing is work-conserving: with no other caller waiting, one caller fills every
    slot, and its own requests keep their order."""
    engine = engines("one", concurrency=3, delay=0.1)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    async with rig.client(HOG) as hog:
        replies = await asyncio.gather(*(chat(hog) for _ in range(9)))
    assert [r.status_code for r in replies] == [200] * 9
    assert engine.peak == 3  # not held to its share of 2 with nobody else asking
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_a_caller_with_its_most_requests_waiting_gets_429_and_others_still_queue(
    engines: MakeEngine,
) -> None:
    engine = engines("one", concurrency=1, delay=0.3)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    policy = ControllerPolicy(router_max_waiting_per_caller=2)
    rig.router.ctx.policy = lambda: policy
    async with rig.client(HOG) as hog, rig.client(OTHER) as other:
        first = asyncio.ensure_future(chat(hog))
        await until(lambda: engine.active == 1)
        waiting = [asyncio.ensure_future(chat(hog)) for _ in range(2)]
        await until(lambda: rig.router.shares.waiting(MODEL, f"address:{HOG}") == 2)
        refused = await chat(hog)
        assert refused.status_code == 429
        assert refused.headers["retry-after"] == "1"
        error = refused.json()["error"]
        assert error["code"] == "caller_queue_full"
        assert "router_max_waiting_per_caller" in error["message"]
        assert engine.posts == 1  # refused at the router, never forwarded
        others = await chat(other)  # another caller still finds its place in line
        replies = await asyncio.gather(first, *waiting)
    assert others.status_code == 200
    assert [r.status_code for r in replies] == [200] * 3
    assert rig.router.shares.waiting(MODEL, f"address:{HOG}") == 0
    await rig.upstream.aclose()


@pytest.mark.anyio
async def test_a_caller_holding_its_share_leaves_a_new_slot_to_the_waiting_caller(
    engines: MakeEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot no release freed (the engine grew): the hog, holding its share while the
    other caller waits, queues behind instead of taking it on arrival, and hands it to
    the waiting caller at once (not on its next look)."""
    monkeypatch.setattr(proxy, "RECHECK_SECONDS", 30.0)
    engine = engines("one", concurrency=2, delay=0.6)
    rig = RouterRig.build(admission_wait=30.0)
    rig.add(engine)
    order = admissions(rig)
    async with rig.client(HOG) as hog, rig.client(OTHER) as other:
        held = [asyncio.ensure_future(chat(hog)) for _ in range(2)]
        await until(lambda: engine.active == 2)
        late = asyncio.ensure_future(chat(other))
        await until(lambda: rig.router._waiting.get(MODEL, 0) >= 1)
        engine.concurrency = 3  # advertised in the next registration
        rig.add(engine)
        newcomer = asyncio.ensure_future(chat(hog))
        await until(lambda: len(order) >= 3, timeout=0.5)  # before any release
        replies = await asyncio.gather(*held, late, newcomer)
    assert [r.status_code for r in replies] == [200] * 4
    assert order == [HOG, HOG, OTHER, HOG]
    await rig.upstream.aclose()


def test_callers_are_router_keys_else_client_addresses() -> None:
    def request(key: str | None, host: str | None) -> Any:
        client = SimpleNamespace(host=host) if host is not None else None
        return SimpleNamespace(state=SimpleNamespace(router_client=key), client=client)

    assert caller_of(request("ci-bot", "127.0.0.1")) == "key:ci-bot"
    assert caller_of(request(None, "127.0.0.1")) == "address:127.0.0.1"
    assert caller_of(request(None, None)) == ANONYMOUS


@given(slots=st.integers(0, 512), share=st.floats(0.01, 1.0))
def test_a_share_is_at_least_one_slot_and_never_more_than_all(slots: int, share: float) -> None:
    got = share_of(slots, share)
    assert got >= 1
    assert got <= max(1, slots)
    assert got >= share * slots - 1e-6


@settings(max_examples=200, deadline=None)
@given(
    held=st.dictionaries(st.sampled_from("abcd"), st.integers(0, 4), max_size=4),
    line=st.lists(st.sampled_from("abcd"), min_size=1, max_size=12),
)
def test_the_next_turn_is_a_caller_holding_the_fewest_slots_and_one_caller_keeps_order(
    held: dict[str, int], line: list[str]
) -> None:
    """For any slots held and any line: the first turn a release goes to belongs to a
    waiting caller holding the fewest slots; each caller's own turns keep their order."""
    loop = asyncio.new_event_loop()
    try:
        shares = CallerShares()
        for caller, count in held.items():
            for _ in range(count):
                shares.admitted(MODEL, caller)
        turns = []
        for caller in line:
            turn: asyncio.Future[bool] = loop.create_future()
            shares.queued(turn, caller)
            shares.joined(MODEL, caller)
            turns.append((turn, caller))
        owner = {id(t): c for t, c in turns}
        ranked = shares.in_order(MODEL, [t for t, _ in turns])
        assert len(ranked) == len(turns)
        fewest = min(held.get(c, 0) for c in line)
        assert held.get(owner[id(ranked[0])], 0) == fewest
        for caller in set(line):
            mine = [t for t in ranked if owner[id(t)] == caller]
            assert mine == [t for t, c in turns if c == caller]
    finally:
        loop.close()
