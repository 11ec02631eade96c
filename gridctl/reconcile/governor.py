"""The mutation governor: service order and the limits on concurrent change.

Order (``service_key``): availability work and capacity-release preemptions
first, routine cleanup last; then administrator priority (a preemption release
inherits its beneficiary's); then demand class (pinned/baseline/direct before
inferred); then readiness (no download before download); then the model's
replica round, so one service's second replica never starts before a peer's
first; then the estimated remaining cold-start path; then, within one
preemption wave, already-drained before idle before busy victims; then ids.

Limits: a global and a per-host count of concurrent mutations, where every
pending action (delivered or not) holds a slot, and an exact-artifact load
fanout counting pending and observed running loads of the same digest, and, while no
host holds a verified copy of a digest fetched over the network, one origin download
at a time (``seeding``). A dependent warm whose load is held back is held back too.
When a slot is full, an undelivered constructive action of a strictly lower
service class may be withdrawn (a leaf warm before its load, the newest
first); delivered actions keep their slots until acknowledged, and
equal-class work is never churned.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gridctl.domain import ActionKind, ControllerPolicy, DemandClass
from gridctl.reconcile.codes import BlockedCode, CancelReason
from gridctl.reconcile.observing import FleetView, artifact_identity
from gridctl.reconcile.proposals import Proposal
from gridctl.reconcile.records import Cancellation, HistoryEntry, PendingAction
from gridctl.reconcile.seeding import SeedFallback, Seeding

_CLASS_RANK = {
    DemandClass.PINNED: 0,
    DemandClass.BASELINE: 0,
    DemandClass.DIRECT: 0,
    DemandClass.INFERRED: 1,
}
_KIND_RANK = {
    ActionKind.LOAD: 0,
    ActionKind.WARM: 1,
    ActionKind.UNLOAD: 2,
    ActionKind.DRAIN: 3,
    ActionKind.EVICT: 4,
    ActionKind.SPLIT_CLAIM: 5,
    ActionKind.SPLIT_RELEASE: 6,
}

ServiceClass = tuple[int, int, int]


def service_class(demand_class: DemandClass | None, priority: int) -> ServiceClass:
    """Smaller is more important: (routine cleanup?, -priority, class rank)."""
    if demand_class is None:
        return (1, -priority, 2)
    return (0, -priority, _CLASS_RANK[demand_class])


def service_key(p: Proposal) -> tuple[object, ...]:
    return (
        *service_class(p.demand_class, p.priority),
        1 if p.needs_download else 0,
        p.round,
        p.cold_start_seconds,
        p.disruption,
        p.model_id,
        p.host_id,
        _KIND_RANK[p.kind],
    )


def pending_key(p: PendingAction) -> tuple[object, ...]:
    a = p.action
    return (*service_class(p.demand_class, a.priority), p.queued, a.created_at, a.action_id)


def delivery_order(pending: Iterable[PendingAction]) -> list[PendingAction]:
    """Delivery preserves service order; FIFO breaks ties within one class."""
    return sorted(pending, key=pending_key)


class Governor:
    """Slot accounting for one tick; private to one ``reconcile`` call."""

    def __init__(
        self,
        policy: ControllerPolicy,
        view: FleetView,
        pending: Sequence[PendingAction],
        history: Iterable[HistoryEntry] = (),
        remote: frozenset[str] = frozenset(),
    ) -> None:
        self._policy = policy
        self._view = view
        self._seeding = Seeding(view, history)
        self._remote = remote  # digests a profile fetches over the network: seeded
        self.fallbacks: dict[str, SeedFallback] = {}  # action id -> why it skipped the seed
        self.pending: list[PendingAction] = list(pending)
        self.admitted: dict[str, str] = {}  # action id -> host id
        self.withdrawn: list[Cancellation] = []
        self._held: set[str] = {p.action_id for p in self.pending}
        self._per_host: dict[str, int] = {}
        self._loads: dict[str, set[tuple[str, str]]] = {}  # identity -> (host, model)
        for p in self.pending:
            self._per_host[p.action.host_id] = self._per_host.get(p.action.host_id, 0) + 1
            identity = artifact_identity(p.action.artifact_sha256)
            if p.action.kind is ActionKind.LOAD and identity is not None:
                self._loads.setdefault(identity, set()).add((p.action.host_id, p.action.model_id))

    def holds(self, action_id: str) -> bool:
        """Is this action pending or admitted this tick (so a dependant may follow it)?"""
        return action_id in self.admitted or action_id in self._held

    def _global_used(self) -> int:
        return len(self._held) + len(self.admitted)

    def _host_used(self, host_id: str) -> int:
        return self._per_host.get(host_id, 0)

    def admit(self, p: Proposal, action_id: str) -> BlockedCode | None:
        """Admit ``p`` or say which limit holds it back; may withdraw lower-class work."""
        identity = artifact_identity(p.artifact_sha256)
        if p.kind is ActionKind.LOAD and identity is not None:
            loading = self._loads.get(identity, set()) | self._view.running_loads(identity)
            replica = (p.host_id, p.model_id)
            fallback: SeedFallback | None = None
            if replica not in loading:
                if len(loading) >= self._policy.artifact_fanout:
                    return BlockedCode.ARTIFACT_FANOUT
                if p.artifact_sha256 in self._remote:
                    verdict = self._seeding.verdict(p.artifact_sha256, loading)
                    if verdict.wait:
                        return BlockedCode.ARTIFACT_SEEDING
                    fallback = verdict.fallback
        host_full = self._host_used(p.host_id) >= self._policy.max_concurrent_mutations_per_host
        global_full = self._global_used() >= self._policy.max_concurrent_mutations
        if host_full or global_full:
            victim = self._lower_class_victim(p, host_full)
            if victim is None:
                return BlockedCode.HOST_GOVERNOR if host_full else BlockedCode.MUTATION_GOVERNOR
            self._drop(victim)
        self.admitted[action_id] = p.host_id
        self._per_host[p.host_id] = self._per_host.get(p.host_id, 0) + 1
        if p.kind is ActionKind.LOAD and identity is not None:
            self._loads.setdefault(identity, set()).add((p.host_id, p.model_id))
            if fallback is not None:
                self.fallbacks[action_id] = fallback
        return None

    def _lower_class_victim(self, p: Proposal, on_host: bool) -> PendingAction | None:
        """An undelivered constructive action of a strictly lower class whose slot,
        once freed, lets ``p`` in; None when no single withdrawal would suffice."""
        mine = service_class(p.demand_class, p.priority)
        victims = [
            v
            for v in self.pending
            if not v.delivered
            and not v.action.kind.destructive
            and service_class(v.demand_class, v.action.priority) > mine
            and (not on_host or v.action.host_id == p.host_id)
        ]
        if not victims:
            return None
        victims.sort(
            key=lambda v: (
                service_class(v.demand_class, v.action.priority),
                v.action.kind is ActionKind.WARM,  # a leaf goes before its prerequisite
                v.queued,
                v.action.created_at,
                v.action_id,
            ),
            reverse=True,
        )
        victim = victims[0]
        host_after = self._host_used(p.host_id) - (victim.action.host_id == p.host_id)
        if host_after >= self._policy.max_concurrent_mutations_per_host:
            return None
        if self._global_used() - 1 >= self._policy.max_concurrent_mutations:
            return None
        return victim

    def _drop(self, victim: PendingAction) -> None:
        self.pending = [p for p in self.pending if p.action_id != victim.action_id]
        self._held.discard(victim.action_id)
        host = victim.action.host_id
        self._per_host[host] = self._per_host.get(host, 1) - 1
        self.withdrawn.append(
            Cancellation(
                victim.action_id, CancelReason.WITHDRAWN_FOR_HIGHER_CLASS, victim.delivered
            )
        )
        a = victim.action
        if a.kind is ActionKind.LOAD:
            identity = artifact_identity(a.artifact_sha256)
            hosts = self._loads.get(identity) if identity is not None else None
            if hosts is not None:
                hosts.discard((a.host_id, a.model_id))
            for dependant in [p for p in self.pending if a.action_id in p.action.depends_on]:
                self._drop(dependant)
