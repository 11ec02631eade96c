"""Keeping Python's cycle collector off the scenario's long-lived, acyclic bulk.

At the maxima a world holds millions of arrivals for the whole run, and every
simulated minute promotes a few thousand short-lived records to the oldest
generation, so the cycle collector's full passes re-scan the whole trace again
and again (about 30% of a long run's CPU). Nothing in the trace can form a
cycle (frozen records of strings and numbers in tuples), and a whole one-hour
scenario (every strategy) leaves about 2,000 objects in reference cycles, so
the collector is paused while the trace is generated and while a strategy runs.
The scope restores the collector as it found it; collection never changes what
the lab computes, only when memory held by reference cycles is returned.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic collection inside; the collector is restored on exit (even on error)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
