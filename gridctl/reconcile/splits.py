"""A planned split as coordinator claims: the pure data each stage host is sent.

The planner places a split (``SplitPlacement``); the reconciler turns it into one
``SplitStageClaim`` per stage host, the claim of ``docs/split.md`` plus that host's
stage. Everything here is derived from the placement, the profile, the coordinator
term and ``now`` (an argument), so the same inputs give byte-identical claims:

- ``package_ref``: the profile's artifact source, else its sha256, else
  ``profile:<name>``.
- ``manifest_sha256``: the profile's artifact sha256; a profile without one gets a
  stable digest of what identifies its weights (name, source, memory, layers,
  native context), so the claim key is still fixed for that profile.
- ``topology_hash``: a digest of the stages in order (host, half-open layer range),
  and so of the coordinator, the first stage; ``topology_id`` is derived from it.
- ``participant_set_hash``: a digest of the sorted stage host ids.
- ``run_id``: from the generation digest, a digest of the topology, the manifest and
  the term.
- ``lease_until_unix_ms``: ``now`` plus the specification's 4-hour coordinator lease.

``split_claim_proposals`` makes one ``split_claim`` step per stage host. The step's
artifact slot holds the generation digest, so an action's identity (``identity``) is
fixed by what the claim fences: a changed topology, manifest or term is a new action,
and a generation whose claim last succeeded on a host is not sent there again (the
node keeps an accepted claim across restarts). A pending claim is carried unchanged,
with the lease it was first built with. A stage host that does not advertise
``split_claim`` gets the step held back ``split_unsupported``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping

from gridctl.domain import (
    ActionKind,
    ModelProfile,
    SplitPlacement,
    SplitStage,
    SplitStageClaim,
)
from gridctl.reconcile.codes import BlockedCode
from gridctl.reconcile.identity import ActionKey, entry_key
from gridctl.reconcile.observing import FleetView
from gridctl.reconcile.proposals import PlanIndex, Proposal
from gridctl.reconcile.records import HistoryEntry

SPLIT_LEASE_MS = 4 * 60 * 60 * 1000  # the specification's coordinator lease
_SEPARATOR = "\x1f"


def _digest(tag: str, parts: Iterable[str]) -> str:
    material = _SEPARATOR.join((tag, *parts))
    return hashlib.sha256(material.encode("utf-8")).hexdigest()


def topology_hash(stages: Iterable[SplitStage]) -> str:
    """The stages in order: host and half-open layer range of each."""
    return _digest(
        "gridctl-split-topology/v1",
        (f"{s.host_id}:{s.layer_start}:{s.layer_end}" for s in stages),
    )


def participant_set_hash(stages: Iterable[SplitStage]) -> str:
    """The set of stage hosts, whatever their order or layer ranges."""
    return _digest("gridctl-split-participants/v1", sorted({s.host_id for s in stages}))


def package_ref(profile: ModelProfile) -> str:
    art = profile.artifact
    return art.source or art.sha256 or f"profile:{profile.name}"


def manifest_sha256(profile: ModelProfile) -> str:
    """The artifact digest, or a stable digest of the profile's weight identity."""
    if profile.artifact.sha256:
        return profile.artifact.sha256
    split = profile.split
    return _digest(
        "gridctl-split-manifest/v1",
        (
            profile.name,
            profile.artifact.source or "",
            str(profile.memory_mb),
            str(split.layers) if split else "",
            str(split.native_context) if split else "",
        ),
    )


def generation_digest(topology: str, manifest: str, term: int) -> str:
    """What one split generation fences: its topology, its artifact and its term."""
    return _digest("gridctl-split-run/v1", (topology, manifest, str(term)))


def stage_claims(
    placement: SplitPlacement, profile: ModelProfile, term: int, now: float
) -> tuple[SplitStageClaim, ...]:
    """One claim per stage of ``placement``, in stage order, under coordinator ``term``.

    ``now`` is in seconds (the reconciler's clock); the lease is in milliseconds.
    """
    if term < 1:
        raise ValueError(f"coordinator_term must be at least 1, got {term}")
    topology = topology_hash(placement.stages)
    manifest = manifest_sha256(profile)
    run_id = generation_digest(topology, manifest, term)[:32]
    lease_until = int(now * 1000) + SPLIT_LEASE_MS
    participants = participant_set_hash(placement.stages)
    count = len(placement.stages)
    return tuple(
        SplitStageClaim(
            model_id=placement.model_id,
            package_ref=package_ref(profile),
            manifest_sha256=manifest,
            coordinator_id=placement.coordinator_host_id,
            coordinator_term=term,
            topology_id=f"topology-{topology[:32]}",
            run_id=f"run-{run_id}",
            participant_set_hash=participants,
            topology_hash=topology,
            lease_until_unix_ms=lease_until,
            stage_index=index,
            stage_count=count,
            layer_start=stage.layer_start,
            layer_end=stage.layer_end,
        )
        for index, stage in enumerate(placement.stages)
    )


def claim_to_json(claim: SplitStageClaim) -> dict[str, dict[str, object]]:
    """The wire command's ``split_claim`` object (``schemas/wire/command.schema.json``)."""
    return {
        "claim": {
            "model_id": claim.model_id,
            "package_ref": claim.package_ref,
            "manifest_sha256": claim.manifest_sha256,
            "coordinator_id": claim.coordinator_id,
            "coordinator_term": claim.coordinator_term,
            "topology_id": claim.topology_id,
            "run_id": claim.run_id,
            "participant_set_hash": claim.participant_set_hash,
            "topology_hash": claim.topology_hash,
            "lease_until_unix_ms": claim.lease_until_unix_ms,
        },
        "stage": {
            "index": claim.stage_index,
            "count": claim.stage_count,
            "layer_start": claim.layer_start,
            "layer_end": claim.layer_end,
        },
    }


SPLIT_CAPABILITY = "split_claim"  # the actuator verb a stage host advertises


def claimed_generations(history: Iterable[HistoryEntry]) -> frozenset[ActionKey]:
    """``split_claim`` keys whose newest finished attempt succeeded."""
    newest: dict[ActionKey, HistoryEntry] = {}
    for entry in history:
        if entry.kind is not ActionKind.SPLIT_CLAIM:
            continue
        key = entry_key(entry)
        held = newest.get(key)
        if held is None or entry.attempt > held.attempt:
            newest[key] = entry
    return frozenset(key for key, entry in newest.items() if entry.succeeded)


def _stage_block(view: FleetView, host_id: str) -> BlockedCode | None:
    if not view.admits_new_work(host_id):
        return BlockedCode.HOST_UNAVAILABLE
    host = view.host(host_id)
    if host is None or SPLIT_CAPABILITY not in host.capabilities:
        return BlockedCode.SPLIT_UNSUPPORTED
    return None


def split_claim_proposals(
    index: PlanIndex,
    view: FleetView,
    profiles: Mapping[str, ModelProfile],
    history: Iterable[HistoryEntry],
    terms: Mapping[str, int],
    now: float,
) -> list[Proposal]:
    """One ``split_claim`` per stage host of each planned split not yet claimed there.

    ``terms``: the controller's current coordinator term per model (1 when absent).
    """
    claimed = claimed_generations(history)
    proposals: list[Proposal] = []
    for placement in sorted(index.plan.splits, key=lambda s: s.model_id):
        profile = profiles.get(placement.model_id)
        if profile is None:
            continue  # retired or unknown: nothing to claim
        term = terms.get(placement.model_id, 1)
        claims = stage_claims(placement, profile, term, now)
        generation = generation_digest(claims[0].topology_hash, claims[0].manifest_sha256, term)
        for stage, claim in zip(placement.stages, claims, strict=True):
            key = ActionKey(ActionKind.SPLIT_CLAIM, stage.host_id, placement.model_id, generation)
            if key in claimed:
                continue
            proposals.append(
                Proposal(
                    kind=ActionKind.SPLIT_CLAIM,
                    host_id=stage.host_id,
                    model_id=placement.model_id,
                    artifact_sha256=generation,
                    memory_mb=stage.memory_mb,
                    runtime=placement.runtime,
                    reason=(
                        f"claim stage {claim.stage_index + 1} of {claim.stage_count} "
                        f"(layers {stage.layer_start}-{stage.layer_end - 1}) of the split of "
                        f"{placement.model_id}, coordinator {placement.coordinator_host_id}, "
                        f"term {term}"
                    ),
                    priority=placement.priority,
                    demand_class=placement.demand_class,
                    blocked=_stage_block(view, stage.host_id),
                    split_claim=claim,
                )
            )
    return proposals
