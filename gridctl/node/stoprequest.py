"""A stop request that a signal handler can set without taking a lock.

A Python signal handler runs in the main thread between two bytecodes, so it can
interrupt that thread while it holds a lock. ``threading.Event.set`` takes the lock of
the event's condition, which the main thread itself holds for a moment on every pass
through ``Event.wait``: a handler that calls ``set`` there blocks on a lock its own
thread will never release, and the process hangs until something kills it. Setting a
``StopRequest`` only assigns attributes; waiting on it sleeps in short steps and reads
them, so a stop is seen within one step.
"""

from __future__ import annotations

import time
from typing import Protocol

POLL_SECONDS = 0.05  # how soon a waiting loop sees a stop


class Stoppable(Protocol):
    """What the agent loop needs from a stop signal (``threading.Event`` has it too)."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class StopRequest:
    """Set once, from a signal handler or any thread; read by the loops that stop."""

    def __init__(self, poll_seconds: float = POLL_SECONDS) -> None:
        self._requested = False
        self.signum: int | None = None
        self._poll = poll_seconds

    def set(self, signum: int | None = None) -> None:
        """Request the stop: two attribute assignments, no lock, no I/O."""
        self.signum = signum
        self._requested = True

    def is_set(self) -> bool:
        return self._requested

    def wait(self, timeout: float | None = None) -> bool:
        """Sleep until the stop is requested or ``timeout`` seconds pass; report whether
        it was requested."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._requested:
            left = self._poll if deadline is None else min(self._poll, deadline - time.monotonic())
            if left <= 0:
                break
            time.sleep(left)
        return self._requested
