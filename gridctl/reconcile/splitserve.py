"""A planned split's coordinator engine: started after the startup quorum, stopped when
the split it serves is no longer whole or no longer planned.

The claims (``splitsteps``) put a stage server behind a TLS tunnel on every stage host;
each stage host then reports the stage it serves (``HostSnapshot.split_stages``: model,
coordinator, term, position, layer range and the tunnel's ``host:port``). This module
turns that into the coordinator's own engine, ``llama-server --rpc`` on the coordinator
host, and back:

- **Start.** For a planned split of term ``T`` (``splitsteps.split_term``), the
  coordinator host gets a ``warm`` carrying ``split_serve`` (the generation and every
  stage's endpoint, in order), preceded by a ``load`` of the weights when they are not
  cached there, once two things hold:

  1. the startup quorum of the specification: at least ``quorum(stages)`` of the
     planned stages accepted this generation's claim (``split_claim`` receipts that
     succeeded). Without it nothing loads.
  2. every planned stage is reported served under ``T`` with its planned position and
     layer range: the engine needs all of them to hold the model, so a quorum that
     lacks a stage waits (the specification's "the later load can still fail if the
     missing stage is required for the concrete topology"; gridctl does not start a
     load it knows must fail).

  The coordinator's engine holds no layers (they are on the stages, whose memory the
  plan charges), so its steps carry no memory of their own. The node fences the warm
  again on its own accepted claim (it is stage 0's host): a warm of a superseded term
  is refused there ``stale_term``.

- **Stop.** A coordinator engine (a residency with ``split_term``) is kept only while
  the plan's split of that model has this host as coordinator under that very term and
  every stage is still reported under it. Otherwise it is drained (unloaded when
  draining or failed). A stage host that died, drained or lost its claim, or a split
  re-formed under a newer term (whose claims fenced the old stages), leaves an engine
  that cannot serve: no availability guard holds its drain (``cannot_serve``), so no
  answer comes from a half-formed split, and the re-formed split starts a new engine
  once its own quorum and stages are there. A split that left the plan, or moved its
  coordinator, is stopped like any replica, behind the usual guards.

Pure: the plan, the observed fleet, the receipts and the pending actions in; proposals
out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from gridctl.domain import (
    ActionKind,
    ModelProfile,
    ObservedStage,
    Residency,
    ResidencyState,
    SplitPlacement,
    SplitServe,
    SplitServeStage,
)
from gridctl.reconcile.codes import BlockedCode
from gridctl.reconcile.identity import ActionKey
from gridctl.reconcile.observing import FleetView
from gridctl.reconcile.proposals import PlanIndex, Proposal
from gridctl.reconcile.records import HistoryEntry, PendingAction
from gridctl.reconcile.splits import claim_generation, stage_claims
from gridctl.reconcile.splitsteps import (
    broken_generations,
    known_claims,
    split_term,
    succeeded_keys,
)

_STARTING = (ResidencyState.LOADING, ResidencyState.WARMING)
_SERVING = (ResidencyState.READY, ResidencyState.DRAINING, *_STARTING)


def observed_stage(
    view: FleetView, placement: SplitPlacement, term: int, index: int
) -> ObservedStage | None:
    """The stage ``index`` of ``placement`` as its host reports serving it under ``term``."""
    stage = placement.stages[index]
    host = view.host(stage.host_id)
    if host is None or not view.is_fresh(stage.host_id):
        return None
    for seen in host.split_stages or ():
        if (
            seen.model_id == placement.model_id
            and seen.coordinator_id == placement.coordinator_host_id
            and seen.coordinator_term == term
            and seen.stage_index == index
            and seen.stage_count == len(placement.stages)
            and (seen.layer_start, seen.layer_end) == (stage.layer_start, stage.layer_end)
        ):
            return seen
    return None


def formed_stages(
    view: FleetView, placement: SplitPlacement, term: int
) -> tuple[SplitServeStage, ...] | None:
    """Every stage with its reported endpoint, or None while one is not reported."""
    found: list[SplitServeStage] = []
    for index, stage in enumerate(placement.stages):
        seen = observed_stage(view, placement, term, index)
        if seen is None:
            return None
        found.append(
            SplitServeStage(stage.host_id, seen.endpoint, stage.layer_start, stage.layer_end)
        )
    return tuple(found)


def _planned_terms(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    history: Sequence[HistoryEntry],
    pending: Sequence[PendingAction],
) -> dict[str, tuple[SplitPlacement, int]]:
    known = known_claims(history, pending)
    broken = broken_generations(history, view)
    terms: dict[str, tuple[SplitPlacement, int]] = {}
    for placement in index.plan.splits:
        profile = profiles.get(placement.model_id)
        if profile is not None:
            term = split_term(placement, profile, known, broken)
            terms[placement.model_id] = (placement, term)
    return terms


def _accepted(
    placement: SplitPlacement,
    profile: ModelProfile,
    term: int,
    history: Sequence[HistoryEntry],
    now: float,
) -> int:
    """How many planned stages accepted this generation's claim."""
    claimed = succeeded_keys(history, ActionKind.SPLIT_CLAIM)
    count = 0
    for stage, claim in zip(
        placement.stages, stage_claims(placement, profile, term, now), strict=True
    ):
        key = ActionKey(
            ActionKind.SPLIT_CLAIM, stage.host_id, placement.model_id, claim_generation(claim)
        )
        count += key in claimed
    return count


def split_serve_proposals(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    history: Sequence[HistoryEntry],
    pending: Sequence[PendingAction],
    now: float,
) -> list[Proposal]:
    """The coordinator's ``load`` (when not cached) and ``warm`` of each planned split
    whose startup quorum accepted and whose every stage is reported served."""
    proposals: list[Proposal] = []
    for model_id, (placement, term) in sorted(
        _planned_terms(index, view, profiles, history, pending).items()
    ):
        profile = profiles[model_id]
        coordinator = placement.coordinator_host_id
        if any(
            r.split_term == term and r.state in _SERVING
            for r in view.residencies(coordinator, model_id)
        ):
            continue  # serving (or starting) under this term already
        count = len(placement.stages)
        from gridctl.split import quorum, quorum_reached  # imported by a plan's first split

        if not quorum_reached(count, _accepted(placement, profile, term, history, now)):
            continue  # no startup quorum: the split must not load
        stages = formed_stages(view, placement, term)
        if stages is None:
            continue  # a stage is not serving yet: the engine could not hold the model
        claim = stage_claims(placement, profile, term, now)[0]
        serve = SplitServe(
            model_id=model_id,
            package_ref=claim.package_ref,
            manifest_sha256=claim.manifest_sha256,
            coordinator_id=coordinator,
            coordinator_term=term,
            topology_id=claim.topology_id,
            run_id=claim.run_id,
            stages=stages,
        )
        cached = view.is_cached(coordinator, model_id)
        blocked = None if view.admits_new_work(coordinator) else BlockedCode.HOST_UNAVAILABLE
        warm = Proposal(
            kind=ActionKind.WARM,
            host_id=coordinator,
            model_id=model_id,
            artifact_sha256=profile.artifact_sha256,
            memory_mb=0,  # the layers, and their memory, are on the stages
            runtime=placement.runtime,
            reason=(
                f"serve the split of {model_id} under term {term} over {count} stages "
                f"(quorum {quorum(count)} of {count} accepted, every stage serving)"
            ),
            priority=placement.priority,
            demand_class=placement.demand_class,
            needs_download=not cached,
            cold_start_seconds=profile.warm_seconds + (0.0 if cached else profile.load_seconds),
            blocked=blocked,
            split_serve=serve,
        )
        if cached:
            proposals.append(warm)
            continue
        load = Proposal(
            kind=ActionKind.LOAD,
            host_id=coordinator,
            model_id=model_id,
            artifact_sha256=profile.artifact_sha256,
            memory_mb=0,
            runtime=placement.runtime,
            reason=f"fetch and verify weights for the split of {model_id} under term {term}",
            priority=placement.priority,
            demand_class=placement.demand_class,
            needs_download=True,
            cold_start_seconds=profile.load_seconds,
            blocked=blocked,
        )
        proposals += [load, replace(warm, dependency=load.key)]
    return proposals


def _why_stopped(
    r: Residency,
    host_id: str,
    planned: tuple[SplitPlacement, int] | None,
    view: FleetView,
) -> tuple[str, bool] | None:
    """Why a coordinator engine must stop and whether it can still serve at all, or
    None while its split is whole and planned."""
    if planned is None:
        return f"the split of {r.model_id} (term {r.split_term}) is no longer planned", False
    placement, term = planned
    if placement.coordinator_host_id != host_id:
        moved = placement.coordinator_host_id
        return f"the split of {r.model_id} is now coordinated by {moved}", False
    if term != r.split_term:
        # the stages took the new term's claims, which fence the old term's stages
        return (
            f"the split of {r.model_id} is re-formed under term {term} (was {r.split_term})",
            True,
        )
    for index, stage in enumerate(placement.stages):
        if observed_stage(view, placement, term, index) is None:
            return (
                f"stage {index + 1} of {len(placement.stages)} on {stage.host_id} is not "
                f"serving term {term}: the split is not whole",
                True,
            )
    return None


def split_coordinator_releases(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    history: Sequence[HistoryEntry],
    pending: Sequence[PendingAction],
) -> list[Proposal]:
    """Drain (or unload) every coordinator engine whose split is not whole and planned."""
    planned = _planned_terms(index, view, profiles, history, pending)
    proposals: list[Proposal] = []
    for host_id in view.host_ids():
        host = view.host(host_id)
        assert host is not None
        for r in sorted(host.residencies, key=lambda r: (r.model_id, r.state.value)):
            if r.split_term is None or not r.actuatable:
                continue
            if r.state is ResidencyState.READY:
                kind, disruption = ActionKind.DRAIN, 1 if r.active_requests == 0 else 2
            elif r.state in (ResidencyState.DRAINING, ResidencyState.FAILED):
                kind, disruption = ActionKind.UNLOAD, 0
            else:
                continue  # loading/warming settle first; unloading needs nothing
            stopped = _why_stopped(r, host_id, planned.get(r.model_id), view)
            if stopped is None:
                continue
            why, broken = stopped
            profile = profiles.get(r.model_id)
            proposals.append(
                Proposal(
                    kind=kind,
                    host_id=host_id,
                    model_id=r.model_id,
                    artifact_sha256=r.artifact_sha256,
                    memory_mb=r.memory_mb,
                    runtime=r.runtime,
                    reason=why,
                    priority=profile.priority if profile else 0,
                    demand_class=None,
                    disruption=disruption,
                    residency=r,
                    cannot_serve=broken,
                )
            )
    return proposals
