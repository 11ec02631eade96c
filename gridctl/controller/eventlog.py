"""The controller's recent events: a bounded, thread-safe log shown in status and the dashboard."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gridctl.reconcile import PendingAction, ReconcileResult

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

    def tick(self, result: ReconcileResult, held: Mapping[str, PendingAction]) -> None:
        """What a committed tick cancelled (of ``held``, the work pending before it) and
        what it issued."""
        for cancellation in result.cancellations:
            cancelled = held.get(cancellation.action_id)
            if cancelled is not None:
                self(
                    "cancelled",
                    action_id=cancelled.action_id,
                    host_id=cancelled.action.host_id,
                    model_id=cancelled.action.model_id,
                    message=cancellation.reason.value,
                )
        for entry in result.enqueue:
            action = entry.action
            self(
                "issued",
                action_id=action.action_id,
                host_id=action.host_id,
                model_id=action.model_id,
                message=f"{action.kind.value}: {action.reason}",
            )

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._rows)

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows())
