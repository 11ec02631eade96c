"""A model's line is served in arrival order, whatever the order in which the waiting
requests' tasks run after releases, wake-ups and their own looks.

The real router's admission (``Router._admit``) over a registry route; the slots are
released by hand and a look is the recheck timer's own callback (``proxy._look_again``),
so a release and a look can land in the same turn of the event loop, as they do on a
loaded machine. No request is sent upstream: admission never contacts the engine.
"""

from __future__ import annotations

import asyncio
from collections import deque

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.router import proxy
from gridctl.routes import EngineRoute
from tests.router.engines import MODEL, FakeEngine, RouterRig

RELEASE, LOOK = "release", "look"

# one turn of the event loop: a set of things that happen before any task runs
turns = st.lists(st.sampled_from([RELEASE, LOOK]), min_size=1, max_size=3)


async def settle() -> None:
    for _ in range(12):  # a wake-up, a failed try and a return to the line take a few
        await asyncio.sleep(0)


async def serve_line(
    capacity: int, callers: list[str], script: list[list[str]]
) -> tuple[dict[str, list[int]], int]:
    """Fill the model's ``capacity`` slots, queue one request per entry of ``callers``
    (in that order), play ``script`` and then release until every request is served.
    Returns each caller's requests in the order they were admitted, and the most slots
    held at once."""
    rig = RouterRig.build(admission_wait=1e6)
    rig.add(FakeEngine("one", concurrency=capacity))
    router = rig.router
    held: deque[tuple[EngineRoute, str]] = deque()
    peak = 0
    for _ in range(capacity):
        route = await router._admit(MODEL, None, None, "holder")
        assert route is not None
        held.append((route, "holder"))
    admitted: dict[str, list[int]] = {caller: [] for caller in callers}

    async def request(index: int, caller: str) -> None:
        nonlocal peak
        route = await router._admit(MODEL, None, None, caller)
        assert route is not None
        admitted[caller].append(index)
        held.append((route, caller))
        peak = max(peak, len(held))

    tasks = []
    for index, caller in enumerate(callers):
        tasks.append(asyncio.ensure_future(request(index, caller)))
        await settle()
        assert router._waiting.get(MODEL) == index + 1  # in line, in this order

    def play(actions: list[str]) -> None:
        for action in actions:  # no task runs in between
            line = router._waiters[MODEL]
            if action == RELEASE and held:
                route, caller = held.popleft()
                router._release(route, caller)
            elif action == LOOK and line:
                proxy._look_again(line[0], line)

    for actions in script:
        play(actions)
        await settle()
    for _ in range(4 * len(callers) + 4):  # each release serves one request
        if all(task.done() for task in tasks):
            break
        play([RELEASE])
        await settle()
    assert all(task.done() for task in tasks)
    for task in tasks:
        task.result()
    await rig.upstream.aclose()
    return admitted, peak


@settings(max_examples=150, deadline=None)
@given(
    capacity=st.integers(min_value=1, max_value=2),
    callers=st.lists(st.sampled_from(["a", "b"]), min_size=2, max_size=6),
    script=st.lists(turns, max_size=12),
)
def test_each_callers_requests_are_admitted_in_arrival_order(
    capacity: int, callers: list[str], script: list[list[str]]
) -> None:
    admitted, peak = asyncio.run(serve_line(capacity, callers, script))
    for caller, order in admitted.items():
        arrived = [index for index, name in enumerate(callers) if name == caller]
        assert order == arrived, (caller, order, arrived)
    assert peak <= capacity


def test_a_look_and_a_release_in_one_turn_keep_the_line_in_order() -> None:
    """The interleaving once seen under load: the first in line looks as a slot is
    released; the release wakes the second, the look's admission lets the third look
    too, both find nothing and return to the line: the second stays before the third."""
    admitted, peak = asyncio.run(serve_line(1, ["a"] * 4, [[LOOK, RELEASE]]))
    assert admitted == {"a": [0, 1, 2, 3]} and peak == 1
