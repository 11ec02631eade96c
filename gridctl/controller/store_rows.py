"""Rows of the controller database and the values they hold.

Kept apart from ``store`` so the store reads as transactions, not column
bookkeeping. An action row carries its full ``Action`` as JSON in ``body``
plus the indexed columns the queries need.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from typing import Any

from gridctl.controller.stores import Transaction
from gridctl.domain import (
    Action,
    ActionKind,
    DemandClass,
    Receipt,
    ReceiptStatus,
    SplitServe,
    SplitServeStage,
    SplitStageClaim,
)
from gridctl.reconcile import (
    AckDecision,
    ControllerMemory,
    HistoryEntry,
    PendingAction,
    PlanGeneration,
)
from gridctl.tick.timings import LearnedTiming

COLUMNS = (
    "action_id",
    "kind",
    "host_id",
    "model_id",
    "artifact_sha256",
    "attempt",
    "state",
    "progress",
    "acknowledged",
    "delivered_at",
    "queued",
    "demand_class",
    "session",
    "plan_generation",
    "created_at",
    "finished_at",
    "observed_at",
    "body",
)
STATE = COLUMNS.index("state")
SELECT_ACTION = f"SELECT {', '.join(COLUMNS)} FROM actions"
INSERT_ACTION = (
    f"INSERT INTO actions ({', '.join(COLUMNS)}) "
    f"VALUES ({', '.join('?' for _ in COLUMNS)}) ON CONFLICT DO NOTHING"
)
TRIM_HISTORY = """
DELETE FROM actions WHERE action_id IN (
    SELECT action_id FROM (
        SELECT action_id, finished_at, queued, ROW_NUMBER() OVER (
            PARTITION BY kind, host_id, model_id, coalesce(artifact_sha256, '')
            ORDER BY attempt DESC) AS newest
        FROM actions WHERE state != 'pending') AS ranked
    WHERE newest > 1 AND action_id NOT IN (SELECT action_id FROM withdrawn)
    ORDER BY finished_at, queued LIMIT ?)
"""


def kind(value: str) -> ActionKind:
    return ActionKind(value)


def action_json(action: Action) -> str:
    data = asdict(action)
    data["kind"] = action.kind.value
    data["depends_on"] = list(action.depends_on)
    for name in ("split_claim", "split_serve"):
        if data[name] is None:
            del data[name]  # the stored body of every other action is as it was
    return json.dumps(data, sort_keys=True)


def action_from_json(text: str) -> Action:
    data: dict[str, Any] = json.loads(text)
    data["kind"] = ActionKind(data["kind"])
    data["depends_on"] = tuple(data.get("depends_on", ()))
    claim = data.get("split_claim")
    if claim is not None:
        data["split_claim"] = SplitStageClaim(**claim)
    serve = data.get("split_serve")
    if serve is not None:
        stages = tuple(SplitServeStage(**s) for s in serve.pop("stages"))
        data["split_serve"] = SplitServe(**serve, stages=stages)
    return Action(**data)


def pending_row(
    entry: PendingAction, queued: int, session: str, generation: PlanGeneration | None
) -> tuple[object, ...]:
    a = entry.action
    return (
        a.action_id,
        a.kind.value,
        a.host_id,
        a.model_id,
        a.artifact_sha256,
        a.attempt,
        "pending",
        entry.status.value if entry.status else None,
        0,
        entry.delivered_at if entry.delivered else None,
        queued,
        entry.demand_class.value if entry.demand_class else None,
        session,
        str(generation) if generation else None,
        a.created_at,
        None,
        None,
        action_json(a),
    )


def with_queue(entry: PendingAction, queued: int) -> PendingAction:
    return replace(entry, queued=queued)


def pending_from_row(row: tuple[Any, ...], session: str) -> PendingAction:
    r = dict(zip(COLUMNS, row, strict=True))
    return PendingAction(
        action=action_from_json(r["body"]),
        delivered=r["delivered_at"] is not None,
        delivered_at=r["delivered_at"],
        status=ReceiptStatus(r["progress"]) if r["progress"] else None,
        demand_class=DemandClass(r["demand_class"]) if r["demand_class"] else None,
        restored=r["session"] != session,
        queued=int(r["queued"]),
    )


def history_from_row(row: tuple[Any, ...]) -> HistoryEntry:
    r = dict(zip(COLUMNS, row, strict=True))
    return HistoryEntry(
        action_id=r["action_id"],
        kind=ActionKind(r["kind"]),
        host_id=r["host_id"],
        model_id=r["model_id"],
        artifact_sha256=r["artifact_sha256"],
        attempt=int(r["attempt"]),
        status=ReceiptStatus(r["state"]),
        finished_at=float(r["finished_at"]),
        observed_at=r["observed_at"],
        acknowledged=bool(r["acknowledged"]),
        split_claim=action_from_json(r["body"]).split_claim
        if r["kind"].startswith("split_")
        else None,
    )


@dataclass(frozen=True)
class ActionRecord:
    """What judging an acknowledgement needs to know about a stored action."""

    action_id: str
    kind: ActionKind
    host_id: str
    model_id: str
    artifact_sha256: str | None
    status: ReceiptStatus | None  # the progress status while pending
    acknowledged: bool


def record_from_row(row: tuple[Any, ...]) -> ActionRecord:
    r = dict(zip(COLUMNS, row, strict=True))
    if r["state"] == "pending":
        status = ReceiptStatus(r["progress"]) if r["progress"] else None
    else:
        status = ReceiptStatus(r["state"])
    return ActionRecord(
        r["action_id"],
        ActionKind(r["kind"]),
        r["host_id"],
        r["model_id"],
        r["artifact_sha256"],
        status,
        bool(r["acknowledged"]),
    )


def update_status(conn: Transaction, receipt: Receipt, decision: AckDecision, now: float) -> None:
    status = decision.status
    assert status is not None
    if status.terminal:
        # fencing compares this with heartbeat receipt times: both in the controller's
        # clock, so a node's skewed ``observed_at`` (kept in ``receipts``) cannot move it
        conn.execute(
            "UPDATE actions SET state = ?, acknowledged = ?, finished_at = ?, observed_at = ? "
            "WHERE action_id = ?",
            (status.value, int(decision.acknowledged), now, now, receipt.action_id),
        )
    else:
        conn.execute(
            "UPDATE actions SET progress = ? WHERE action_id = ?", (status.value, receipt.action_id)
        )


def replace_memory(conn: Transaction, memory: ControllerMemory) -> None:
    conn.execute("DELETE FROM withdrawn")
    conn.executemany(
        "INSERT INTO withdrawn (action_id, kind, host_id, model_id, withdrawn_at) "
        "VALUES (?, ?, ?, ?, ?)",
        [
            (w.action_id, w.kind.value, w.host_id, w.model_id, w.withdrawn_at)
            for w in memory.withdrawn
        ],
    )
    conn.execute("DELETE FROM tombstones")
    conn.executemany(
        "INSERT INTO tombstones (model_id, retired_at, artifact_sha256, min_residency_seconds) "
        "VALUES (?, ?, ?, ?)",
        [
            (t.model_id, t.retired_at, t.artifact_sha256, t.min_residency_seconds)
            for t in memory.tombstones
        ],
    )


SELECT_TIMING = (
    "SELECT seconds, samples, updated_at FROM timings "
    "WHERE host_id = ? AND model_id = ? AND artifact = ? AND kind = ?"
)


def timing_from_row(row: tuple[Any, ...]) -> LearnedTiming:
    return LearnedTiming(float(row[0]), int(row[1]), float(row[2]))


def read_timing(conn: Transaction, key: tuple[str, str, str, str]) -> LearnedTiming | None:
    row = conn.execute(SELECT_TIMING, key).fetchone()
    return timing_from_row(row) if row else None
