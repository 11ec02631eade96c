"""Reconciler output: lifecycle actions with stable identities, and their receipts."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class ActionKind(StrEnum):
    LOAD = "load"  # acquire or verify the artifact
    WARM = "warm"  # start it and wait for readiness
    DRAIN = "drain"  # stop routing new requests
    UNLOAD = "unload"  # release memory once drained and idle
    EVICT = "evict"  # delete an unused predictive cache entry
    SPLIT_CLAIM = "split_claim"  # a coordinator's claim on one stage host of a split
    SPLIT_RELEASE = "split_release"  # the coordinator's stop of one stage host

    @property
    def destructive(self) -> bool:
        return self in (
            ActionKind.DRAIN,
            ActionKind.UNLOAD,
            ActionKind.EVICT,
            ActionKind.SPLIT_RELEASE,
        )

    @property
    def splits(self) -> bool:
        """A step of a split's claim protocol rather than of a single-host residency."""
        return self in (ActionKind.SPLIT_CLAIM, ActionKind.SPLIT_RELEASE)


class ReceiptStatus(StrEnum):
    ACCEPTED = "accepted"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in (
            ReceiptStatus.SUCCEEDED,
            ReceiptStatus.FAILED,
            ReceiptStatus.REJECTED,
            ReceiptStatus.CANCELLED,
        )


@dataclass(frozen=True)
class SplitStageClaim:
    """A coordinator's claim on one stage host, as ``split_claim`` carries it on the wire.

    The claim half is the same on every stage of one split generation (keyed by
    model, package and manifest; fenced by term, topology and participant hashes and
    a lease); the stage half is this host's position and half-open layer range.
    """

    model_id: str
    package_ref: str
    manifest_sha256: str
    coordinator_id: str
    coordinator_term: int
    topology_id: str
    run_id: str
    participant_set_hash: str
    topology_hash: str
    lease_until_unix_ms: int
    stage_index: int
    stage_count: int
    layer_start: int
    layer_end: int


@dataclass(frozen=True)
class SplitServeStage:
    """One stage a split's coordinator engine reaches: its host, the address of its
    TLS tunnel (``host:port``, as the stage host reports it) and its layer range."""

    host_id: str
    endpoint: str
    layer_start: int
    layer_end: int


@dataclass(frozen=True)
class SplitServe:
    """What a coordinator's warm carries (the wire's ``split_serve``): the generation it
    serves, fenced by the coordinator host's own accepted claim, and every stage in
    order."""

    model_id: str
    package_ref: str
    manifest_sha256: str
    coordinator_id: str
    coordinator_term: int
    topology_id: str
    run_id: str
    stages: tuple[SplitServeStage, ...]


@dataclass(frozen=True)
class Action:
    """One proposed lifecycle step. ``action_id`` is derived from kind, host, model,
    artifact and attempt, so an equivalent pending action keeps its identity across ticks."""

    action_id: str
    kind: ActionKind
    host_id: str
    model_id: str
    memory_mb: int = 0
    artifact_sha256: str | None = None
    runtime: str | None = None
    attempt: int = 0
    depends_on: tuple[str, ...] = ()
    executable: bool = False
    blocked: str | None = None  # a stable code when held back
    reason: str = ""
    priority: int = 0
    created_at: float = 0.0
    not_before: float | None = None
    split_claim: SplitStageClaim | None = None  # the claim a split step sends or stops
    split_serve: SplitServe | None = None  # a split coordinator's warm: stages to reach


@dataclass(frozen=True)
class Receipt:
    """A node's acknowledgement of one action."""

    action_id: str
    status: ReceiptStatus
    message: str = ""
    duration_seconds: float | None = None
    artifact_fetched: bool = False
    observed_at: float | None = None
