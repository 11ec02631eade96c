"""The planner's output: assignments, preemptions, shortfalls and explanations.

A plan is data, never an exception: an unplaceable model is an ``Unsatisfied``
entry with a stable code. Every (model, host) pair the planner considered has a
``CandidateExplanation`` saying why it was rejected or how it scored.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class DemandClass(StrEnum):
    """Why a replica is wanted; earlier classes place first within a priority class."""

    PINNED = "pinned"
    BASELINE = "baseline"  # configured min_replicas
    DIRECT = "direct"  # direct request/queue/SLO/error evidence
    INFERRED = "inferred"  # correlation-only prewarm; never preempts


class UnsatisfiedCode(StrEnum):
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    NO_ELIGIBLE_NODES = "no_eligible_nodes"
    PINNED_NODE_UNAVAILABLE = "pinned_node_unavailable"
    FAILURE_DOMAIN_SHORTFALL = "failure_domain_shortfall"
    COLOCATION_CONFLICT = "colocation_conflict"
    DISK_ADMISSION = "disk_admission"
    PREEMPTION_STAGED = "preemption_staged"
    EVICTION_LIMIT = "eviction_limit"
    UNSAFE_REPLACEMENT = "unsafe_replacement"


@dataclass(frozen=True)
class ScoreComponent:
    name: str
    value: float


@dataclass(frozen=True)
class CandidateExplanation:
    """One host considered for one model: a rejection code, or the named score parts."""

    host_id: str
    rejection: str | None = None
    detail: str = ""
    score: float | None = None
    components: tuple[ScoreComponent, ...] = ()
    chosen: bool = False


@dataclass(frozen=True)
class ModelExplanation:
    model_id: str
    target_replicas: int
    target_reason: str
    demand_class: DemandClass | None
    candidates: tuple[CandidateExplanation, ...] = ()


@dataclass(frozen=True)
class Assignment:
    """One desired replica of ``model_id`` on ``host_id``."""

    model_id: str
    host_id: str
    runtime: str
    memory_mb: int
    reason: str
    demand_class: DemandClass
    priority: int
    existing: bool = False  # satisfied by a live residency already there


@dataclass(frozen=True)
class Preemption:
    """A staged eviction: drain and unload ``model_id`` on ``host_id`` for ``beneficiary``."""

    host_id: str
    model_id: str
    beneficiary: str
    reason: str


@dataclass(frozen=True)
class Unsatisfied:
    model_id: str
    code: UnsatisfiedCode
    message: str
    missing_replicas: int = 0
    host_id: str | None = None


@dataclass(frozen=True)
class Plan:
    """The complete result of one planning pass over frozen inputs."""

    input_digest: str
    now: float
    targets: tuple[tuple[str, int], ...]
    assignments: tuple[Assignment, ...]
    preemptions: tuple[Preemption, ...]
    unsatisfied: tuple[Unsatisfied, ...]
    explanations: tuple[ModelExplanation, ...]

    def assignments_for(self, model_id: str) -> tuple[Assignment, ...]:
        return tuple(a for a in self.assignments if a.model_id == model_id)
