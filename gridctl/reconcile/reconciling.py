"""The reconciler: plan versus actual to the smallest safe set of fenced actions.

``reconcile`` is pure: the same inputs give the same result, byte for byte.
One tick runs this pipeline:

1. modes — leaving automatic cancels every pending command; retired models
   lose their pending availability work; restored commands whose host never
   re-registered lose their slot once the restart grace is over;
2. destructive-batch withdrawal on fresh evidence (``withdrawal``);
3. drift (``proposals``; a planned split's claims and releases, ``splitsteps``, and
   its coordinator engine, ``splitserve``)
   matched against pending actions by key, so a pending
   equivalent is carried instead of re-issued; undelivered pending work the
   plan no longer wants is cancelled;
4. for new work: restart and host gates, residency guards (``guards``),
   pacing (``pacing``), then the governor in service order (``governor``);
5. the mode decides: observe records drift as deferred, recommend proposes
   without executing, automatic executes within the governors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from gridctl.domain import (
    Action,
    ControllerPolicy,
    FleetSnapshot,
    Mode,
    ModelProfile,
    Plan,
)
from gridctl.reconcile.caching import cache_proposals
from gridctl.reconcile.codes import BlockedCode, CancelReason
from gridctl.reconcile.governor import Governor, service_key
from gridctl.reconcile.grace import advance_grace, grace_active
from gridctl.reconcile.guards import destructive_safety
from gridctl.reconcile.identity import ActionKey, attempt_index, derive_action_id
from gridctl.reconcile.observing import FleetView
from gridctl.reconcile.pacing import HistoryIndex, pacing_block
from gridctl.reconcile.proposals import (
    PlanIndex,
    Proposal,
    StartupEstimate,
    amended,
    constructive_proposals,
    destructive_proposals,
)
from gridctl.reconcile.records import (
    Cancellation,
    ControllerMemory,
    HistoryEntry,
    PendingAction,
    ReconcileResult,
)
from gridctl.reconcile.seeding import fetched_remotely
from gridctl.reconcile.splitserve import split_coordinator_releases, split_serve_proposals
from gridctl.reconcile.splitsteps import split_claim_proposals, split_release_proposals
from gridctl.reconcile.withdrawal import still_withdrawn, withdraw_unsafe_batches


def action_key(a: Action) -> ActionKey:
    return ActionKey(a.kind, a.host_id, a.model_id, a.artifact_sha256)


@dataclass(frozen=True)
class _Decided:
    proposal: Proposal
    action: Action
    pending: PendingAction | None = None


def reconcile(
    plan: Plan,
    snapshot: FleetSnapshot,
    profiles: Mapping[str, ModelProfile],
    policy: ControllerPolicy,
    mode: Mode,
    pending: Sequence[PendingAction],
    history: Sequence[HistoryEntry],
    now: float,
    *,
    memory: ControllerMemory | None = None,
    startup: Mapping[tuple[str, str], StartupEstimate] | None = None,
    approved: frozenset[str] = frozenset(),
    epoch: str = "",
) -> ReconcileResult:
    """One reconciliation tick. See the module docstring for the pipeline.

    ``profiles`` are the live model profiles (retired ones appear only as
    tombstones in ``memory``); ``pending`` the executable actions without a
    terminal receipt; ``history`` the finished ones; ``startup`` optional
    learned (host, model) load/warm estimates, profile priors otherwise.
    ``approved``: in recommend mode, the action ids of an applied saved plan; they are
    decided exactly as in automatic mode, and every other action stays a proposal
    (``not_in_applied_plan``) that spends no governor budget. ``epoch``: the controller
    state's, part of every new action id (``derive_action_id``).
    """
    approving = mode is Mode.RECOMMEND and bool(approved)
    if approving:
        mode = Mode.AUTOMATIC
    memory = advance_grace(memory or ControllerMemory(), now)
    view = FleetView(snapshot, profiles, policy, memory, now)
    index = PlanIndex(plan, profiles)
    past = HistoryIndex(history)
    in_grace = grace_active(memory, policy, now)

    live, cancellations = _triage_pending(pending, profiles, memory, view, mode, in_grace)
    withdrawn = still_withdrawn(memory.withdrawn, past.acknowledged, view)
    unsafe, newly_withdrawn = withdraw_unsafe_batches(live, index, view, profiles, now)
    cancellations += unsafe
    dropped = {c.action_id for c in unsafe}
    live = [p for p in live if p.action_id not in dropped]
    withdrawn += newly_withdrawn
    memory = replace(memory, withdrawn=tuple(sorted(withdrawn, key=lambda w: w.action_id)))

    proposals = sorted(
        constructive_proposals(index, view, profiles, startup or {})
        + destructive_proposals(index, view, profiles, memory, startup or {})
        + cache_proposals(plan, snapshot, profiles, policy)
        + split_claim_proposals(index, view, profiles, history, pending, now)
        + split_release_proposals(index, view, profiles, history)
        + split_serve_proposals(index, view, profiles, history, pending, now)
        + split_coordinator_releases(index, view, profiles, history, pending),
        key=service_key,
    )
    by_key = {action_key(p.action): p for p in live}
    serving: dict[str, Proposal] = {}  # pending action id -> the proposal it carries
    for proposal in proposals:
        held = by_key.get(proposal.key)
        if held is not None:
            serving.setdefault(held.action_id, proposal)
    matched = set(serving)
    for p in live:
        if p.action_id not in matched and not p.delivered:
            cancellations.append(Cancellation(p.action_id, CancelReason.SUPERSEDED, False))
    live = [
        _serving(p, serving.get(p.action_id)) for p in live if p.action_id in matched or p.delivered
    ]

    blocked_models = {w.model_id for w in memory.withdrawn}
    decided = _decide(
        proposals,
        {action_key(p.action): p for p in live},
        Governor(policy, view, live, history, _remote_digests(profiles)),
        _Context(view, index, past, profiles, policy, memory, now, in_grace, blocked_models, epoch),
        attempt_index(history),
        approved if approving else None,
    )
    governor_withdrawn = decided.withdrawn
    cancellations += governor_withdrawn
    gone = {c.action_id for c in governor_withdrawn}
    actions = [d.action for d in decided.items if d.action.action_id not in gone]
    orphans = [p.action for p in live if p.action_id not in matched and p.action_id not in gone]
    actions += orphans

    cancellations = sorted(cancellations, key=lambda c: c.action_id)
    if mode is Mode.OBSERVE:
        deferred = tuple(
            replace(d.action, executable=False, blocked=BlockedCode.OBSERVE_MODE, not_before=None)
            for d in decided.items
        )
        return ReconcileResult((), (), tuple(cancellations), deferred, memory)
    if mode is Mode.RECOMMEND:
        actions = [amended(a, executable=False) for a in actions]
        return ReconcileResult(tuple(actions), (), tuple(cancellations), (), memory)
    enqueue = tuple(
        PendingAction(action=d.action, demand_class=d.proposal.demand_class)
        for d in decided.items
        if d.action.executable and d.pending is None and d.action.action_id not in gone
    )
    return ReconcileResult(tuple(actions), enqueue, tuple(cancellations), (), memory)


def _serving(p: PendingAction, proposal: Proposal | None) -> PendingAction:
    """A carried action ranks by the work it serves in this tick: the demand class and
    priority of its proposal, not the ones it was queued with. Otherwise a warm queued
    while its replica was inferred demand would count as lower-class work once the replica
    is pinned, and the governor would withdraw it to admit its own load."""
    if proposal is None:
        return p
    if p.demand_class == proposal.demand_class and p.action.priority == proposal.priority:
        return p
    action = replace(p.action, priority=proposal.priority)
    return replace(p, action=action, demand_class=proposal.demand_class)


def _remote_digests(profiles: Mapping[str, ModelProfile]) -> frozenset[str]:
    return frozenset(
        p.artifact.sha256
        for p in profiles.values()
        if p.artifact.sha256 and fetched_remotely(p.artifact.source)
    )


def _triage_pending(
    pending: Sequence[PendingAction],
    profiles: Mapping[str, ModelProfile],
    memory: ControllerMemory,
    view: FleetView,
    mode: Mode,
    in_grace: bool,
) -> tuple[list[PendingAction], list[Cancellation]]:
    live: list[PendingAction] = []
    cancellations: list[Cancellation] = []
    for p in sorted(pending, key=lambda p: p.action_id):
        a = p.action
        reason: CancelReason | None = None
        if mode is not Mode.AUTOMATIC:
            reason = CancelReason.MODE_CHANGED
        elif a.model_id not in profiles and not a.kind.destructive:
            reason = (
                CancelReason.RETIRED if memory.tombstone(a.model_id) else CancelReason.SUPERSEDED
            )
        elif p.restored and not in_grace and not view.is_registered(a.host_id):
            reason = CancelReason.MEMBERSHIP_RECOVERY_EXPIRED
        if reason is None:
            live.append(p)
        else:
            cancellations.append(Cancellation(p.action_id, reason, p.delivered))
    return live, cancellations


@dataclass(frozen=True)
class _Context:
    view: FleetView
    index: PlanIndex
    past: HistoryIndex
    profiles: Mapping[str, ModelProfile]
    policy: ControllerPolicy
    memory: ControllerMemory
    now: float
    in_grace: bool
    blocked_models: set[str]
    epoch: str = ""


@dataclass(frozen=True)
class _Decisions:
    items: list[_Decided]
    withdrawn: list[Cancellation]


def _gate(p: Proposal, ctx: _Context) -> tuple[BlockedCode, float | None] | None:
    """Everything but the governor: restart and host gates, guards, pacing."""
    if p.blocked is not None:
        return p.blocked, None
    if p.kind.destructive:
        if ctx.in_grace:
            return BlockedCode.MEMBERSHIP_RECOVERY, None
        if not ctx.view.is_registered(p.host_id):
            return BlockedCode.AWAITING_REGISTRATION, None
        if not ctx.view.is_fresh(p.host_id):
            return BlockedCode.HOST_UNAVAILABLE, None
        if p.model_id in ctx.blocked_models:
            return BlockedCode.WITHDRAWN_DESTRUCTIVE, None
        block = destructive_safety(p, ctx.index, ctx.view, ctx.profiles, ctx.memory, ctx.now)
        if block is not None:
            return block
    return pacing_block(p, ctx.past, ctx.view, ctx.policy, ctx.now)


def _decide(
    proposals: Sequence[Proposal],
    pending: Mapping[ActionKey, PendingAction],
    governor: Governor,
    ctx: _Context,
    attempts: Mapping[ActionKey, int],
    only: frozenset[str] | None = None,
) -> _Decisions:
    items: list[_Decided] = []
    ids: dict[ActionKey, str] = {}
    for p in proposals:
        key = p.key  # a new ``ActionKey`` per read: read once
        held = pending.get(key)
        if held is not None:
            ids[key] = held.action_id
            items.append(_Decided(p, replace(held.action, executable=True, blocked=None), held))
            continue
        attempt = attempts.get(key, 0)
        action_id = derive_action_id(key, attempt, ctx.epoch)
        ids[key] = action_id
        depends_on: tuple[str, ...] = ()
        if p.dependency is not None:
            dep_pending = pending.get(p.dependency)
            dep_id = dep_pending.action_id if dep_pending else ids.get(p.dependency)
            depends_on = (dep_id,) if dep_id else ()
        gate = _gate(p, ctx)
        code, not_before = gate if gate is not None else (None, None)
        if code is None and depends_on and not governor.holds(depends_on[0]):
            code = BlockedCode.DEPENDENCY_DEFERRED
        if code is None and only is not None and action_id not in only:
            code = BlockedCode.NOT_IN_APPLIED_PLAN
        if code is None:
            code = governor.admit(p, action_id)
        reason = p.reason
        fallback = governor.fallbacks.get(action_id)
        if fallback is not None:
            reason = f"{reason}; {fallback}" if reason else str(fallback)
        items.append(
            _Decided(
                p,
                Action(
                    action_id=action_id,
                    kind=p.kind,
                    host_id=p.host_id,
                    model_id=p.model_id,
                    memory_mb=p.memory_mb,
                    artifact_sha256=p.artifact_sha256,
                    runtime=p.runtime,
                    attempt=attempt,
                    depends_on=depends_on,
                    executable=code is None,
                    blocked=code,
                    reason=reason,
                    priority=p.priority,
                    created_at=ctx.now,
                    not_before=not_before,
                    split_claim=p.split_claim,
                    split_serve=p.split_serve,
                ),
            )
        )
    return _Decisions(items, governor.withdrawn)
