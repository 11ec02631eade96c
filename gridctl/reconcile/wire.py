"""JSON shapes of the reconciler's inputs and outputs, for the CLI and the daemon.

``gridctl plan --against SNAPSHOT --json`` reads optional ``pending_actions``
and ``history`` arrays from the snapshot so a dry run can be exact, and prints
``actions``. Rows are plain dicts (already schema-checked by the caller where
a schema exists); missing ids are derived exactly as the reconciler derives them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gridctl.domain import Action, ActionKind, DemandClass, ReceiptStatus
from gridctl.errors import WireError
from gridctl.reconcile.caching import PREFETCH_REASON
from gridctl.reconcile.identity import ActionKey, derive_action_id
from gridctl.reconcile.records import HistoryEntry, PendingAction
from gridctl.reconcile.splits import claim_to_json, serve_to_json, stop_to_json


def action_to_json(action: Action) -> dict[str, Any]:
    """The ``actions`` row of ``gridctl plan --json`` (the issue's fields first)."""
    return {
        "action_id": action.action_id,
        "kind": action.kind.value,
        "host_id": action.host_id,
        "model_id": action.model_id,
        "depends_on": list(action.depends_on),
        "executable": action.executable,
        "blocked": action.blocked,
        "reason": action.reason,
        "attempt": action.attempt,
        "artifact_sha256": action.artifact_sha256,
        "memory_mb": action.memory_mb,
        "priority": action.priority,
        "not_before": action.not_before,
    }


def command_to_json(
    action: Action,
    *,
    plan_generation: str,
    controller_term: int,
    controller_id: str | None,
    controller_lease_expires_at: float | None,
) -> dict[str, Any]:
    """A wire command (``schemas/wire/command.schema.json``) for one action; a
    ``split_claim`` also carries its claim and stage as ``split_claim``, a
    ``split_release`` the claim it stops as ``split_stop``, and a split coordinator's
    ``warm`` the generation and stages it serves as ``split_serve``."""
    command: dict[str, Any] = {
        "action_id": action.action_id,
        "kind": action.kind.value,
        "node_id": action.host_id,
        "model_id": action.model_id,
        "memory_mb": action.memory_mb,
        "artifact_sha256": action.artifact_sha256,
        "runtime": action.runtime,
        "plan_generation": plan_generation,
        "controller_term": controller_term,
        "controller_id": controller_id,
        "controller_lease_expires_at": controller_lease_expires_at,
        "dependencies": list(action.depends_on),
        "executable": action.executable,
        "reason": action.reason[:1024],
        "created_at": action.created_at,
        "not_before": action.not_before,
        "prefetch": action.kind is ActionKind.LOAD and action.reason.startswith(PREFETCH_REASON),
    }
    if action.split_claim is not None and action.kind is ActionKind.SPLIT_CLAIM:
        command["split_claim"] = claim_to_json(action.split_claim)
    if action.split_claim is not None and action.kind is ActionKind.SPLIT_RELEASE:
        command["split_stop"] = stop_to_json(action.split_claim)
    if action.split_serve is not None and action.kind is ActionKind.WARM:
        command["split_serve"] = serve_to_json(action.split_serve)
    return command


def _field(row: Mapping[str, Any], name: str, pointer: str) -> Any:
    if name not in row:
        raise WireError(f"missing {name!r}", f"{pointer}/{name}")
    return row[name]


def _kind(row: Mapping[str, Any], pointer: str) -> ActionKind:
    try:
        return ActionKind(_field(row, "kind", pointer))
    except ValueError as exc:
        raise WireError(f"unknown action kind {row['kind']!r}", f"{pointer}/kind") from exc


def pending_from_json(rows: Iterable[Mapping[str, Any]]) -> tuple[PendingAction, ...]:
    result: list[PendingAction] = []
    for i, row in enumerate(rows):
        pointer = f"/pending_actions/{i}"
        kind = _kind(row, pointer)
        key = ActionKey(
            kind,
            str(_field(row, "host_id", pointer)),
            str(_field(row, "model_id", pointer)),
            row.get("artifact_sha256"),
        )
        attempt = int(row.get("attempt", 0))
        demand_class = row.get("demand_class")
        action = Action(
            action_id=str(row.get("action_id") or derive_action_id(key, attempt)),
            kind=kind,
            host_id=key.host_id,
            model_id=key.model_id,
            memory_mb=int(row.get("memory_mb", 0)),
            artifact_sha256=key.artifact_sha256,
            runtime=row.get("runtime"),
            attempt=attempt,
            depends_on=tuple(str(d) for d in row.get("depends_on", ())),
            executable=True,
            reason=str(row.get("reason", "")),
            priority=int(row.get("priority", 0)),
            created_at=float(row.get("created_at", 0.0)),
        )
        result.append(
            PendingAction(
                action=action,
                delivered=bool(row.get("delivered", False)),
                delivered_at=row.get("delivered_at"),
                demand_class=DemandClass(demand_class) if demand_class else None,
                restored=bool(row.get("restored", False)),
                queued=int(row.get("queued", i)),
            )
        )
    return tuple(result)


def history_from_json(rows: Iterable[Mapping[str, Any]]) -> tuple[HistoryEntry, ...]:
    result: list[HistoryEntry] = []
    for i, row in enumerate(rows):
        pointer = f"/history/{i}"
        kind = _kind(row, pointer)
        key = ActionKey(
            kind,
            str(_field(row, "host_id", pointer)),
            str(_field(row, "model_id", pointer)),
            row.get("artifact_sha256"),
        )
        attempt = int(row.get("attempt", 0))
        try:
            status = ReceiptStatus(_field(row, "status", pointer))
        except ValueError as exc:
            raise WireError(f"unknown status {row['status']!r}", f"{pointer}/status") from exc
        result.append(
            HistoryEntry(
                action_id=str(row.get("action_id") or derive_action_id(key, attempt)),
                kind=kind,
                host_id=key.host_id,
                model_id=key.model_id,
                artifact_sha256=key.artifact_sha256,
                attempt=attempt,
                status=status,
                finished_at=float(_field(row, "finished_at", pointer)),
                observed_at=row.get("observed_at"),
                acknowledged=bool(row.get("acknowledged", True)),
            )
        )
    return tuple(result)
