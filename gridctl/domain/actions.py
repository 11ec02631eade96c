"""Reconciler output: lifecycle actions with stable identities, and their receipts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ActionKind(StrEnum):
    LOAD = "load"  # acquire or verify the artifact
    WARM = "warm"  # start it and wait for readiness
    DRAIN = "drain"  # stop routing new requests
    UNLOAD = "unload"  # release memory once drained and idle
    EVICT = "evict"  # delete an unused predictive cache entry

    @property
    def destructive(self) -> bool:
        return self in (ActionKind.DRAIN, ActionKind.UNLOAD, ActionKind.EVICT)


class ReceiptStatus(StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (
            ReceiptStatus.SUCCEEDED,
            ReceiptStatus.FAILED,
            ReceiptStatus.REJECTED,
            ReceiptStatus.CANCELLED,
        )


@dataclass(frozen=True)
class Action:
    """One proposed lifecycle step. ``action_id`` is derived from kind, host, model,
    artifact and attempt, so an equivalent pending action keeps its identity across ticks."""

    action_id: str
    kind: ActionKind
    host_id: str
    model_id: str
    memory_mb: int = 0
    artifact_sha256: str | None = None
    runtime: str | None = None
    attempt: int = 0
    depends_on: tuple[str, ...] = ()
    executable: bool = False
    blocked: str | None = None  # a stable code when held back
    reason: str = ""
    priority: int = 0
    created_at: float = 0.0
    not_before: float | None = None


@dataclass(frozen=True)
class Receipt:
    """A node's acknowledgement of one action."""

    action_id: str
    status: ReceiptStatus
    message: str = ""
    duration_seconds: float | None = None
    artifact_fetched: bool = False
    observed_at: float | None = None
