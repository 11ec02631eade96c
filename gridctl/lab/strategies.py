"""The four controls a scenario can run, on identical inputs.

- ``smart``: the production workload intelligence and planner, exactly the
  controller's tick (learners' picture with correlation and anticipated
  workflow demand, portfolio, planner, reconciler).
- ``reactive``: the same, without workflow correlation, lookahead or
  predictive cache work (correlated and anticipated demand removed from the
  picture, lookahead off, cache-only prefetch loads never issued).
- ``greedy``: the current minute's visible workload only, each workload mapped
  to its highest-suitability feasible model, planned by the ordinary
  constrained placement planner.
- ``static``: the declared population's average workload mix, planned once;
  the resulting host/model map never changes, not even around a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from enum import StrEnum

from gridctl.demand import DemandPicture, WorkloadDemand
from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    HostSnapshot,
    ModelDemand,
    ModelProfile,
)
from gridctl.planner import plan_placement
from gridctl.planner.eligibility import static_rejection
from gridctl.planner.host_views import build_host_view
from gridctl.planner.runtimes import runtime_for_new_placement
from gridctl.tick import Decision


class Strategy(StrEnum):
    SMART = "smart"
    REACTIVE = "reactive"
    GREEDY = "greedy"
    STATIC = "static"


STRATEGIES = tuple(Strategy)


def reactive_picture(picture: DemandPicture) -> DemandPicture:
    """The picture with every predictive input removed: no correlation, no anticipation."""
    models = tuple(replace(m, correlated_requests_per_minute=0.0) for m in picture.models)
    workloads = tuple(
        replace(w, anticipated_requests_per_minute=0.0, anticipated_from=())
        for w in picture.workloads
        if w.requests > 0
    )
    return replace(
        picture,
        models=models,
        correlation_sources=(),
        workloads=workloads,
        transitions=(),
        relations=(),
    )


def reactive_policy(policy: ControllerPolicy) -> ControllerPolicy:
    return replace(policy, lookahead_max_seconds=0.0)


def feasible_models(
    profiles: Mapping[str, ModelProfile],
    hosts: tuple[HostSnapshot, ...],
    now: float,
    policy: ControllerPolicy,
) -> frozenset[str]:
    """Models some admitting host could take right now (static rules and raw memory)."""
    found: set[str] = set()
    for host in hosts:
        view = build_host_view(host, profiles, now, policy)
        for name, profile in profiles.items():
            if name in found or static_rejection(profile, view) is not None:
                continue
            choice = runtime_for_new_placement(profile, host)
            if choice is not None and choice[1] <= view.raw_mb:
                found.add(name)
    return frozenset(found)


def best_model(
    workload: str, profiles: Mapping[str, ModelProfile], feasible: frozenset[str]
) -> str | None:
    """The highest-suitability feasible model for a workload (ties by name)."""
    ranked = sorted(
        (-p.workload_scores.get(workload, 0.0), name)
        for name, p in profiles.items()
        if name in feasible and p.workload_scores.get(workload, 0.0) > 0
    )
    return ranked[0][1] if ranked else None


def greedy_decision(
    profiles: Mapping[str, ModelProfile],
    snapshot: FleetSnapshot,
    policy: ControllerPolicy,
    minute_counts: Mapping[str, int],
    named_counts: Mapping[str, int],
) -> Decision:
    """Plan for exactly the last minute's visible requests."""
    feasible = feasible_models(profiles, snapshot.hosts, snapshot.now, policy)
    mapping: dict[str, str | None] = {}
    rates: dict[str, float] = dict(named_counts)
    for workload, count in sorted(minute_counts.items()):
        model = best_model(workload, profiles, feasible)
        mapping[workload] = model
        if model is not None and count > 0:
            rates[model] = rates.get(model, 0.0) + count
    demand = tuple(
        ModelDemand(
            model_id=model,
            requests_per_minute=rate,
            offered_concurrency=rate / 60.0 * profiles[model].expected_service_seconds,
            sample_count=int(rate),
            observed_peak_requests_per_minute=rate,
        )
        for model, rate in sorted(rates.items())
        if model in profiles and rate > 0
    )
    ordered = tuple(sorted(profiles.values(), key=lambda p: p.name))
    plan = plan_placement(ordered, replace(snapshot, demand=demand), policy)
    return Decision(plan, demand, tuple(sorted(mapping.items())))


def static_workloads(mix: Mapping[str, float], window_minutes: float) -> tuple[WorkloadDemand, ...]:
    """The population's average mix as steady unbound workload demand."""
    return tuple(
        WorkloadDemand(
            workload=workload,
            requests=max(1, round(rate * window_minutes)),
            requests_per_minute=rate,
            offered_concurrency=rate / 60.0 * 2.0,
            queue_depth=0.0,
            error_rate=0.0,
            mean_service_seconds=2.0,
        )
        for workload, rate in sorted(mix.items())
        if rate > 0
    )
