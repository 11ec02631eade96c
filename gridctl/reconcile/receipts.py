"""How an acknowledgement changes an action's recorded status.

Duplicate acknowledgements are harmless (no change, nothing learned twice).
A late success or failure may complete an action the controller had
cancelled, once. Any later acknowledgement that conflicts with a terminal
status is ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gridctl.domain import ReceiptStatus


class AckOutcome(StrEnum):
    APPLIED = "applied"
    COMPLETED_LATE = "completed_late"  # finished an action the controller cancelled
    DUPLICATE = "duplicate"
    CONFLICT_IGNORED = "conflict_ignored"


@dataclass(frozen=True)
class AckDecision:
    outcome: AckOutcome
    status: ReceiptStatus | None  # the record's status afterwards (None: still pending)
    acknowledged: bool  # the terminal status now rests on the node's word

    @property
    def changed(self) -> bool:
        return self.outcome in (AckOutcome.APPLIED, AckOutcome.COMPLETED_LATE)


_PROGRESS = {None: 0, ReceiptStatus.ACCEPTED: 1, ReceiptStatus.RUNNING: 2}


def judge_acknowledgement(
    current: ReceiptStatus | None,
    incoming: ReceiptStatus,
    *,
    acknowledged: bool,
) -> AckDecision:
    """``current`` is the record's status (None while pending); ``acknowledged`` says
    whether a terminal ``current`` came from the node rather than the controller."""
    if current is None or not current.terminal:
        if incoming.terminal:
            return AckDecision(AckOutcome.APPLIED, incoming, True)
        if _PROGRESS[incoming] > _PROGRESS[current]:
            return AckDecision(AckOutcome.APPLIED, incoming, False)
        return AckDecision(AckOutcome.DUPLICATE, current, False)
    if current is ReceiptStatus.CANCELLED and not acknowledged:
        if incoming in (ReceiptStatus.SUCCEEDED, ReceiptStatus.FAILED, ReceiptStatus.REJECTED):
            return AckDecision(AckOutcome.COMPLETED_LATE, incoming, True)
        if incoming is ReceiptStatus.CANCELLED:
            return AckDecision(AckOutcome.APPLIED, incoming, True)
        return AckDecision(AckOutcome.DUPLICATE, current, False)
    if incoming is current:
        return AckDecision(AckOutcome.DUPLICATE, current, acknowledged)
    return AckDecision(AckOutcome.CONFLICT_IGNORED, current, acknowledged)
