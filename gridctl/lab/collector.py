"""Keeping Python's cycle collector off the scenario's long-lived, acyclic bulk.

At the maxima a world holds millions of arrivals for the whole run, and every
simulated minute promotes a few thousand short-lived records to the oldest
generation, so the cycle collector's full passes re-scan the whole trace again
and again (about 30% of a long run's CPU). Nothing in the trace can form a
cycle (frozen records of strings and numbers in tuples), so scanning it finds
nothing. These context managers are scoped and restore the collector as they
found it; collection never changes what the lab computes, only when memory
held by reference cycles is returned.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside (building acyclic data: nothing to find)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@contextmanager
def existing_objects_frozen() -> Iterator[None]:
    """Everything alive on entry is left out of collections until exit (``gc.freeze``);
    objects made inside are collected as usual. A caller that froze objects itself
    keeps its own freeze: nothing is frozen or thawed here then."""
    if gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
