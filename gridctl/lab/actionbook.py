"""The controller's record of issued actions, kept in memory for a simulated run.

The same bookkeeping the controller store does durably: newly enqueued
actions get a FIFO position, cancellations finish pending work as
controller-side (unacknowledged) CANCELLED, delivery is marked, and every node
receipt is judged by the production receipt state machine
(``judge_acknowledgement``) before it changes anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from gridctl.domain import Receipt, ReceiptStatus
from gridctl.reconcile import (
    Cancellation,
    HistoryEntry,
    PendingAction,
    judge_acknowledgement,
)

MAX_HISTORY = 2000


@dataclass
class ActionBook:
    pending: dict[str, PendingAction] = field(default_factory=dict)
    history: deque[HistoryEntry] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    finished: dict[str, tuple[ReceiptStatus, bool]] = field(default_factory=dict)
    queue: int = 0

    def pending_list(self) -> tuple[PendingAction, ...]:
        return tuple(sorted(self.pending.values(), key=lambda p: (p.queued, p.action_id)))

    def history_list(self) -> tuple[HistoryEntry, ...]:
        return tuple(self.history)

    def _finish(self, held: PendingAction, status: ReceiptStatus, ack: bool, at: float) -> None:
        a = held.action
        self.history.append(
            HistoryEntry(
                action_id=a.action_id,
                kind=a.kind,
                host_id=a.host_id,
                model_id=a.model_id,
                artifact_sha256=a.artifact_sha256,
                attempt=a.attempt,
                status=status,
                finished_at=at,
                observed_at=at,
                acknowledged=ack,
            )
        )
        self.finished[a.action_id] = (status, ack)

    def apply_tick(
        self, enqueue: Iterable[PendingAction], cancellations: Iterable[Cancellation], now: float
    ) -> None:
        for entry in enqueue:
            if entry.action_id in self.pending or entry.action_id in self.finished:
                continue  # enqueueing twice is harmless; finished ids are never reused
            self.queue += 1
            self.pending[entry.action_id] = replace(entry, queued=self.queue)
        for c in cancellations:
            held = self.pending.pop(c.action_id, None)
            if held is not None:
                self._finish(held, ReceiptStatus.CANCELLED, False, now)

    def mark_delivered(self, action_ids: Iterable[str], now: float) -> None:
        for action_id in action_ids:
            held = self.pending.get(action_id)
            if held is not None and not held.delivered:
                self.pending[action_id] = replace(held, delivered=True, delivered_at=now)

    def acknowledge(self, receipt: Receipt, now: float) -> HistoryEntry | None:
        """Apply one receipt; the finished entry when it ended the action."""
        held = self.pending.get(receipt.action_id)
        if held is None:
            prior = self.finished.get(receipt.action_id)
            if prior is None:
                return None
            decision = judge_acknowledgement(prior[0], receipt.status, acknowledged=prior[1])
            if decision.changed and decision.status is not None:
                self.finished[receipt.action_id] = (decision.status, decision.acknowledged)
            return None
        decision = judge_acknowledgement(held.status, receipt.status, acknowledged=False)
        if not decision.changed or decision.status is None:
            return None
        if decision.status.terminal:
            del self.pending[receipt.action_id]
            self._finish(held, decision.status, decision.acknowledged, now)
            return self.history[-1]
        self.pending[receipt.action_id] = replace(held, status=decision.status)
        return None
