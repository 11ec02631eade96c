"""Residency guards: safety invariants 5-7 applied to one destructive step.

* replacement_not_ready — an old replica is not drained until every required
  desired replica of the model reports ready elsewhere and the ready count
  elsewhere still meets the model's floor (target, and min_replicas); a victim the
  plan explicitly preempts has no floor beyond its assigned replacements.
* trusted_replacement_not_ready — the last managed replica of a baseline model
  is not drained on the strength of external or manual inventory alone.
* requests_in_flight — a draining residency with requests in flight is not
  unloaded; other models' work on the same host does not count.
* minimum_residency — a replica is not drained before its profile's minimum
  residency has elapsed since it was loaded.

A residency that cannot serve whatever the plan says (``Proposal.cannot_serve``: a
split's coordinator engine whose split is no longer whole) keeps nothing available,
so neither drain guard holds it back; requests in flight still hold its unload.

Each check returns a code and, when the block ends at a known time, that time.
"""

from __future__ import annotations

from collections.abc import Mapping

from gridctl.domain import ActionKind, ModelProfile
from gridctl.reconcile.codes import BlockedCode
from gridctl.reconcile.observing import FleetView, artifact_matches
from gridctl.reconcile.proposals import PlanIndex, Proposal
from gridctl.reconcile.records import ControllerMemory

Block = tuple[BlockedCode, float | None]


def replacement_block(
    model_id: str, host_id: str, index: PlanIndex, view: FleetView, floor: int
) -> BlockedCode | None:
    """Would draining ``model_id`` on ``host_id`` remove a required replica?"""
    elsewhere = [r for r in view.ready_replicas(model_id) if r.host_id != host_id]
    ready_hosts = {r.host_id for r in elsewhere}
    for a in index.by_model.get(model_id, ()):
        if a.host_id != host_id and a.host_id not in ready_hosts:
            return BlockedCode.REPLACEMENT_NOT_READY
    if len(ready_hosts) < floor:
        return BlockedCode.REPLACEMENT_NOT_READY
    if index.is_baseline(model_id) and floor > 0 and not any(r.trusted for r in elsewhere):
        return BlockedCode.TRUSTED_REPLACEMENT_NOT_READY
    return None


def model_floor(model_id: str, index: PlanIndex, profiles: Mapping[str, ModelProfile]) -> int:
    """How many ready replicas must survive a drain: zero once a model is retired."""
    profile = profiles.get(model_id)
    if profile is None:
        return 0
    return max(index.target(model_id), profile.min_replicas)


def drain_floor(
    model_id: str, host_id: str, index: PlanIndex, profiles: Mapping[str, ModelProfile]
) -> int:
    """The ready replicas that must survive draining ``model_id`` on ``host_id``.

    An explicit higher-priority preemption the plan names is the spec's deliberate
    exception to "capacity before removal" (invariant 3): the victim drains first and
    its shortfall stays reported in the plan, so only the replacements the plan still
    assigns the victim elsewhere must be ready (``replacement_block`` checks those);
    otherwise the model's floor holds. A staged preemption is therefore executable,
    never shown and then held forever.
    """
    if (host_id, model_id) in index.preempted:
        return 0
    return model_floor(model_id, index, profiles)


def destructive_safety(
    p: Proposal,
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    memory: ControllerMemory,
    now: float,
) -> Block | None:
    """The first residency guard that holds ``p`` back, if any."""
    residency = p.residency
    if p.kind is ActionKind.DRAIN and not p.cannot_serve:
        floor = drain_floor(p.model_id, p.host_id, index, profiles)
        code = replacement_block(p.model_id, p.host_id, index, view, floor)
        if code is not None:
            return code, None
        profile = profiles.get(p.model_id)
        tombstone = memory.tombstone(p.model_id)
        minimum = (
            profile.min_residency_seconds
            if profile is not None
            else (tombstone.min_residency_seconds if tombstone else 0.0)
        )
        if residency is not None and residency.loaded_at is not None:
            until = residency.loaded_at + minimum
            if now < until:
                return BlockedCode.MINIMUM_RESIDENCY, until
    if p.kind is ActionKind.UNLOAD and residency is not None and residency.active_requests > 0:
        return BlockedCode.REQUESTS_IN_FLIGHT, None
    return None


def pending_drain_unsafe(
    model_id: str,
    host_id: str,
    artifact_sha256: str | None,
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
) -> bool:
    """Fresh evidence against a drain already issued: its replacement vanished, or the
    plan wants that very replica (same revision) again."""
    wanted_again = (model_id, host_id) in index.assigned and artifact_matches(
        artifact_sha256, view.wanted_sha(model_id)
    )
    if wanted_again and (host_id, model_id) not in index.preempted:
        return True
    floor = drain_floor(model_id, host_id, index, profiles)
    return replacement_block(model_id, host_id, index, view, floor) is not None
