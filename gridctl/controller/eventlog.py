"""The controller's recent events: a bounded, thread-safe log shown in status and the dashboard."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

MAX_EVENTS = 500


class EventLog:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.count = 0  # every event ever recorded (what the status revision follows)

    def __call__(self, event: str, **fields: Any) -> None:
        row = {"at": self._clock(), "event": event, "host_id": None, "model_id": None}
        row.update(fields)
        with self._lock:
            self._rows.append(row)
            self.count += 1

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows())
