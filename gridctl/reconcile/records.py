"""The values the reconciler reads besides the plan and the snapshot, and what it returns.

The controller shell persists these (``gridctl.controller.store``) and hands
them back on the next tick; the reconciler itself keeps nothing between calls.
``ControllerMemory`` is the small durable state the reconciler owns (withdrawn
destructive batches, retirement tombstones) plus the in-memory restart-grace
anchor.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.domain import Action, ActionKind, DemandClass, ReceiptStatus, SplitStageClaim
from gridctl.reconcile.codes import CancelReason


@dataclass(frozen=True)
class PendingAction:
    """An executable action the controller issued and has no terminal receipt for.

    ``delivered`` is the durable delivery marker: once set, the node may be
    running it. ``restored`` marks commands reloaded from the store after a
    controller restart. ``queued`` is a FIFO tie-breaker within one service class.
    """

    action: Action
    delivered: bool = False
    delivered_at: float | None = None
    status: ReceiptStatus | None = None  # last non-terminal acknowledgement, if any
    demand_class: DemandClass | None = None  # None: routine cleanup
    restored: bool = False
    queued: int = 0

    @property
    def action_id(self) -> str:
        return self.action.action_id


@dataclass(frozen=True)
class HistoryEntry:
    """A finished action. ``acknowledged`` is true when the terminal status came from
    an authenticated node receipt rather than a controller-side cancellation."""

    action_id: str
    kind: ActionKind
    host_id: str
    model_id: str
    artifact_sha256: str | None
    attempt: int
    status: ReceiptStatus
    finished_at: float
    observed_at: float | None = None
    acknowledged: bool = True
    split_claim: SplitStageClaim | None = None  # what a split step claimed or released

    @property
    def succeeded(self) -> bool:
        return self.status is ReceiptStatus.SUCCEEDED

    @property
    def failed(self) -> bool:
        return self.status in (ReceiptStatus.FAILED, ReceiptStatus.REJECTED)

    @property
    def effective_at(self) -> float:
        """When the outcome became true: the node's observation time if it said so."""
        return self.observed_at if self.observed_at is not None else self.finished_at


@dataclass(frozen=True)
class WithdrawnDestructive:
    """A delivered drain/unload withdrawn because fresh evidence made it unsafe.

    It blocks further destructive work for ``model_id`` until an acknowledged
    terminal receipt or an authoritative heartbeat proves its postcondition.
    There is deliberately no wall-clock expiry.
    """

    action_id: str
    kind: ActionKind
    host_id: str
    model_id: str
    withdrawn_at: float


@dataclass(frozen=True)
class Tombstone:
    """A removed model profile: target zero replicas until the profile returns."""

    model_id: str
    retired_at: float
    artifact_sha256: str | None = None
    min_residency_seconds: float = 0.0


@dataclass(frozen=True)
class RestartGrace:
    """Membership-recovery grace after a controller restart.

    ``restarted_at`` is the wall-clock time the controller started; ``anchor``
    is set at the first reconciliation tick and rebased when the clock moves
    backwards, so restored commands cannot hold budget past a bounded window.
    """

    restarted_at: float
    anchor: float | None = None


@dataclass(frozen=True)
class ControllerMemory:
    withdrawn: tuple[WithdrawnDestructive, ...] = ()
    tombstones: tuple[Tombstone, ...] = ()
    grace: RestartGrace | None = None

    def tombstone(self, model_id: str) -> Tombstone | None:
        for t in self.tombstones:
            if t.model_id == model_id:
                return t
        return None


@dataclass(frozen=True)
class Cancellation:
    action_id: str
    reason: CancelReason
    delivered: bool = False


@dataclass(frozen=True)
class ReconcileResult:
    """One tick's decision.

    ``actions`` lists every proposed action in service order, pending ones
    included (executable) and held-back ones with a ``blocked`` code.
    ``enqueue`` is the subset the controller must persist as newly pending;
    ``cancellations`` are pending actions to cancel; ``deferred`` is observe
    mode's drift. ``memory`` is the state to carry into the next tick.
    """

    actions: tuple[Action, ...]
    enqueue: tuple[PendingAction, ...]
    cancellations: tuple[Cancellation, ...]
    deferred: tuple[Action, ...]
    memory: ControllerMemory

    @property
    def executable(self) -> tuple[Action, ...]:
        return tuple(a for a in self.actions if a.executable)

    @property
    def withdrawn_destructive(self) -> tuple[WithdrawnDestructive, ...]:
        return self.memory.withdrawn
