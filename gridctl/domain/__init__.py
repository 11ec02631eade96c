"""Frozen value types shared by the pure core and the shell around it (no I/O)."""

from gridctl.domain.actions import Action, ActionKind, Receipt, ReceiptStatus
from gridctl.domain.desired import DesiredState, Fleet
from gridctl.domain.fleet import (
    ALL_DATA_TIERS,
    CachedArtifact,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostSpec,
    LearnedOnHost,
    ModelDemand,
    Residency,
)
from gridctl.domain.plans import (
    Assignment,
    CandidateExplanation,
    CandidateRows,
    DemandClass,
    LazyRows,
    ModelExplanation,
    Plan,
    Preemption,
    ScoreComponent,
    Unsatisfied,
    UnsatisfiedCode,
)
from gridctl.domain.policy import DEFAULT_WORKLOADS, ControllerPolicy, Workload, WorkloadCatalog
from gridctl.domain.profiles import DEFAULT_RUNTIME, Artifact, ModelProfile
from gridctl.domain.states import DataTier, HostState, Mode, Ownership, ResidencyState

__all__ = [
    "ALL_DATA_TIERS",
    "DEFAULT_RUNTIME",
    "DEFAULT_WORKLOADS",
    "Action",
    "ActionKind",
    "Artifact",
    "Assignment",
    "CachedArtifact",
    "CandidateExplanation",
    "CandidateRows",
    "ControllerPolicy",
    "DataTier",
    "DemandClass",
    "DesiredState",
    "Fleet",
    "FleetSnapshot",
    "HostResources",
    "HostSnapshot",
    "HostSpec",
    "HostState",
    "LazyRows",
    "LearnedOnHost",
    "Mode",
    "ModelDemand",
    "ModelExplanation",
    "ModelProfile",
    "Ownership",
    "Plan",
    "Preemption",
    "Receipt",
    "ReceiptStatus",
    "Residency",
    "ResidencyState",
    "ScoreComponent",
    "Unsatisfied",
    "UnsatisfiedCode",
    "Workload",
    "WorkloadCatalog",
]
