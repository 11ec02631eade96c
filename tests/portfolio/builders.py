"""Named builders for portfolio tests: one-slot and roomy fleets, workload demand."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gridctl.demand import WorkloadDemand
from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    ModelDemand,
    ModelProfile,
    Residency,
    ResidencyState,
)
from gridctl.planner.portfolio_types import PortfolioInputs

NOW = 1_800_000_000.0
POLICY = ControllerPolicy()


def box(host_id: str, slots: int = 1, capacity_mb: int = 16384, **changes: Any) -> HostSnapshot:
    """A small managed llama.cpp box with ``slots`` model slots."""
    return HostSnapshot(
        host_id=host_id,
        resources=HostResources(
            capacity_mb=capacity_mb, reserved_mb=1024, max_models=slots, disk_free_mb=100_000
        ),
        state=HostState.ACCEPTING,
        last_heartbeat=NOW - 1,
        **changes,
    )


def resident(
    model_id: str, state: ResidencyState = ResidencyState.READY, **changes: Any
) -> Residency:
    return Residency(
        model_id=model_id,
        memory_mb=8192,
        state=state,
        runtime="llama.cpp",
        loaded_at=NOW - 7200,
        last_used_at=NOW - 3600,
        **changes,
    )


def model(name: str, scores: dict[str, float], **changes: Any) -> ModelProfile:
    return ModelProfile(
        name=name, memory_mb=8192, workload_scores=scores, max_replicas=1, **changes
    )


def specialists_and_generalist() -> tuple[ModelProfile, ...]:
    return (
        model("coder-7b", {"coding": 0.95}),
        model("research-7b", {"research": 0.95}),
        model("general-7b", {"coding": 0.85, "research": 0.85, "general": 0.9}),
    )


def workload(
    name: str, requests: int = 10, concurrency: float | None = None, **changes: Any
) -> WorkloadDemand:
    rate = requests / 5.0
    oc = rate / 60.0 * 4.0 if concurrency is None else concurrency
    return replace(WorkloadDemand(name, requests, rate, oc, 0.0, 0.0, 4.0), **changes)


def inputs(
    profiles: tuple[ModelProfile, ...],
    hosts: tuple[HostSnapshot, ...],
    workloads: tuple[WorkloadDemand, ...],
    demand: tuple[ModelDemand, ...] = (),
    policy: ControllerPolicy = POLICY,
) -> PortfolioInputs:
    return PortfolioInputs(profiles, FleetSnapshot(NOW, hosts, demand), policy, workloads)
