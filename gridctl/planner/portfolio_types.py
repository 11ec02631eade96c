"""Value types of portfolio planning: inputs, gates, candidates, rows and the result.

Portfolio planning projects unbound workload demand onto configured models
as one joint decision for the whole fleet. Everything here is frozen; the
pipeline in ``portfolio.py`` builds it from one immutable demand picture.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelDemand, ModelProfile, Plan

if TYPE_CHECKING:
    from gridctl.demand.learning import WorkloadDemand
    from gridctl.demand.outcomes import OutcomeScore

MEDIA_WORKLOADS = frozenset({"image", "video"})


class AdmissionState(StrEnum):
    READY = "ready"
    STARTING = "starting"
    PLANNED = "planned"
    UNDERSUPPLIED = "undersupplied"
    DEFERRED = "deferred"
    CAPACITY_CONTENDED = "capacity-contended"
    BLOCKED_BY_RESIDENCY = "blocked-by-residency"
    INFEASIBLE = "infeasible"
    AWAITING_PLAN = "awaiting-plan"


@dataclass(frozen=True)
class PortfolioInputs:
    """One immutable snapshot: the fleet with direct/baseline demand, and workload evidence."""

    profiles: tuple[ModelProfile, ...]
    snapshot: FleetSnapshot  # ``demand`` holds direct and correlated model demand only
    policy: ControllerPolicy
    workloads: tuple[WorkloadDemand, ...]
    outcomes: tuple[OutcomeScore, ...] = ()
    media_workloads: frozenset[str] = MEDIA_WORKLOADS


@dataclass(frozen=True, slots=True)
class Gate:
    """Whether a workload's evidence admits it to the portfolio, and how."""

    workload: str
    admitted: bool
    path: str  # observations | concurrency | media-canary | anticipated | resident | none
    canary_only: bool  # weak evidence: at most one replica
    reason: str
    # a proactive (anticipated) admission: the learned workload edge and its confidence
    edge: str | None = None
    edge_confidence: float | None = None


@dataclass(frozen=True, slots=True)
class PreemptionPath:
    """One planner-proved way to free a host for a candidate.

    ``replacement`` marks a path that removes an active speculative victim's only
    ready copy: allowed only for a mature beneficiary with at least
    ``replacement_pressure_ratio`` x the victim's pressure (``victim_pressure``).
    """

    host_id: str
    victims: tuple[str, ...]
    replacement: bool = False
    victim_pressure: float = 0.0


@dataclass(frozen=True, slots=True)
class CandidateRow:
    """One configured model considered for one workload, with every fact status shows."""

    workload: str
    model_id: str
    suitability: float
    utility: float  # with the exploration bonus
    exploitation_utility: float  # without it
    exploration_bonus: float
    transition_penalty: float
    confidence: float
    quality_confidence: float
    resident: bool
    compatible_hosts: int  # immutable compatibility (any lifecycle)
    eligible_hosts: int  # static rules pass now
    feasible_now: bool  # current headroom admits it somewhere
    best_host: str | None
    startup_seconds: float | None
    preemption_paths: tuple[PreemptionPath, ...]
    rejection: str | None
    # the outcome evidence behind confidence: effective (decayed) samples, age, freshness
    samples: float = 0.0
    evaluations: float = 0.0
    service_age_seconds: float | None = None
    quality_age_seconds: float | None = None
    service_freshness: float = 0.0
    quality_freshness: float = 0.0

    @property
    def preemption_only(self) -> bool:
        return not self.feasible_now and not self.resident and bool(self.preemption_paths)

    @property
    def usable(self) -> bool:
        return self.resident or self.feasible_now or bool(self.preemption_paths)


@dataclass(frozen=True, slots=True)
class AdmissionRow:
    """Why an active unbound workload is (or is not) being served."""

    workload: str
    state: AdmissionState
    model_id: str | None
    requests: int
    offered_concurrency: float
    desired: int
    planned: int
    ready: int
    missing: int
    eligible_hosts: int
    startup_seconds: float | None
    reason: str


@dataclass(frozen=True, slots=True)
class Evaluation:
    """One counterfactual portfolio, evaluated with the real planner."""

    mapping: tuple[tuple[str, str | None], ...]
    valid: bool
    objective: tuple[float, ...]
    covered: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True)
class PortfolioResult:
    """The joint decision: mapping, selected models, the demand to plan with, and rows."""

    mapping: tuple[tuple[str, str | None], ...]
    selected: tuple[str, ...]
    exploration_model: str | None
    preemption_model: str | None
    demand: tuple[ModelDemand, ...]  # base demand plus portfolio demand
    plan: Plan
    gates: tuple[Gate, ...]
    candidates: tuple[CandidateRow, ...]
    admission: tuple[AdmissionRow, ...]
    evaluations: int  # planner runs, probes included
    portfolios: int  # distinct portfolios evaluated
    thresholds: dict[str, float] = field(default_factory=dict)


def ranked_scorers(
    scores: Mapping[str, Mapping[str, float]], workload: str
) -> list[tuple[float, str]]:
    """``(score, model)`` for every model that scores ``workload`` above zero, best first,
    then by name: the order in which the router looks for a ready model to answer a
    workload its portfolio does not serve yet, and in which status names that model."""
    rows = [
        (float(ws.get(workload, 0.0)), model)
        for model, ws in scores.items()
        if float(ws.get(workload, 0.0)) > 0
    ]
    return sorted(rows, key=lambda row: (-row[0], row[1]))
