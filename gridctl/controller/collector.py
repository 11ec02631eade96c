"""The serving process's garbage collector, kept out of the heartbeat path.

A controller holds every host's records, and at 2,000 heartbeats a second it
allocates fast enough that CPython's default thresholds (700, 10, 10) ran a full
collection every few seconds. A full collection traverses every tracked object
while holding the interpreter lock: at 5,000 hosts about 350,000 of them,
270-310 ms each time, and every heartbeat waiting on the loop waited that long
(lease p99 297 ms, control p99 524 ms in ``benchmarks/controller.py``).

``settle`` runs once the process has imported everything and loaded its state,
before it serves:

- it collects, then freezes what is alive (modules, classes, the loaded state) into
  the permanent generation, which later collections do not traverse: that part
  lives as long as the process;
- it raises the thresholds, so a young collection runs every 10,000 net
  allocations instead of 700, and a full one at most every 100 middle collections
  (CPython also waits until the objects promoted since the last full collection
  reach a quarter of those it holds).

Garbage without cycles is freed by reference counting as before; cycles are
still found by the young and middle collections or, at the latest, by the next
full one.
"""

from __future__ import annotations

import gc

THRESHOLDS = (10_000, 10, 100)  # (young, middle, full): CPython's default is (700, 10, 10)


def settle() -> int:
    """Collect, freeze what is alive and raise the thresholds; how many objects froze."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return gc.get_freeze_count()


__all__ = ["THRESHOLDS", "settle"]
