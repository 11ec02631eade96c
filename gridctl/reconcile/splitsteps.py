"""A planned split's claim-protocol steps: ``split_claim`` on each stage host, and
``split_release`` on a host the split has left.

``split_claim_proposals`` makes one ``split_claim`` step per stage host of each planned
split (the claims of ``splits``). The step's artifact slot holds the generation digest
(topology, manifest, term), so an action's identity (``identity``) is fixed by what the
claim fences: a changed topology, manifest or term is a new action, and a generation
whose claim last succeeded on a host is not sent there again (the node keeps an
accepted claim across its restarts) until half of its 4-hour lease has passed: then the
same claim goes again with a fresh lease, which the stage takes as a refresh of the
lease (same term, same fields), so a planned split's lease never runs out. A pending
claim is carried unchanged, with the lease it was first built with. A stage host
that does not advertise ``split_claim`` gets the step held back ``split_unsupported``.

The coordinator term is derived from the claims the controller already made for the
model (finished ones in ``history``, which the store keeps per key, and pending ones):
the highest term, when it was that very topology and manifest and no stage host of it
has since stopped serving its accepted stage (``broken_generations``), else one more.
So a re-formed split supersedes the old one on every stage host (a stage refuses the
same term with other fields), re-planning the same whole split keeps its term, and a
split whose stage server died on a living host is claimed afresh under the next term.

``split_release_proposals`` stops the stage of a host whose newest claim for a model
succeeded while the model's planned split no longer has that host (the split left the
plan, the model was retired, or the stages moved): a ``split_release`` carrying that
claim's key, coordinator and term, sent once per claimed generation.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

from gridctl.domain import ActionKind, ModelProfile, SplitPlacement, SplitStageClaim
from gridctl.reconcile.codes import BlockedCode
from gridctl.reconcile.identity import ActionKey, entry_key
from gridctl.reconcile.observing import FleetView
from gridctl.reconcile.proposals import PlanIndex, Proposal
from gridctl.reconcile.records import HistoryEntry, PendingAction
from gridctl.reconcile.splits import (
    SPLIT_LEASE_MS,
    claim_generation,
    generation_digest,
    manifest_sha256,
    stage_claims,
    topology_hash,
)


def _newest_by_key(
    history: Iterable[HistoryEntry], kind: ActionKind
) -> dict[ActionKey, HistoryEntry]:
    newest: dict[ActionKey, HistoryEntry] = {}
    for entry in history:
        if entry.kind is not kind:
            continue
        key = entry_key(entry)
        held = newest.get(key)
        if held is None or entry.attempt > held.attempt:
            newest[key] = entry
    return newest


def succeeded_keys(history: Iterable[HistoryEntry], kind: ActionKind) -> frozenset[ActionKey]:
    """Keys of ``kind`` whose newest finished attempt succeeded."""
    return frozenset(k for k, e in _newest_by_key(history, kind).items() if e.succeeded)


def known_claims(
    history: Iterable[HistoryEntry], pending: Iterable[PendingAction]
) -> list[SplitStageClaim]:
    """Every claim the controller has made: finished and pending ``split_claim`` steps."""
    found = [
        e.split_claim
        for e in history
        if e.kind is ActionKind.SPLIT_CLAIM and e.split_claim is not None
    ]
    found += [
        p.action.split_claim
        for p in pending
        if p.action.kind is ActionKind.SPLIT_CLAIM and p.action.split_claim is not None
    ]
    return found


def lease_due(entry: HistoryEntry | None, now: float) -> bool:
    """Whether the accepted claim of ``entry`` is past half its lease: the coordinator
    renews it (the same claim with a fresh lease) while the split is planned, so a
    serving split never reaches its lease's end."""
    claim = entry.split_claim if entry is not None else None
    if claim is None:
        return True
    return int(now * 1000) >= claim.lease_until_unix_ms - SPLIT_LEASE_MS // 2


def broken_generations(history: Sequence[HistoryEntry], view: FleetView) -> frozenset[str]:
    """Generations that cannot serve again: a stage of theirs was released, or a stage
    host accepted the claim and, heard from since, no longer serves it.

    The newest succeeded claim of each (host, model, generation) counts when its stage
    was released since (a split re-formed on the same hosts after a release is a new
    generation, so no late command of the old one applies to it), or when its host is
    fresh and a heartbeat observed after the receipt does not report that stage (its
    stage server died, say).
    """
    released = succeeded_keys(history, ActionKind.SPLIT_RELEASE)
    broken: set[str] = set()
    for key, entry in _newest_by_key(history, ActionKind.SPLIT_CLAIM).items():
        claim = entry.split_claim
        if claim is None or not entry.succeeded or not view.is_fresh(entry.host_id):
            continue
        if ActionKey(ActionKind.SPLIT_RELEASE, key.host_id, key.model_id, key.artifact_sha256) in (
            released
        ):
            broken.add(claim_generation(claim))
            continue
        seen = view.observed_at(entry.host_id)
        host = view.host(entry.host_id)
        if host is None or seen is None or seen <= entry.finished_at:
            continue  # no heartbeat since the receipt: nothing to judge by yet
        if not any(
            s.model_id == claim.model_id
            and s.coordinator_id == claim.coordinator_id
            and s.coordinator_term == claim.coordinator_term
            and s.stage_index == claim.stage_index
            for s in host.split_stages or ()
        ):
            broken.add(claim_generation(claim))
    return frozenset(broken)


def split_term(
    placement: SplitPlacement,
    profile: ModelProfile,
    known: Iterable[SplitStageClaim],
    broken: Collection[str] = frozenset(),
) -> int:
    """The coordinator term of the planned generation (see the module docstring)."""
    mine = [c for c in known if c.model_id == placement.model_id]
    if not mine:
        return 1
    top = max(c.coordinator_term for c in mine)
    topology, manifest = topology_hash(placement.stages), manifest_sha256(profile)
    if (
        any(
            c.coordinator_term == top
            and (c.topology_hash, c.manifest_sha256) == (topology, manifest)
            for c in mine
        )
        and generation_digest(topology, manifest, top) not in broken
    ):
        return top
    return top + 1


def _stage_block(view: FleetView, host_id: str, verb: ActionKind) -> BlockedCode | None:
    if verb is ActionKind.SPLIT_CLAIM and not view.admits_new_work(host_id):
        return BlockedCode.HOST_UNAVAILABLE
    host = view.host(host_id)
    if host is None or verb.value not in host.capabilities:
        return BlockedCode.SPLIT_UNSUPPORTED
    return None


def split_claim_proposals(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    history: Sequence[HistoryEntry],
    pending: Sequence[PendingAction],
    now: float,
) -> list[Proposal]:
    """One ``split_claim`` per stage host of each planned split not yet claimed there."""
    newest = _newest_by_key(history, ActionKind.SPLIT_CLAIM)
    known = known_claims(history, pending)
    broken = broken_generations(history, view)
    proposals: list[Proposal] = []
    for placement in sorted(index.plan.splits, key=lambda s: s.model_id):
        profile = profiles.get(placement.model_id)
        if profile is None:
            continue  # retired or unknown: nothing to claim
        term = split_term(placement, profile, known, broken)
        claims = stage_claims(placement, profile, term, now)
        for stage, claim in zip(placement.stages, claims, strict=True):
            generation = claim_generation(claim)
            key = ActionKey(ActionKind.SPLIT_CLAIM, stage.host_id, placement.model_id, generation)
            held = newest.get(key)
            renewing = held is not None and held.succeeded
            if renewing and not lease_due(held, now):
                continue
            verb = "renew the lease of" if renewing else "claim"
            proposals.append(
                Proposal(
                    kind=ActionKind.SPLIT_CLAIM,
                    host_id=stage.host_id,
                    model_id=placement.model_id,
                    artifact_sha256=generation,
                    memory_mb=stage.memory_mb,
                    runtime=placement.runtime,
                    reason=(
                        f"{verb} stage {claim.stage_index + 1} of {claim.stage_count} "
                        f"(layers {stage.layer_start}-{stage.layer_end - 1}) of the split of "
                        f"{placement.model_id}, coordinator {placement.coordinator_host_id}, "
                        f"term {term}"
                    ),
                    priority=placement.priority,
                    demand_class=placement.demand_class,
                    blocked=_stage_block(view, stage.host_id, ActionKind.SPLIT_CLAIM),
                    split_claim=claim,
                )
            )
    return proposals


def split_release_proposals(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    history: Sequence[HistoryEntry],
) -> list[Proposal]:
    """A ``split_release`` where a host's newest accepted claim is for a split that no
    longer has that host."""
    staged = {(s.model_id, st.host_id) for s in index.plan.splits for st in s.stages}
    newest: dict[tuple[str, str], HistoryEntry] = {}
    for entry in _newest_by_key(history, ActionKind.SPLIT_CLAIM).values():
        claim = entry.split_claim
        if claim is None:
            continue
        where = (entry.model_id, entry.host_id)
        held = newest.get(where)
        rank = (claim.coordinator_term, entry.effective_at, entry.action_id)
        if (
            held is None
            or held.split_claim is None
            or rank
            > (
                held.split_claim.coordinator_term,
                held.effective_at,
                held.action_id,
            )
        ):
            newest[where] = entry
    released = succeeded_keys(history, ActionKind.SPLIT_RELEASE)
    proposals: list[Proposal] = []
    for (model_id, host_id), entry in sorted(newest.items()):
        claim = entry.split_claim
        if claim is None or not entry.succeeded or (model_id, host_id) in staged:
            continue
        generation = claim_generation(claim)
        if ActionKey(ActionKind.SPLIT_RELEASE, host_id, model_id, generation) in released:
            continue
        profile = profiles.get(model_id)
        proposals.append(
            Proposal(
                kind=ActionKind.SPLIT_RELEASE,
                host_id=host_id,
                model_id=model_id,
                artifact_sha256=generation,
                memory_mb=0,
                runtime=None,
                reason=(
                    f"stop stage {claim.stage_index + 1} of {claim.stage_count} of term "
                    f"{claim.coordinator_term}: the planned split of {model_id} no longer "
                    f"has {host_id}"
                ),
                priority=profile.priority if profile else 0,
                demand_class=None,
                blocked=_stage_block(view, host_id, ActionKind.SPLIT_RELEASE),
                split_claim=claim,
            )
        )
    return proposals
