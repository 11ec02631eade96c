"""Destructive-batch withdrawal.

A delivered drain or unload may already be running on its node even while the
controller's record still says pending. When fresh placement or host evidence
makes any pending destructive step of a model unsafe, the whole destructive
batch of that model is withdrawn: every member is cancelled, and every
delivered member is remembered as ``WithdrawnDestructive``. Further
destructive work for that model stays blocked until each remembered member is
resolved by an acknowledged terminal receipt or by a heartbeat newer than the
withdrawal that shows the step's postcondition (drain: draining, cached or
absent; unload: cached or absent). There is no wall-clock expiry: a host that
never returns keeps that model's destructive convergence blocked, while
availability work and other models' destructive work continue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from gridctl.domain import ActionKind, ModelProfile, ResidencyState
from gridctl.reconcile.codes import CancelReason
from gridctl.reconcile.guards import pending_drain_unsafe
from gridctl.reconcile.observing import FleetView
from gridctl.reconcile.proposals import PlanIndex
from gridctl.reconcile.records import Cancellation, PendingAction, WithdrawnDestructive

_DRAIN_DONE = frozenset({ResidencyState.DRAINING, ResidencyState.UNLOADING, ResidencyState.CACHED})
_UNLOAD_DONE = frozenset({ResidencyState.CACHED})


def postcondition_proven(w: WithdrawnDestructive, view: FleetView) -> bool:
    """An authoritative heartbeat, newer than the withdrawal, shows the step's result."""
    seen = view.observed_at(w.host_id)
    if seen is None or seen <= w.withdrawn_at:
        return False
    done = _DRAIN_DONE if w.kind is ActionKind.DRAIN else _UNLOAD_DONE
    return all(r.state in done for r in view.residencies(w.host_id, w.model_id))


def still_withdrawn(
    withdrawn: Iterable[WithdrawnDestructive], acknowledged: set[str], view: FleetView
) -> list[WithdrawnDestructive]:
    return [
        w
        for w in withdrawn
        if w.action_id not in acknowledged and not postcondition_proven(w, view)
    ]


def withdraw_unsafe_batches(
    pending: Sequence[PendingAction],
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    now: float,
) -> tuple[list[Cancellation], list[WithdrawnDestructive]]:
    """Cancel every pending destructive step of each model with an unsafe member."""
    unsafe_models = {
        p.action.model_id
        for p in pending
        if p.action.kind is ActionKind.DRAIN
        and pending_drain_unsafe(
            p.action.model_id, p.action.host_id, p.action.artifact_sha256, index, view, profiles
        )
    }
    cancellations: list[Cancellation] = []
    withdrawn: list[WithdrawnDestructive] = []
    for p in sorted(pending, key=lambda p: p.action_id):
        a = p.action
        if not a.kind.destructive or a.model_id not in unsafe_models:
            continue
        cancellations.append(Cancellation(a.action_id, CancelReason.WITHDRAWN_UNSAFE, p.delivered))
        if p.delivered:
            withdrawn.append(WithdrawnDestructive(a.action_id, a.kind, a.host_id, a.model_id, now))
    return cancellations, withdrawn
