"""Plan versus actual: the lifecycle steps that would close the gap.

``constructive_proposals`` turns missing assignments into load/warm steps (a
warm depends on a load when the artifact is not cached) and fetches a staged
preemption's beneficiary weights before its victim drains.
``destructive_proposals`` turns obsolete or preempted managed residencies into
drain (when ready) or unload (when draining, or failed). Start times come from
the learned (host, model) load and warm timings, priors otherwise: a model's
missing replicas take their rounds fastest start path first, and a preemption
release carries the time its beneficiary needs to start on that host (cached
weights and learned warm time), so among equally disruptive victims the host
that serves soonest is released first. Nothing here decides
whether a step may run: guards, pacing and the governor do that.
Non-managed and pinned residencies never produce a step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from gridctl.domain import (
    ActionKind,
    Assignment,
    DemandClass,
    ModelProfile,
    Plan,
    Preemption,
    Residency,
    ResidencyState,
    SplitServe,
    SplitStageClaim,
)
from gridctl.reconcile.codes import BlockedCode
from gridctl.reconcile.identity import ActionKey
from gridctl.reconcile.observing import FleetView, artifact_matches
from gridctl.reconcile.records import ControllerMemory

_Frozen = TypeVar("_Frozen")
_new_instance = object.__new__


def amended(value: _Frozen, **changes: Any) -> _Frozen:
    """``dataclasses.replace(value, **changes)`` for a frozen ``Proposal`` or ``Action``, as a
    copy of every field with the changes written over it: ``replace`` re-runs ``__init__``
    (through ``object.__setattr__`` per field), five times the cost, for each of the hundreds
    of steps a cold fleet's tick proposes. Neither class has a ``__post_init__`` or a
    cached attribute this would skip; the changes must name fields."""
    copy = _new_instance(type(value))
    copy.__dict__.update(value.__dict__, **changes)
    return copy


@dataclass(frozen=True)
class StartupEstimate:
    """Expected seconds to fetch and to warm one model on one host (learned or prior)."""

    load_seconds: float
    warm_seconds: float


@dataclass(frozen=True)
class Proposal:
    """One step the reconciler would like to take, with everything ordering needs."""

    kind: ActionKind
    host_id: str
    model_id: str
    artifact_sha256: str | None
    memory_mb: int
    runtime: str | None
    reason: str
    priority: int
    demand_class: DemandClass | None  # None: routine cleanup, behind availability work
    round: int = 0  # replica round of the model it serves
    cold_start_seconds: float = 0.0
    needs_download: bool = False
    disruption: int = 0  # destructive release order: unload, idle drain, busy drain
    residency: Residency | None = None
    beneficiary: str | None = None
    dependency: ActionKey | None = None
    blocked: BlockedCode | None = None
    split_claim: SplitStageClaim | None = None  # the claim a ``split_claim`` step sends
    split_serve: SplitServe | None = None  # what a split coordinator's ``warm`` serves
    # the residency cannot serve whatever the plan says (a split that is not whole): no
    # availability guard keeps it, since it keeps nothing available
    cannot_serve: bool = False

    @property
    def key(self) -> ActionKey:
        return ActionKey(self.kind, self.host_id, self.model_id, self.artifact_sha256)


class PlanIndex:
    """The plan, indexed once per tick."""

    def __init__(self, plan: Plan, profiles: Mapping[str, ModelProfile]) -> None:
        self.plan = plan
        self.by_model: dict[str, list[Assignment]] = {}
        for a in sorted(plan.assignments, key=lambda a: (a.model_id, a.host_id)):
            self.by_model.setdefault(a.model_id, []).append(a)
        self.assigned: frozenset[tuple[str, str]] = frozenset(
            (a.model_id, a.host_id) for a in plan.assignments
        )
        self.targets: dict[str, int] = dict(plan.targets)
        self.preempted: dict[tuple[str, str], Preemption] = {
            (p.host_id, p.model_id): p for p in plan.preemptions
        }
        self._classes: dict[str, DemandClass] = {}
        for explanation in plan.explanations:
            if explanation.demand_class is not None:
                self._classes[explanation.model_id] = explanation.demand_class
        for a in plan.assignments:
            self._classes.setdefault(a.model_id, a.demand_class)
        self._profiles = profiles

    def target(self, model_id: str) -> int:
        return self.targets.get(model_id, len(self.by_model.get(model_id, ())))

    def demand_class(self, model_id: str) -> DemandClass:
        return self._classes.get(model_id, DemandClass.DIRECT)

    def priority(self, model_id: str) -> int:
        assignments = self.by_model.get(model_id)
        if assignments:
            return max(a.priority for a in assignments)
        profile = self._profiles.get(model_id)
        return profile.priority if profile else 0

    def is_baseline(self, model_id: str) -> bool:
        profile = self._profiles.get(model_id)
        if profile is not None and profile.min_replicas > 0:
            return True
        return any(
            a.demand_class in (DemandClass.BASELINE, DemandClass.PINNED)
            for a in self.by_model.get(model_id, ())
        )


def _estimate(
    startup: Mapping[tuple[str, str], StartupEstimate], profile: ModelProfile, host_id: str
) -> StartupEstimate:
    return startup.get(
        (host_id, profile.name), StartupEstimate(profile.load_seconds, profile.warm_seconds)
    )


def start_seconds(
    startup: Mapping[tuple[str, str], StartupEstimate],
    profile: ModelProfile,
    host_id: str,
    cached: bool,
) -> float:
    """Expected seconds until ``profile`` serves on ``host_id``: warm, plus fetch if needed."""
    estimate = _estimate(startup, profile, host_id)
    return estimate.warm_seconds + (0.0 if cached else estimate.load_seconds)


def _occupied(host_residencies: tuple[Residency, ...], sha: str | None) -> tuple[bool, bool]:
    """(blocks new work, already satisfied or converging) for one model on one host."""
    if any(not r.actuatable for r in host_residencies):
        return True, True  # inventory we may not touch; it satisfies or it is not ours
    satisfied = busy = False
    for r in host_residencies:
        matches = artifact_matches(r.artifact_sha256, sha)
        if matches and r.state in (
            ResidencyState.READY,
            ResidencyState.LOADING,
            ResidencyState.WARMING,
            ResidencyState.DRAINING,
            ResidencyState.UNLOADING,
        ):
            satisfied = True
        if not matches and r.state.occupies_memory:
            busy = True
    return busy, satisfied


def constructive_proposals(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    startup: Mapping[tuple[str, str], StartupEstimate],
) -> list[Proposal]:
    proposals: list[Proposal] = []
    for model_id in sorted(index.by_model):
        profile = profiles.get(model_id)
        if profile is None:
            continue  # retired or unknown: no availability work
        sha = profile.artifact_sha256
        missing: list[tuple[bool, Assignment]] = []
        satisfied_count = 0
        for a in index.by_model[model_id]:
            busy, satisfied = _occupied(view.residencies(a.host_id, model_id), sha)
            if satisfied:
                satisfied_count += 1
            else:
                missing.append((busy, a))
        missing.sort(key=lambda item: _start_order(item[1].host_id, profile, view, startup))
        for offset, (busy, a) in enumerate(missing):
            proposals.extend(
                _replica_steps(a, profile, view, startup, satisfied_count + offset, busy)
            )
    proposals.extend(_prefetches(index, view, profiles, startup))
    return proposals


def _start_order(
    host_id: str,
    profile: ModelProfile,
    view: FleetView,
    startup: Mapping[tuple[str, str], StartupEstimate],
) -> tuple[bool, float, str]:
    """Cached hosts first, then the fastest learned load-plus-warm path, then the id."""
    cached = view.is_cached(host_id, profile.name)
    return (not cached, start_seconds(startup, profile, host_id, cached), host_id)


def _replica_steps(
    a: Assignment,
    profile: ModelProfile,
    view: FleetView,
    startup: Mapping[tuple[str, str], StartupEstimate],
    round_: int,
    busy: bool,
) -> list[Proposal]:
    cached = view.is_cached(a.host_id, a.model_id)
    host_block = None if view.admits_new_work(a.host_id) else BlockedCode.HOST_UNAVAILABLE
    warm = Proposal(
        kind=ActionKind.WARM,
        host_id=a.host_id,
        model_id=a.model_id,
        artifact_sha256=profile.artifact_sha256,
        memory_mb=a.memory_mb,
        runtime=a.runtime,
        reason=f"start replica {round_ + 1}: {a.reason}",
        priority=a.priority,
        demand_class=a.demand_class,
        round=round_,
        needs_download=not cached,
        cold_start_seconds=start_seconds(startup, profile, a.host_id, cached),
        blocked=host_block or (BlockedCode.IN_PLACE_REPLACEMENT if busy else None),
    )
    if cached:
        return [warm]
    load = amended(
        warm,
        kind=ActionKind.LOAD,
        reason=f"fetch and verify weights for replica {round_ + 1}: {a.reason}",
        blocked=host_block,
    )
    return [load, amended(warm, dependency=load.key)]


def _prefetches(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    startup: Mapping[tuple[str, str], StartupEstimate],
) -> list[Proposal]:
    """Cache-only loads of a staged preemption's beneficiary before its victim drains."""
    proposals: list[Proposal] = []
    seen: set[tuple[str, str]] = set()
    rounds: dict[str, int] = {}
    for p in sorted(index.plan.preemptions, key=lambda p: (p.beneficiary, p.host_id, p.model_id)):
        profile = profiles.get(p.beneficiary)
        if profile is None or (p.host_id, p.beneficiary) in seen:
            continue
        round_ = rounds.get(p.beneficiary, len(view.ready_replicas(p.beneficiary)))
        rounds[p.beneficiary] = round_ + 1
        art = profile.artifact
        if not (art.source and art.sha256 and art.size_mb):
            continue
        if view.is_cached(p.host_id, p.beneficiary) or view.residencies(p.host_id, p.beneficiary):
            continue
        seen.add((p.host_id, p.beneficiary))
        proposals.append(
            Proposal(
                kind=ActionKind.LOAD,
                host_id=p.host_id,
                model_id=p.beneficiary,
                artifact_sha256=art.sha256,
                memory_mb=0,
                runtime=None,
                reason=f"prefetch weights before preempting {p.model_id}: {p.reason}",
                priority=index.priority(p.beneficiary),
                demand_class=index.demand_class(p.beneficiary),
                round=round_,
                needs_download=True,
                cold_start_seconds=_estimate(startup, profile, p.host_id).load_seconds,
                beneficiary=p.beneficiary,
                blocked=None if view.is_fresh(p.host_id) else BlockedCode.HOST_UNAVAILABLE,
            )
        )
    return proposals


def destructive_proposals(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    memory: ControllerMemory,
    startup: Mapping[tuple[str, str], StartupEstimate] | None = None,
) -> list[Proposal]:
    proposals: list[Proposal] = []
    releases: list[Proposal] = []
    for host_id in view.host_ids():
        host = view.host(host_id)
        assert host is not None
        for r in sorted(host.residencies, key=lambda r: (r.model_id, r.state, r.memory_mb)):
            if not r.actuatable:
                continue  # ownership: never actuated by gridctl
            if r.split_term is not None:
                continue  # a split's coordinator engine: ``splitserve`` decides
            profile = profiles.get(r.model_id)
            tombstone = memory.tombstone(r.model_id)
            if profile is None and tombstone is None:
                continue  # unknown model: no authority to remove it
            wanted = artifact_matches(r.artifact_sha256, view.wanted_sha(r.model_id))
            preemption = index.preempted.get((host_id, r.model_id))
            if preemption is None and wanted and (r.model_id, host_id) in index.assigned:
                continue
            if r.state is ResidencyState.READY:
                kind = ActionKind.DRAIN
                disruption = 1 if r.active_requests == 0 else 2
            elif r.state in (ResidencyState.DRAINING, ResidencyState.FAILED):
                kind, disruption = ActionKind.UNLOAD, 0
            else:
                continue  # loading/warming settle first; unloading/cached need nothing
            draft = Proposal(
                kind=kind,
                host_id=host_id,
                model_id=r.model_id,
                artifact_sha256=r.artifact_sha256,
                memory_mb=r.memory_mb,
                runtime=r.runtime,
                reason="",
                priority=profile.priority if profile else 0,
                demand_class=None,
                disruption=disruption,
                residency=r,
            )
            if preemption is not None:
                # a preemption release inherits the beneficiary's priority and class
                b = preemption.beneficiary
                wanted_profile = profiles.get(b)
                releases.append(
                    replace(
                        draft,
                        priority=index.priority(b),
                        demand_class=index.demand_class(b),
                        beneficiary=b,
                        reason=f"preempted for {b}: {preemption.reason}",
                        cold_start_seconds=start_seconds(
                            startup or {}, wanted_profile, host_id, view.is_cached(host_id, b)
                        )
                        if wanted_profile is not None
                        else 0.0,
                    )
                )
            elif profile is None:
                proposals.append(replace(draft, reason="retired: model profile removed"))
            elif not wanted:
                proposals.append(replace(draft, reason="obsolete artifact revision"))
            else:
                proposals.append(replace(draft, reason="not in the desired placement"))
    return proposals + _release_rounds(releases, view)


def _release_rounds(releases: list[Proposal], view: FleetView) -> list[Proposal]:
    """Give each release its beneficiary's replica round: within one wave, drained
    capacity first, then idle, then busy victims; among equally disruptive ones, the
    host where the beneficiary starts soonest."""
    rounds: dict[str, int] = {}
    ordered: list[Proposal] = []
    for p in sorted(
        releases,
        key=lambda p: (p.beneficiary or "", p.disruption, p.cold_start_seconds, p.host_id),
    ):
        b = p.beneficiary or ""
        round_ = rounds.get(b, len(view.ready_replicas(b)))
        rounds[b] = round_ + 1
        ordered.append(replace(p, round=round_))
    return ordered
