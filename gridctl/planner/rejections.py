"""Named reasons why one host cannot take one model.

Every feasibility filter returns ``None`` or a ``Rejection`` carrying one of
these codes, so "why not on this host?" is always a stable word plus a short
detail. ``shortfall_code`` folds a host-level rejection into the plan-level
``UnsatisfiedCode`` that explains a missing replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gridctl.domain import UnsatisfiedCode


class RejectionCode(StrEnum):
    """Why a (model, host) pair was rejected; static codes first, then dynamic ones."""

    # static: the host can never take this model in this plan
    HOST_STATE = "host_state"
    HEARTBEAT_MISSING = "heartbeat_missing"
    HEARTBEAT_STALE = "heartbeat_stale"
    HEARTBEAT_FUTURE = "heartbeat_future"
    HOST_UNMANAGED = "host_unmanaged"
    RUNTIME = "runtime"
    RUNTIME_NOT_QUALIFIED = "runtime_not_qualified"
    BACKEND = "backend"
    DATA_TIER = "data_tier"
    REQUIRED_TAG = "required_tag"
    FORBIDDEN_TAG = "forbidden_tag"
    NOT_ALLOWED = "not_allowed"
    DENIED = "denied"
    NOT_PINNED = "not_pinned"
    GPU_COUNT = "gpu_count"
    GPU_MEMORY = "gpu_memory"
    # dynamic: depends on what else the plan has put there
    ALREADY_ASSIGNED = "already_assigned"
    MODEL_RESIDENT = "model_resident"
    STALE_ARTIFACT_IN_PLACE = "stale_artifact_in_place"
    MODEL_SLOTS = "model_slots"
    COLOCATION_CEILING = "colocation_ceiling"
    COLOCATION_EXCLUDE = "colocation_exclude"
    FAILURE_DOMAIN = "failure_domain"
    DISK_UNKNOWN = "disk_unknown"
    DISK_ADMISSION = "disk_admission"
    MEMORY_INCREMENTAL = "memory_incremental"
    MEMORY_DESIRED = "memory_desired"


STATIC_CODES = frozenset(
    {
        RejectionCode.HOST_STATE,
        RejectionCode.HEARTBEAT_MISSING,
        RejectionCode.HEARTBEAT_STALE,
        RejectionCode.HEARTBEAT_FUTURE,
        RejectionCode.HOST_UNMANAGED,
        RejectionCode.RUNTIME,
        RejectionCode.RUNTIME_NOT_QUALIFIED,
        RejectionCode.BACKEND,
        RejectionCode.DATA_TIER,
        RejectionCode.REQUIRED_TAG,
        RejectionCode.FORBIDDEN_TAG,
        RejectionCode.NOT_ALLOWED,
        RejectionCode.DENIED,
        RejectionCode.NOT_PINNED,
        RejectionCode.GPU_COUNT,
        RejectionCode.GPU_MEMORY,
    }
)

# Rejections that can only get worse while one plan fills the fleet: a host
# rejected for one of these never becomes feasible again for the same model.
MONOTONE_CODES = frozenset(
    {
        RejectionCode.ALREADY_ASSIGNED,
        RejectionCode.MODEL_RESIDENT,
        RejectionCode.STALE_ARTIFACT_IN_PLACE,
        RejectionCode.MODEL_SLOTS,
        RejectionCode.COLOCATION_CEILING,
        RejectionCode.COLOCATION_EXCLUDE,
        RejectionCode.DISK_UNKNOWN,
        RejectionCode.DISK_ADMISSION,
        RejectionCode.MEMORY_INCREMENTAL,
        RejectionCode.MEMORY_DESIRED,
    }
)

# What a room-for-one-more rejection means when no host is left: most telling first.
_SHORTFALL_PRECEDENCE: tuple[tuple[RejectionCode, UnsatisfiedCode], ...] = (
    (RejectionCode.MEMORY_INCREMENTAL, UnsatisfiedCode.INSUFFICIENT_CAPACITY),
    (RejectionCode.MEMORY_DESIRED, UnsatisfiedCode.INSUFFICIENT_CAPACITY),
    (RejectionCode.MODEL_SLOTS, UnsatisfiedCode.INSUFFICIENT_CAPACITY),
    (RejectionCode.DISK_ADMISSION, UnsatisfiedCode.DISK_ADMISSION),
    (RejectionCode.DISK_UNKNOWN, UnsatisfiedCode.DISK_ADMISSION),
    (RejectionCode.COLOCATION_CEILING, UnsatisfiedCode.COLOCATION_CONFLICT),
    (RejectionCode.COLOCATION_EXCLUDE, UnsatisfiedCode.COLOCATION_CONFLICT),
    (RejectionCode.STALE_ARTIFACT_IN_PLACE, UnsatisfiedCode.UNSAFE_REPLACEMENT),
    (RejectionCode.FAILURE_DOMAIN, UnsatisfiedCode.FAILURE_DOMAIN_SHORTFALL),
)


@dataclass(frozen=True, slots=True)
class Rejection:
    """One filter's "no", with the code and a short human detail."""

    code: RejectionCode
    detail: str = ""

    @property
    def is_static(self) -> bool:
        return self.code in STATIC_CODES


def shortfall_code(codes: set[RejectionCode]) -> UnsatisfiedCode:
    """The plan-level code for a replica that every host rejected with ``codes``."""
    dynamic = codes - STATIC_CODES
    if not dynamic:
        return UnsatisfiedCode.NO_ELIGIBLE_NODES
    for code, unsatisfied in _SHORTFALL_PRECEDENCE:
        if code in dynamic:
            return unsatisfied
    return UnsatisfiedCode.INSUFFICIENT_CAPACITY
