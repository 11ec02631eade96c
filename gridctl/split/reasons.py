"""Stable, snake_case codes for every way the split fence says no.

They are the vocabulary shared by the claim, load and stop rules, by the
command line and by anything that records why a stage refused a coordinator.
``FenceReason`` is a ``StrEnum`` so a code compares equal to its plain string
(``decision.reason == "stale_term"``) and serialises without translation.
"""

from __future__ import annotations

from enum import StrEnum


class FenceReason(StrEnum):
    """Why a claim, load or stop was rejected; exactly one per rejection."""

    # Claim shape, checked in this order.
    MISSING_MODEL_ID = "missing_model_id"
    MISSING_PACKAGE_REF = "missing_package_ref"
    MISSING_MANIFEST_SHA256 = "missing_manifest_sha256"
    MISSING_TOPOLOGY_RUN = "missing_topology_run"
    MISSING_COORDINATOR_ID = "missing_coordinator_id"
    MISSING_TERM = "missing_term"
    MISSING_HASHES = "missing_hashes"
    # Claim against the claim already accepted for the same artifact.
    EXPIRED_LEASE = "expired_lease"
    STALE_TERM = "stale_term"
    CONFLICTING_SAME_TERM = "conflicting_same_term"
    # Load (and stop) against the accepted claim.
    MISSING_CLAIM = "missing_claim"
    TERM_MISMATCH = "term_mismatch"
    COORDINATOR_MISMATCH = "coordinator_mismatch"
    TOPOLOGY_RUN_MISMATCH = "topology_run_mismatch"
