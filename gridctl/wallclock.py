"""The wall clock the daemons read, with an optional offset for clock-fault drills.

Every controller and node component that needs wall time takes a ``clock``
callable; ``gridctl controller`` and ``gridctl node start`` pass
``wall_clock()``. Normally that is ``time.time`` itself, at no cost.

When the environment variable ``GRIDCTL_CLOCK_OFFSET_FILE`` names a file, the
clock is ``time.time()`` plus the number of seconds that file holds (a float;
re-read at most every 0.1 s; a missing, empty or unreadable file means 0). An
operator or a test writes ``3600`` into it to step one process's wall clock an
hour forward, as an NTP correction or a suspended VM would, without touching the
machine's clock or any other process. Monotonic timers are not affected, exactly
as a real step of the system clock does not affect them.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path

OFFSET_FILE_ENV = "GRIDCTL_CLOCK_OFFSET_FILE"
REREAD_SECONDS = 0.1


class OffsetClock:
    """``time.time()`` plus the offset in ``path``, re-read at most every 0.1 s."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0.0
        self._read_at = -math.inf

    def offset(self) -> float:
        now = time.monotonic()
        if now - self._read_at >= REREAD_SECONDS:
            self._read_at = now
            self._offset = read_offset(self.path)
        return self._offset

    def __call__(self) -> float:
        return time.time() + self.offset()


def read_offset(path: Path) -> float:
    try:
        text = path.read_text(encoding="ascii").strip()
        value = float(text) if text else 0.0
    except (OSError, ValueError, UnicodeDecodeError):
        return 0.0
    return value if math.isfinite(value) else 0.0


def wall_clock() -> Callable[[], float]:
    """The process's wall clock: ``time.time`` unless ``GRIDCTL_CLOCK_OFFSET_FILE`` is set."""
    named = os.environ.get(OFFSET_FILE_ENV)
    return OffsetClock(Path(named)) if named else time.time


__all__ = ["OFFSET_FILE_ENV", "OffsetClock", "read_offset", "wall_clock"]
