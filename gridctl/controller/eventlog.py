"""The controller's recent events: a bounded, thread-safe log shown in status and the dashboard.

Every event is also a log record (logger ``gridctl.controller.events``, INFO) carrying
the host, model, action id, plan generation and authority term as context fields, so a
json log names an action's issue, delivery and acknowledgement with the same id.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from gridctl.logs import action_fields
from gridctl.reconcile import PendingAction, ReconcileResult

MAX_EVENTS = 500
log = logging.getLogger("gridctl.controller.events")


class EventLog:
    def __init__(self, clock: Callable[[], float]) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._rows: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.count = 0  # every event ever recorded (what the status revision follows)
        # the plan generation and authority term now, for log lines (the controller sets it)
        self.context: Callable[[], dict[str, object]] = dict

    def __call__(self, event: str, **fields: Any) -> None:
        self.record(event, fields)

    def record(
        self, event: str, fields: Mapping[str, Any], *, plan_generation: object = None
    ) -> None:
        """Keep one event row and log it; ``plan_generation`` overrides the current one."""
        row = {"at": self._clock(), "event": event, "host_id": None, "model_id": None}
        row.update(fields)
        with self._lock:
            self._rows.append(row)
            self.count += 1
        if log.isEnabledFor(logging.INFO):
            self._log(event, row, plan_generation)

    def _log(self, event: str, row: Mapping[str, Any], plan_generation: object) -> None:
        try:
            context = self.context()
        except Exception:  # a half-built controller: the line goes out without it
            context = {}
        extra = action_fields(
            action_id=row.get("action_id"),
            host=row.get("host_id"),
            model=row.get("model_id"),
            plan_generation=plan_generation
            if plan_generation is not None
            else context.get("plan_generation"),
            term=context.get("term"),
            event=event,
        )
        subject = " ".join(
            f"{label} {row[key]}"
            for label, key in (("action", "action_id"), ("host", "host_id"), ("model", "model_id"))
            if row.get(key) is not None
        )
        message = row.get("message")
        log.info(
            "%s%s%s",
            event,
            f" {subject}" if subject else "",
            f": {message}" if message else "",
            extra=extra,
        )

    def tick(
        self,
        result: ReconcileResult,
        held: Mapping[str, PendingAction],
        plan_generation: object = None,
    ) -> None:
        """What a committed tick cancelled (of ``held``, the work pending before it) and
        what it issued (in ``plan_generation``)."""
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
            self.record(
                "issued",
                {
                    "action_id": action.action_id,
                    "host_id": action.host_id,
                    "model_id": action.model_id,
                    "message": f"{action.kind.value}: {action.reason}",
                },
                plan_generation=plan_generation,
            )

    def rows(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._rows)

    def __len__(self) -> int:
        with self._lock:
            return len(self._rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows())
