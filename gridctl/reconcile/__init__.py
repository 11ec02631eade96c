"""The reconciler (pure): plan versus actual to fenced, governed lifecycle actions.

Entry point: ``reconcile(plan, snapshot, profiles, policy, mode, pending,
history, now, memory=..., startup=...) -> ReconcileResult``. Nothing in this
package does I/O, reads a clock or draws randomness; time is an argument.

Also here, because the node daemon shares them: ``admit_command`` (the
authority fence) and ``PlanGeneration``; and ``judge_acknowledgement``, the
receipt state machine the controller store applies. Those three modules are imported
on first use of one of their names (``__getattr__``): a dry run never reads them.
"""

from importlib import import_module
from typing import TYPE_CHECKING

from gridctl.reconcile.codes import BlockedCode, CancelReason
from gridctl.reconcile.governor import delivery_order
from gridctl.reconcile.grace import grace_active, grace_ends_at
from gridctl.reconcile.identity import ActionKey, attempt_index, derive_action_id
from gridctl.reconcile.pacing import backoff_delay
from gridctl.reconcile.proposals import StartupEstimate
from gridctl.reconcile.reconciling import action_key, reconcile
from gridctl.reconcile.records import (
    Cancellation,
    ControllerMemory,
    HistoryEntry,
    PendingAction,
    ReconcileResult,
    RestartGrace,
    Tombstone,
    WithdrawnDestructive,
)
from gridctl.reconcile.tombstones import newly_retired, retire_profiles
from gridctl.reconcile.wire import (
    action_to_json,
    command_to_json,
    history_from_json,
    pending_from_json,
)

if TYPE_CHECKING:
    from gridctl.reconcile.fencing import (
        Admission,
        AdmissionReason,
        FencedCommand,
        NodeFenceState,
        admit_command,
    )
    from gridctl.reconcile.generations import PlanGeneration
    from gridctl.reconcile.receipts import AckDecision, AckOutcome, judge_acknowledgement

_ON_FIRST_USE = {
    **dict.fromkeys(
        ("Admission", "AdmissionReason", "FencedCommand", "NodeFenceState", "admit_command"),
        "gridctl.reconcile.fencing",
    ),
    "PlanGeneration": "gridctl.reconcile.generations",
    **dict.fromkeys(
        ("AckDecision", "AckOutcome", "judge_acknowledgement"), "gridctl.reconcile.receipts"
    ),
}


def __getattr__(name: str) -> object:
    module = _ON_FIRST_USE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # found directly from now on
    return value


__all__ = [
    "AckDecision",
    "AckOutcome",
    "ActionKey",
    "Admission",
    "AdmissionReason",
    "BlockedCode",
    "CancelReason",
    "Cancellation",
    "ControllerMemory",
    "FencedCommand",
    "HistoryEntry",
    "NodeFenceState",
    "PendingAction",
    "PlanGeneration",
    "ReconcileResult",
    "RestartGrace",
    "StartupEstimate",
    "Tombstone",
    "WithdrawnDestructive",
    "action_key",
    "action_to_json",
    "admit_command",
    "attempt_index",
    "backoff_delay",
    "command_to_json",
    "delivery_order",
    "derive_action_id",
    "grace_active",
    "grace_ends_at",
    "history_from_json",
    "judge_acknowledgement",
    "newly_retired",
    "pending_from_json",
    "reconcile",
    "retire_profiles",
]
