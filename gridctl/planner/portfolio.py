"""Portfolio planning, assembled in one readable function.

``plan_portfolio(inputs)`` decides which configured models serve the active
unbound workloads as one joint, fleet-wide choice: base plan (direct and
baseline demand only), admission gates, feasibility scan, ranked candidates,
bounded joint search judged by ``plan_placement``, the final authoritative
plan with the portfolio's counterfactual demand merged in, and one admission
row per active workload. Pure: no clock, no randomness, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    ModelProfile,
    Plan,
    UnsatisfiedCode,
    WorkloadCatalog,
)
from gridctl.planner.canonical import InputTexts
from gridctl.planner.fleet_index import SharedIndexes
from gridctl.planner.planning import plan_placement
from gridctl.planner.portfolio_admission import admission_rows, serving_model
from gridctl.planner.portfolio_scan import (
    FeasibilityScan,
    gate,
    spare_capacity_proof,
    with_demand,
    with_second_compatible_host,
)
from gridctl.planner.portfolio_search import (
    SearchState,
    breadth_of,
    evaluate,
    exploring_models,
    preemption_only_models,
    rank_candidates,
    search,
    unplaced_predictions,
)
from gridctl.planner.portfolio_types import (
    AdmissionRow,
    CandidateRow,
    Gate,
    PortfolioInputs,
    PortfolioResult,
)

if TYPE_CHECKING:
    from gridctl.demand.learning import DemandPicture

# shortfalls that say some model lacks room (not a rule, a pin or a missing host)
_CAPACITY_SHORTFALLS = frozenset(
    {
        UnsatisfiedCode.INSUFFICIENT_CAPACITY,
        UnsatisfiedCode.PREEMPTION_STAGED,
        UnsatisfiedCode.EVICTION_LIMIT,
        UnsatisfiedCode.DISK_ADMISSION,
    }
)


def inputs_from_picture(
    profiles: Sequence[ModelProfile],
    snapshot: FleetSnapshot,
    policy: ControllerPolicy,
    picture: DemandPicture,
    catalog: WorkloadCatalog,
) -> PortfolioInputs:
    """Portfolio inputs whose demand is the learners' picture instead of the snapshot's."""
    media = frozenset(
        w.name
        for w in catalog.workloads
        if {"image", "video"} & (set(w.endpoints) | set(w.modalities))
    )
    return PortfolioInputs(
        profiles=tuple(sorted(profiles, key=lambda p: p.name)),
        snapshot=replace(snapshot, demand=picture.models),
        policy=policy,
        workloads=picture.workloads,
        outcomes=picture.outcomes,
        media_workloads=media,
    )


def retained(
    inputs: PortfolioInputs, gates: dict[str, Gate], spare: bool, base: Plan
) -> dict[str, tuple[Gate, str]]:
    """Below-gate workloads whose serving model stays: with the fleet's spare-capacity
    proof, a workload that has an observation in the demand window, or whose next
    arrival is still expected by its rhythm (``WorkloadDemand.recurs``), keeps the READY
    model the router answers it with as one canary (correlation-only demand: spare
    capacity only, never a preemption) instead of losing it once the scale-down cooldown
    passes. Its only candidate is that model, so thin evidence never loads another.

    Keeping a model already resident loads nothing, so a rhythm keeps it without the
    proof (which is about room to explore) while the base plan lacks capacity for
    nobody; once it does, the model's slot is demanded and the rhythm lets it go."""
    crowded = any(u.code in _CAPACITY_SHORTFALLS for u in base.unsatisfied)
    if not spare and crowded:
        return {}
    kept: dict[str, tuple[Gate, str]] = {}
    for demand in inputs.workloads:
        current = gates[demand.workload]
        recurs = demand.requests < 1 and demand.recurs(inputs.policy)
        if current.admitted or (demand.requests < 1 and not recurs):
            continue
        if not spare and not recurs:
            continue  # an observation alone keeps a model only with the proof
        serving = serving_model(inputs.snapshot, inputs.profiles, demand.workload, inputs.policy)
        if serving is None:
            continue
        if recurs:
            evidence = (
                f"its arrivals come up to {demand.recurrence_gap_seconds / 60.0:g} min apart "
                f"and the last was {demand.last_arrival_age_seconds / 60.0:g} min ago"
            )
        else:
            evidence = f"{demand.requests} observation(s) in the demand window"
        room = "fleet spare capacity" if spare else "no capacity shortfall"
        reason = f"{serving.name} is ready and serves it; {evidence} with {room}"
        admitted = Gate(demand.workload, True, "resident", True, reason)
        kept[demand.workload] = (admitted, serving.name)
    return kept


def plan_portfolio(inputs: PortfolioInputs) -> PortfolioResult:
    profiles, policy = inputs.profiles, inputs.policy
    texts = InputTexts()  # profiles, policy and hosts are serialised once for every plan
    indexes = SharedIndexes()  # and indexed once: only demand differs between the plans

    def planner(snapshot: FleetSnapshot) -> Plan:
        return plan_placement(profiles, snapshot, policy, texts=texts, indexes=indexes)

    base = planner(inputs.snapshot)
    spare = spare_capacity_proof(inputs, base)
    demand = {w.workload: w for w in inputs.workloads}
    gates = {w.workload: gate(w, inputs, spare) for w in inputs.workloads}
    kept = retained(inputs, gates, spare, base)
    gates.update({w: g for w, (g, _) in kept.items()})
    active = sorted(w for w, g in gates.items() if g.admitted)
    scan = FeasibilityScan(inputs, planner, {w: demand[w] for w in active})
    scored = [p for p in profiles if any(p.workload_scores.get(w, 0.0) > 0 for w in active)]
    scan.scan([p.name for p in scored])
    outcomes = {(o.model_id, o.workload, o.artifact_sha256): o for o in inputs.outcomes}
    breadth = breadth_of(profiles, active)
    every: dict[str, tuple[CandidateRow, ...]] = {}
    ranked: dict[str, tuple[CandidateRow, ...]] = {}
    for workload in active:
        rows = tuple(
            scan.candidate(
                p,
                workload,
                outcomes.get((p.name, workload, p.artifact.sha256 or "")),
                gates[workload],
            )
            for p in scored
            if p.workload_scores.get(workload, 0.0) > 0
            and (workload not in kept or p.name == kept[workload][1])
        )
        every[workload] = rows
        gates[workload] = with_second_compatible_host(gates[workload], rows)
    for workload in [w for w in active if not gates[w].admitted]:
        del every[workload]  # a media canary with no second compatible host waits
    active = [w for w in active if gates[w].admitted]
    for workload in active:
        ranked[workload] = rank_candidates(
            every[workload], breadth, policy.portfolio_max_candidates_per_workload
        )
    shut_out = frozenset(
        w
        for w in active
        if not ranked[w] and any(r.compatible_hosts > 0 and r.suitability > 0 for r in every[w])
    )
    state = SearchState(inputs, planner, base, gates, demand, ranked, {}, shut_out=shut_out)
    best = search(state, active) if active else None
    mapping: dict[str, str | None] = dict.fromkeys(active)
    plan = base
    final_demand = inputs.snapshot.demand
    if best is not None:
        covered = set(best.covered)
        final = tuple((w, m if w in covered else None) for w, m in best.mapping)
        evaluation = evaluate(state, final)
        if evaluation.valid:
            _, plan, final_demand = state.seen[final]
            mapping = dict(final)
    predictions = unplaced_predictions(every, mapping, demand)
    if predictions:  # disk-only: the plan above never saw them
        final_demand = with_demand(
            replace(inputs.snapshot, demand=final_demand), predictions
        ).demand
    chosen = tuple(mapping.items())
    selected = tuple(sorted({m for m in mapping.values() if m is not None}))
    exploring = sorted(exploring_models(state, chosen))
    preempting = sorted(preemption_only_models(state, chosen))
    admission = admission_rows(
        inputs.snapshot, profiles, plan, inputs.workloads, gates, every, mapping, policy
    )
    return PortfolioResult(
        mapping=chosen,
        selected=selected,
        exploration_model=exploring[0] if exploring else None,
        preemption_model=preempting[0] if preempting else None,
        demand=final_demand,
        plan=plan,
        gates=tuple(gates[w] for w in sorted(gates)),
        candidates=tuple(r for w in active for r in every[w]),
        admission=admission,
        evaluations=1 + scan.runs + state.runs,
        portfolios=len(state.seen),
        thresholds={
            "min_observations": float(policy.portfolio_min_observations),
            "min_offered_concurrency": policy.portfolio_min_offered_concurrency,
            "media_canary_min_offered_concurrency": policy.media_canary_min_offered_concurrency,
        },
    )


def portfolio_to_json(result: PortfolioResult) -> dict[str, Any]:
    """The JSON shape status and ``gridctl plan --observations`` print."""
    return {
        "mapping": {w: m for w, m in result.mapping},
        "selected": list(result.selected),
        "exploration_model": result.exploration_model,
        "preemption_model": result.preemption_model,
        "evaluations": result.evaluations,
        "portfolios": result.portfolios,
        "thresholds": dict(sorted(result.thresholds.items())),
        "gates": [
            {
                "workload": g.workload,
                "admitted": g.admitted,
                "path": g.path,
                "canary_only": g.canary_only,
                "reason": g.reason,
                "workload_edge": g.edge,
                "edge_confidence": g.edge_confidence,
            }
            for g in result.gates
        ],
        "candidates": [
            {
                "workload": c.workload,
                "model": c.model_id,
                "suitability": c.suitability,
                "utility": round(c.utility, 6),
                "exploration_bonus": round(c.exploration_bonus, 6),
                "transition_penalty": round(c.transition_penalty, 6),
                "confidence": round(c.confidence, 6),
                "quality_confidence": round(c.quality_confidence, 6),
                "effective_samples": c.samples,
                "effective_evaluations": c.evaluations,
                "evidence_age_seconds": c.service_age_seconds,
                "quality_age_seconds": c.quality_age_seconds,
                "evidence_freshness": c.service_freshness,
                "quality_freshness": c.quality_freshness,
                "resident": c.resident,
                "feasible_now": c.feasible_now,
                "compatible_hosts": c.compatible_hosts,
                "eligible_hosts": c.eligible_hosts,
                "best_host": c.best_host,
                "startup_seconds": c.startup_seconds,
                "preemption_paths": [
                    {
                        "host": p.host_id,
                        "victims": list(p.victims),
                        "replacement": p.replacement,
                        "victim_pressure": p.victim_pressure,
                    }
                    for p in c.preemption_paths
                ],
                "rejection": c.rejection,
            }
            for c in result.candidates
        ],
        "admission": [admission_row_json(r) for r in result.admission],
    }


def admission_row_json(row: AdmissionRow) -> dict[str, Any]:
    return {
        "workload": row.workload,
        "state": row.state.value,
        "model_id": row.model_id,
        "requests": row.requests,
        "offered_concurrency": row.offered_concurrency,
        "desired": row.desired,
        "planned": row.planned,
        "ready": row.ready,
        "missing": row.missing,
        "eligible_hosts": row.eligible_hosts,
        "startup_estimate_seconds": row.startup_seconds,
        "reason": row.reason,
    }
