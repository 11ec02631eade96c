"""The serving process's collector settings: what is alive when it settles is frozen,
the thresholds are raised, and cycles made afterwards are still collected."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from gridctl.controller.collector import THRESHOLDS, settle


@pytest.fixture
def restored() -> Iterator[None]:
    """This test process's own collector settings, put back afterwards."""
    thresholds = gc.get_threshold()
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> tuple[Node, Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a, b


def test_settling_freezes_what_is_alive_and_raises_the_thresholds(restored: None) -> None:
    alive = Node()
    frozen = settle()
    assert gc.get_threshold() == THRESHOLDS == (10_000, 10, 100)
    assert frozen == gc.get_freeze_count() > 0
    # what was alive is no longer in any generation a collection traverses
    assert not any(o is alive for o in gc.get_objects())
    assert gc.is_tracked(alive)


def test_a_cycle_made_after_settling_is_still_collected(restored: None) -> None:
    settle()
    a, _b = cycle()
    gone = weakref.ref(a)
    del a, _b
    assert gone() is not None  # reference counting alone cannot free a cycle
    gc.collect()
    assert gone() is None


def test_a_cycle_dropped_before_settling_is_not_frozen(restored: None) -> None:
    a, _b = cycle()
    gone = weakref.ref(a)
    del a, _b
    settle()  # it collects before it freezes
    assert gone() is None
