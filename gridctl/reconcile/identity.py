"""Stable action identities.

An action's id is a digest of what it does and which attempt it is: kind,
host, model, artifact and attempt number. The plan generation is deliberately
not part of it, so an equivalent pending action keeps its id across ticks and
plans, and a re-run of the same tick proposes nothing new. The attempt number
advances each time an action with the same key reaches a terminal status, so
a new lifecycle after a finished one gets a fresh id.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from gridctl.domain import ActionKind
from gridctl.reconcile.records import HistoryEntry

ACTION_ID_LENGTH = 32


@dataclass(frozen=True, order=True)
class ActionKey:
    """What makes two actions equivalent, regardless of attempt."""

    kind: ActionKind
    host_id: str
    model_id: str
    artifact_sha256: str | None


def key_of(kind: ActionKind, host_id: str, model_id: str, artifact_sha256: str | None) -> ActionKey:
    return ActionKey(kind, host_id, model_id, artifact_sha256)


def entry_key(entry: HistoryEntry) -> ActionKey:
    return ActionKey(entry.kind, entry.host_id, entry.model_id, entry.artifact_sha256)


def derive_action_id(key: ActionKey, attempt: int, epoch: str = "") -> str:
    """The hex id of attempt ``attempt`` of ``key`` (sha256, truncated) in the controller
    state ``epoch``. Attempts count from the state's history, so a state that started
    over (a corrupt database moved aside) counts from 0 again: the epoch keeps its ids
    apart from those nodes still hold receipts for. The empty epoch (a dry run against a
    snapshot, the lab) gives the ids of no state."""
    parts = [
        "gridctl-action/v1",
        key.kind.value,
        key.host_id,
        key.model_id,
        key.artifact_sha256 or "",
        str(attempt),
    ]
    if epoch:
        parts.append(epoch)
    material = "\x1f".join(parts)
    return hashlib.sha256(material.encode("utf-8")).hexdigest()[:ACTION_ID_LENGTH]


def attempt_index(history: Iterable[HistoryEntry]) -> dict[ActionKey, int]:
    """The next attempt number per key: one past the highest finished attempt.

    The store's history trimming keeps the newest entry of every key, so this
    never goes backwards and an id is never reused.
    """
    highest: dict[ActionKey, int] = {}
    for entry in history:
        key = entry_key(entry)
        highest[key] = max(highest.get(key, -1), entry.attempt)
    return {key: value + 1 for key, value in highest.items()}
