"""The pure coordinator rules: is a claim valid, is a load or stop fenced.

Each function judges one message against the claim a stage currently holds
for the same artifact (``None`` when it holds none) and returns a decision
naming exactly one reason. Time is an argument (``now_ms``), never read.

Readings of the specification where it leaves room, all chosen to fence more
rather than less:

* A claim's shape is checked in a fixed order (model, package, manifest,
  topology/run, coordinator, term, hashes) and the first problem is reported.
  A negative term is treated like term 0: missing.
* A claim whose lease ends at or before ``now_ms`` is rejected; a load is
  rejected only when the accepted lease ended strictly before ``now_ms``.
* A same-term claim with identical fields refreshes the lease to the value it
  carries, even if that is earlier than the stored one: the stage records
  what the coordinator last said.
* A stop is rejected when its term is older than the accepted claim, with no
  exception for term 0: once a stage holds a claim, only that coordinator (or
  a newer one) may stop it. A same-term stop from another coordinator is a
  ``coordinator_mismatch``. Lease expiry does not make a stale stop valid.
"""

from __future__ import annotations

from gridctl.split.claims import Claim, StageLoad, StopRequest, present
from gridctl.split.decisions import (
    ClaimDecision,
    LoadDecision,
    StopDecision,
    reject_claim,
    reject_load,
)
from gridctl.split.reasons import FenceReason


def claim_shape_problem(claim: Claim) -> FenceReason | None:
    """The first missing piece of a claim, in the documented order, or ``None``."""
    if not present(claim.model_id):
        return FenceReason.MISSING_MODEL_ID
    if not present(claim.package_ref):
        return FenceReason.MISSING_PACKAGE_REF
    if not present(claim.manifest_sha256):
        return FenceReason.MISSING_MANIFEST_SHA256
    if not (present(claim.topology_id) and present(claim.run_id)):
        return FenceReason.MISSING_TOPOLOGY_RUN
    if not present(claim.coordinator_id):
        return FenceReason.MISSING_COORDINATOR_ID
    if claim.coordinator_term <= 0:
        return FenceReason.MISSING_TERM
    if not (present(claim.participant_set_hash) and present(claim.topology_hash)):
        return FenceReason.MISSING_HASHES
    return None


def judge_claim(current: Claim | None, claim: Claim, now_ms: int) -> ClaimDecision:
    """Accept, refresh, supersede or reject ``claim`` given the claim held now.

    The decision carries no fenced work; the registry adds it, since only the
    registry knows what work the stage is running.
    """
    held_term = current.coordinator_term if current is not None else None
    problem = claim_shape_problem(claim)
    if problem is not None:
        return reject_claim(problem, held_term)
    if claim.lease_until_unix_ms <= now_ms:
        return reject_claim(FenceReason.EXPIRED_LEASE, held_term)
    if current is None:
        return ClaimDecision(accepted=True, current_term=claim.coordinator_term)
    if claim.coordinator_term < current.coordinator_term:
        return reject_claim(FenceReason.STALE_TERM, held_term)
    if claim.coordinator_term == current.coordinator_term:
        if claim.same_epoch(current):
            return ClaimDecision(accepted=True, refreshed=True, current_term=claim.coordinator_term)
        return reject_claim(FenceReason.CONFLICTING_SAME_TERM, held_term)
    return ClaimDecision(
        accepted=True,
        supersedes_term=current.coordinator_term,
        current_term=claim.coordinator_term,
    )


def judge_load(current: Claim | None, load: StageLoad, now_ms: int) -> LoadDecision:
    """Whether ``load`` may start a stage runtime under the claim held now."""
    if load.unfenced:
        return LoadDecision(accepted=True, unfenced=True)
    if load.coordinator_term <= 0:
        return reject_load(FenceReason.MISSING_TERM)
    if not present(load.coordinator_id):
        return reject_load(FenceReason.MISSING_COORDINATOR_ID)
    if current is None:
        return reject_load(FenceReason.MISSING_CLAIM)
    if load.coordinator_term != current.coordinator_term:
        return reject_load(FenceReason.TERM_MISMATCH)
    if load.coordinator_id != current.coordinator_id:
        return reject_load(FenceReason.COORDINATOR_MISMATCH)
    if (load.topology_id, load.run_id) != (current.topology_id, current.run_id):
        return reject_load(FenceReason.TOPOLOGY_RUN_MISMATCH)
    if current.lease_until_unix_ms < now_ms:
        return reject_load(FenceReason.EXPIRED_LEASE)
    return LoadDecision(accepted=True)


def judge_stop(current: Claim | None, stop: StopRequest) -> StopDecision:
    """Whether ``stop`` may stop the stage; stale terms cannot stop newer work."""
    if current is None:
        return StopDecision(accepted=True)
    if stop.coordinator_term < current.coordinator_term:
        return StopDecision(accepted=False, reason=FenceReason.STALE_TERM)
    same_term = stop.coordinator_term == current.coordinator_term
    if same_term and stop.coordinator_id != current.coordinator_id:
        return StopDecision(accepted=False, reason=FenceReason.COORDINATOR_MISMATCH)
    return StopDecision(accepted=True)
