"""Control polls waiting for a tick (``TickWaiters``): each released once, with the answer
``Revisions.covered`` gives, and a poll that gave up never answered."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.controller.app import TickWaiters
from gridctl.controller.revisions import Revisions


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    made = asyncio.new_event_loop()
    yield made
    made.close()


def test_a_tick_releases_the_waiters_it_covers_and_no_other(
    loop: asyncio.AbstractEventLoop,
) -> None:
    waiters = TickWaiters()
    early, late, failed = (waiters.add(r, loop) for r in (3, 9, 5))
    waiters.release(processed=5, success=4)
    assert early.result() is True  # a successful tick covered 3
    assert failed.result() is False  # 5 was processed by a tick that failed
    assert not late.done() and waiters.waiting == 1
    waiters.abandon(early)  # (answered already: nothing to do)
    assert waiters.waiting == 1
    waiters.release(processed=9, success=9)
    assert late.result() is True and waiters.waiting == 0


def test_a_poll_that_gave_up_is_never_answered(loop: asyncio.AbstractEventLoop) -> None:
    waiters = TickWaiters()
    gone, kept = waiters.add(2, loop), waiters.add(2, loop)
    waiters.abandon(gone)
    assert gone.cancelled() and waiters.waiting == 1
    waiters.release(processed=2, success=2)
    assert kept.result() is True and waiters.waiting == 0


# an event: ("add", revision), ("abandon", index of an earlier add), ("tick", ok)
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(1, 12)),
        st.tuples(st.just("abandon"), st.integers(0, 60)),
        st.tuples(st.just("tick"), st.booleans()),
    ),
    max_size=80,
)


@settings(max_examples=300, deadline=None)
@given(EVENTS)
def test_waiters_answer_as_covered_would_at_their_release(
    events: list[tuple[str, object]],
) -> None:
    """Against the controller's real ``Revisions``: every poll not abandoned is answered
    by the first tick that processes its revision, with what ``covered`` said right then;
    an abandoned one never is; ``waiting`` counts the polls left."""
    loop = asyncio.new_event_loop()
    try:
        revisions, waiters = Revisions(), TickWaiters()
        added: list[tuple[int, asyncio.Future[bool]]] = []
        expected: dict[int, bool] = {}  # index of the add -> its answer
        abandoned: set[int] = set()
        for kind, value in events:
            if kind == "add":
                assert isinstance(value, int)
                while revisions.snapshot()["dirty"] < value:
                    revisions.note_input(semantic=True)
                added.append((value, waiters.add(value, loop)))
            elif kind == "abandon" and added:
                assert isinstance(value, int)
                index = value % len(added)
                if index not in expected:
                    abandoned.add(index)
                waiters.abandon(added[index][1])
            elif kind == "tick":
                dirty, safety = revisions.started()
                revisions.finished(dirty, safety, ok=bool(value))
                for index, (revision, _) in enumerate(added):
                    covered = revisions.covered(revision)
                    if index not in abandoned and index not in expected and covered is not None:
                        expected[index] = covered
                waiters.release(*revisions.progress())
            pending = [i for i in range(len(added)) if i not in abandoned and i not in expected]
            assert waiters.waiting == len(pending)
        for index, (_, future) in enumerate(added):
            if index in abandoned:
                assert future.cancelled()
            elif index in expected:
                assert future.result() is expected[index]
            else:
                assert not future.done()
    finally:
        loop.close()
