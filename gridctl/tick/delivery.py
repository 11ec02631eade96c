"""The delivery gate: whether one pending action may leave as a command now, and why not.

Every rule the controller applies before a command is handed to its node lives
here, as one pure function over the facts of the moment, so the controller and
the scenario lab deliver by the same rule (allocator.md, "Reconciliation and
modes" and "A drain or unload is stricter"):

1. ``no_authority`` — nothing is issued without authority and a planned generation.
2. ``not_executable`` — recommendations and blocked work never leave.
3. ``not_approved`` — outside automatic mode only the actions of an applied plan run.
4. ``not_before`` — a backoff or cooldown has not passed yet.
5. ``last_replica`` — a drain/unload/evict of a serving replica waits until at least the
   plan's target of *other* routable replicas remain, each with more than
   ``destructive_min_route_lease_seconds`` of route lease left, unless the plan names the
   replica an explicit preemption victim (the victim drains first, invariant 3).
6. ``safety_revision`` — destructive work waits while the safety revision moved since the
   last successful tick (a heartbeat, mode or registration changed what it was planned on).
7. ``eviction_invalid`` — a queued eviction is revalidated on the host's latest report.

Rules 5-7 judge only work not yet delivered: a delivered command is re-sent
unchanged (its node already holds it). The controller calls the gate before it
writes the delivery marker and again after, on facts read afresh; the lab builds
the same facts from its simulated heartbeats (``routes_from_hosts``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from gridctl.domain import ActionKind, HostSnapshot, Mode, ModelProfile, Plan, ResidencyState
from gridctl.reconcile import PendingAction
from gridctl.reconcile.caching import eviction_problem


class Withheld(StrEnum):
    """Why the gate kept an action back (the named reason of a ``Verdict``)."""

    NO_AUTHORITY = "no_authority"
    NOT_EXECUTABLE = "not_executable"
    NOT_APPROVED = "not_approved"
    NOT_BEFORE = "not_before"
    LAST_REPLICA = "last_replica"
    SAFETY_REVISION = "safety_revision"
    EVICTION_INVALID = "eviction_invalid"

    @property
    def safety(self) -> bool:
        """A destructive-safety hold, shown to the operator as the delivery safety error."""
        return self in (Withheld.LAST_REPLICA, Withheld.SAFETY_REVISION)


@dataclass(frozen=True)
class RouteLease:
    """One routable replica of a model and how long its routing lease still runs."""

    host_id: str
    lease_left: float


@dataclass(frozen=True)
class DeliveryFacts:
    """What the gate reads, as of one instant.

    ``routes`` needs only the models of undelivered destructive actions and ``hosts``
    only the hosts of undelivered evictions; a model or host missing from them has no
    routable replica / no report."""

    now: float
    mode: Mode
    issuing: bool
    plan: Plan | None
    min_route_lease_seconds: float
    safety_current: bool = True
    approved: frozenset[str] = frozenset()
    routes: Mapping[str, tuple[RouteLease, ...]] = field(default_factory=dict)
    hosts: Mapping[str, HostSnapshot] = field(default_factory=dict)
    profiles: Mapping[str, ModelProfile] = field(default_factory=dict)


@dataclass(frozen=True)
class Verdict:
    deliver: bool
    withheld: Withheld | None = None
    reason: str = ""


DELIVER = Verdict(True)


def _hold(rule: Withheld, reason: str) -> Verdict:
    return Verdict(False, rule, reason)


def replica_problem(model_id: str, host_id: str, facts: DeliveryFacts) -> str | None:
    """Why removing ``model_id``'s replica on ``host_id`` must wait (rule 5), or None."""
    plan = facts.plan
    target = dict(plan.targets).get(model_id, 0) if plan is not None else 0
    if target <= 0 or plan is None:
        return None
    if any(p.model_id == model_id and p.host_id == host_id for p in plan.preemptions):
        return None
    serving = facts.routes.get(model_id, ())
    if not any(route.host_id == host_id for route in serving):
        return None  # not a serving replica: removing it takes no capacity away
    margin = facts.min_route_lease_seconds
    live = [r for r in serving if r.host_id != host_id and r.lease_left > margin]
    if len(live) >= target:
        return None
    return (
        f"drain of {model_id} on {host_id} held back: {len(live)} replacement route(s) with "
        f"more than {margin:g}s of lease left, {target} required"
    )


def delivery_gate(held: PendingAction, facts: DeliveryFacts) -> Verdict:
    """Deliver ``held`` now, or the first rule that keeps it back (see the module doc)."""
    action = held.action
    if not facts.issuing:
        return _hold(Withheld.NO_AUTHORITY, "no authority or nothing planned yet")
    if not action.executable:
        return _hold(Withheld.NOT_EXECUTABLE, action.blocked or "a recommendation only")
    if facts.mode is not Mode.AUTOMATIC and held.action_id not in facts.approved:
        return _hold(
            Withheld.NOT_APPROVED, f"{facts.mode.value} mode: not an action of an applied plan"
        )
    if action.not_before is not None and action.not_before > facts.now:
        return _hold(Withheld.NOT_BEFORE, f"not before {action.not_before:.3f}")
    if held.delivered:
        return DELIVER
    if action.kind.destructive:
        problem = replica_problem(action.model_id, action.host_id, facts)
        if problem is not None:
            return _hold(Withheld.LAST_REPLICA, problem)
        if not facts.safety_current:
            return _hold(
                Withheld.SAFETY_REVISION,
                f"{action.kind.value} of {action.model_id} on {action.host_id} held back: "
                "destructive safety changed since the last successful tick",
            )
    if action.kind is ActionKind.EVICT:
        host = facts.hosts.get(action.host_id)
        problem = eviction_problem(action.model_id, action.artifact_sha256, host, facts.profiles)
        if problem is not None:
            return _hold(Withheld.EVICTION_INVALID, problem)
    return DELIVER


def routes_from_hosts(
    hosts: Iterable[HostSnapshot], now: float, route_lease_seconds: float
) -> dict[str, tuple[RouteLease, ...]]:
    """Routable replicas as a fleet of heartbeats alone shows them: a READY residency on a
    host that admits new work, its lease running from the host's last heartbeat."""
    found: dict[str, list[RouteLease]] = {}
    for host in sorted(hosts, key=lambda h: h.host_id):
        if host.last_heartbeat is None or not host.state.admits_new_work:
            continue
        left = host.last_heartbeat + route_lease_seconds - now
        if left < 0:
            continue
        for r in host.residencies:
            if r.state is ResidencyState.READY:
                found.setdefault(r.model_id, []).append(RouteLease(host.host_id, left))
    return {model: tuple(rows) for model, rows in sorted(found.items())}


__all__ = [
    "DELIVER",
    "DeliveryFacts",
    "RouteLease",
    "Verdict",
    "Withheld",
    "delivery_gate",
    "replica_problem",
    "routes_from_hosts",
]
