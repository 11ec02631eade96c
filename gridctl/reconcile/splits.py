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

The steps that send these claims are ``splitsteps``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from gridctl.domain import ModelProfile, SplitPlacement, SplitServe, SplitStage, SplitStageClaim

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


def claim_generation(claim: SplitStageClaim) -> str:
    return generation_digest(claim.topology_hash, claim.manifest_sha256, claim.coordinator_term)


def stop_to_json(claim: SplitStageClaim) -> dict[str, object]:
    """The wire command's ``split_stop`` object: the coordinator's stop of ``claim``."""
    return {
        "model_id": claim.model_id,
        "package_ref": claim.package_ref,
        "manifest_sha256": claim.manifest_sha256,
        "coordinator_id": claim.coordinator_id,
        "coordinator_term": claim.coordinator_term,
    }


def serve_to_json(serve: SplitServe) -> dict[str, object]:
    """The wire command's ``split_serve`` object: a coordinator warm's generation and
    stages (``schemas/wire/command.schema.json``)."""
    return {
        "claim": {
            "model_id": serve.model_id,
            "package_ref": serve.package_ref,
            "manifest_sha256": serve.manifest_sha256,
            "coordinator_id": serve.coordinator_id,
            "coordinator_term": serve.coordinator_term,
            "topology_id": serve.topology_id,
            "run_id": serve.run_id,
        },
        "stages": [
            {
                "host_id": s.host_id,
                "endpoint": s.endpoint,
                "layer_start": s.layer_start,
                "layer_end": s.layer_end,
            }
            for s in serve.stages
        ],
    }


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
