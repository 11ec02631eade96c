"""Stable codes the reconciler attaches to held-back actions and cancellations.

An action that is proposed but not executable carries exactly one
``BlockedCode`` in ``Action.blocked``; the code is the contract that status,
``gridctl plan --json`` and the dashboard show, so the values never change.
"""

from __future__ import annotations

from enum import StrEnum


class BlockedCode(StrEnum):
    """Why a proposed action is not executable this tick."""

    # modes
    OBSERVE_MODE = "observe_mode"  # observe: drift recorded as deferred, nothing proposed
    NOT_IN_APPLIED_PLAN = "not_in_applied_plan"  # recommend: only an applied plan's ids run
    # residency guards (safety invariants 5-7)
    REPLACEMENT_NOT_READY = "replacement_not_ready"
    TRUSTED_REPLACEMENT_NOT_READY = "trusted_replacement_not_ready"
    REQUESTS_IN_FLIGHT = "requests_in_flight"
    MINIMUM_RESIDENCY = "minimum_residency"
    IN_PLACE_REPLACEMENT = "in_place_replacement"  # an old revision still occupies the host
    HOST_UNAVAILABLE = "host_unavailable"  # missing, stale or not admitting new work
    SPLIT_UNSUPPORTED = "split_unsupported"  # a stage host does not advertise split_claim
    # churn suppression (invariant 8)
    MUTATION_COOLDOWN = "mutation_cooldown"
    FAILURE_BACKOFF = "failure_backoff"
    AWAITING_OBSERVATION = "awaiting_observation"  # no heartbeat newer than the last success
    OBSERVATION_TIMEOUT = "observation_timeout"
    # governor
    MUTATION_GOVERNOR = "mutation_governor"  # global concurrent-mutation limit
    HOST_GOVERNOR = "host_governor"  # per-host concurrent-mutation limit
    ARTIFACT_FANOUT = "artifact_fanout"  # exact-artifact load fanout
    ARTIFACT_SEEDING = "artifact_seeding"  # no verified copy yet: one origin fetch at a time
    DEPENDENCY_DEFERRED = "dependency_deferred"  # its load is held back
    # withdrawal and restart
    WITHDRAWN_DESTRUCTIVE = "withdrawn_destructive"
    MEMBERSHIP_RECOVERY = "membership_recovery"  # restart grace: fleet view may be incomplete
    AWAITING_REGISTRATION = "awaiting_registration"  # host not seen since the restart


class CancelReason(StrEnum):
    """Why a pending action was cancelled by the controller."""

    MODE_CHANGED = "mode_changed"  # left automatic mode
    SUPERSEDED = "superseded"  # undelivered and no longer wanted by the plan
    RETIRED = "retired"  # the model's profile was removed
    WITHDRAWN_FOR_HIGHER_CLASS = "withdrawn_for_higher_class"
    WITHDRAWN_UNSAFE = "withdrawn_unsafe"  # destructive batch withdrawn on fresh evidence
    MEMBERSHIP_RECOVERY_EXPIRED = "membership_recovery_expired"
