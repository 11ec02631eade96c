"""Bounded joint search over workload-to-model maps, judged by the real planner.

A portfolio maps every admitted workload to one model (or defers it). Its
demand is counterfactual: inferred-class demand that fills spare capacity and
never preempts; at most one preemption-only model per tick gets direct-class
demand, fenced to the host of its one authorized path (its candidate row's
first path), and only a plan that stages exactly that path counts; an
unvalidated replacement (no outcome evidence yet) is capped at one canary. A
plan that preempts a protected model, or gives a baseline or directly
demanded model fewer replicas than the base plan, is invalid; a preemption the
base plan already stages (direct or baseline demand's own relocation, such as
a proactive repack) is inherited, not the portfolio's doing.

The objective, compared lexicographically (the scarce-fleet order): distinct
admitted workloads covered, recent failures restored, service-time-aware
pressure covered, requests covered, spare slots (fewer models), fewer missing
replicas, utility, lower transition cost. A workload is covered only when the
evaluated plan places its model, or stages the preemption-only model's safe
victim transition. Spare slots are worth keeping only where slots are scarce:
the admitted workloads outnumber the fleet's nominal model slots, or an
admitted workload is shut out, its compatible models finding no capacity. On
a nominally roomy fleet with every workload placeable, two portfolios that
cover the same workloads do not serve the same demand when one moves a
workload to a less suitable model, so there fewer models only breaks ties
after utility (missing replicas, utility, spare slots, transition cost) and
each workload keeps its best model instead of collapsing onto whichever model
a coordinate move happens to share. A shut-out workload switches back to the
scarce order, so consolidation frees a slot for it.

Search: a coordinate search from the exploitation leaders over at most
``portfolio_max_candidates_per_workload`` candidates per workload, plus, when
workloads outnumber the fleet's nominal model slots, admitted model subsets
ranked by cheap set coverage; at most ``portfolio_max_portfolios`` distinct
portfolios in all. At most one distinct model may be chosen because of the
exploration bonus (the fleet's exploration slot).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gridctl.domain import FleetSnapshot, ModelDemand, ModelProfile, Plan, ResidencyState
from gridctl.planner.portfolio_scan import (
    deny,
    protected_models,
    serving_active,
    validated_canary,
    with_demand,
    workload_confidence,
)
from gridctl.planner.portfolio_types import (
    CandidateRow,
    Evaluation,
    Gate,
    PortfolioInputs,
    PreemptionPath,
)
from gridctl.planner.preemption import yields_cooldown_hold

if TYPE_CHECKING:
    from gridctl.demand.learning import WorkloadDemand

Mapping_ = tuple[tuple[str, str | None], ...]
SUBSET_ENUMERATION_LIMIT = 4096
_LIVE = frozenset({ResidencyState.READY, ResidencyState.LOADING, ResidencyState.WARMING})


@dataclass
class SearchState:
    inputs: PortfolioInputs
    planner: Callable[[FleetSnapshot], Plan]
    base: Plan
    gates: dict[str, Gate]
    demand: dict[str, WorkloadDemand]
    candidates: dict[str, tuple[CandidateRow, ...]]  # per workload, best first
    seen: dict[Mapping_, tuple[Evaluation, Plan, tuple[ModelDemand, ...]]]
    runs: int = 0
    scarce: bool = True  # slots are scarce: spare slots rank before utility
    shut_out: frozenset[str] = frozenset()  # admitted workloads no compatible model can reach

    @functools.cached_property
    def live(self) -> frozenset[str]:
        """Models with a ready or starting managed copy on an admitting host."""
        return frozenset(
            r.model_id
            for h in self.inputs.snapshot.hosts
            if h.state.admits_new_work
            for r in h.residencies
            if r.state in _LIVE
        )

    @functools.cached_property
    def serving(self) -> frozenset[str]:
        """Models the router answers an admitted workload with now (``serving_active``)."""
        return serving_active(self.inputs, [w for w, g in self.gates.items() if g.admitted])

    @property
    def budget_left(self) -> bool:
        return len(self.seen) < self.inputs.policy.portfolio_max_portfolios


def rank_candidates(
    rows: Sequence[CandidateRow], breadth: Mapping[str, int], limit: int
) -> tuple[CandidateRow, ...]:
    """Best ``limit`` usable rows of one workload, reserving the exploitation leader and
    the broadest cross-workload candidate (most active workloads it can serve)."""
    usable = [r for r in rows if r.usable and r.suitability > 0]
    chosen: list[CandidateRow] = []
    if usable:
        leader = min(usable, key=lambda r: (-r.exploitation_utility, r.model_id))
        broad = min(usable, key=lambda r: (-breadth.get(r.model_id, 0), -r.utility, r.model_id))
        chosen = [leader] if broad is leader else [leader, broad]
    for row in sorted(usable, key=lambda r: (-r.utility, r.model_id)):
        if len(chosen) >= limit:
            break
        if row not in chosen:
            chosen.append(row)
    return tuple(sorted(chosen[:limit], key=lambda r: (-r.utility, r.model_id)))


def breadth_of(profiles: Sequence[ModelProfile], active: Sequence[str]) -> dict[str, int]:
    return {p.name: sum(1 for w in active if p.workload_scores.get(w, 0.0) > 0) for p in profiles}


def row_for(state: SearchState, workload: str, model_id: str | None) -> CandidateRow | None:
    for row in state.candidates.get(workload, ()):
        if row.model_id == model_id:
            return row
    return None


def exploring_models(state: SearchState, mapping: Mapping_) -> set[str]:
    """Models chosen only because the exploration bonus flipped the order."""
    found: set[str] = set()
    for workload, model_id in mapping:
        row = row_for(state, workload, model_id)
        rows = state.candidates.get(workload, ())
        if row is None or not rows:
            continue
        leader = min(rows, key=lambda r: (-r.exploitation_utility, r.model_id))
        if row.exploitation_utility < leader.exploitation_utility and row.utility >= leader.utility:
            found.add(row.model_id)
    return found


def preemption_only_models(state: SearchState, mapping: Mapping_) -> set[str]:
    found: set[str] = set()
    for workload, model_id in mapping:
        row = row_for(state, workload, model_id)
        if row is not None and row.preemption_only:
            found.add(row.model_id)
    return found


def portfolio_demand(state: SearchState, mapping: Mapping_) -> tuple[ModelDemand, ...]:
    """Counterfactual demand per selected model: inferred-class, one canary when weak."""
    profiles = {p.name: p for p in state.inputs.profiles}
    policy = state.inputs.policy
    grouped: dict[str, list[str]] = {}
    for workload, model_id in mapping:
        if model_id is not None:
            grouped.setdefault(model_id, []).append(workload)
    preempting = preemption_only_models(state, mapping)
    outcomes = {(o.model_id, o.workload, o.artifact_sha256): o for o in state.inputs.outcomes}
    rows: list[ModelDemand] = []
    for model_id, workloads in sorted(grouped.items()):
        profile = profiles[model_id]
        rate = 0.0
        weak = True
        confidence = 0.0
        for w in workloads:
            d = state.demand[w]
            # an unbound queue is workload backlog, not this model's concurrency
            rate += max(d.requests_per_minute, d.anticipated_requests_per_minute)
            proven = outcomes.get((model_id, w, profile.artifact.sha256 or ""))
            weak = weak and state.gates[w].canary_only and not validated_canary(proven, policy)
            confidence = max(confidence, prediction_confidence(d))
        rate = max(rate, 1e-6)
        row = next((r for w in workloads if (r := row_for(state, w, model_id)) is not None), None)
        if model_id in preempting and row is not None and _unvalidated_replacement(row):
            weak = True  # an unvalidated replacement is capped at one canary
        if weak:
            per_replica = profile.replica_concurrency * profile.target_utilization
            one = (
                per_replica
                / policy.demand_headroom
                / max(profile.expected_service_seconds, 1e-9)
                * 60.0
            )
            rate = min(rate, one * 0.999)
        if model_id in preempting:
            rows.append(ModelDemand(model_id, requests_per_minute=rate, confidence=0.0))
        else:
            rows.append(
                ModelDemand(model_id, correlated_requests_per_minute=rate, confidence=confidence)
            )
    return tuple(rows)


def prediction_confidence(demand: WorkloadDemand) -> float:
    """How sure the prediction behind a counterfactual row is: the workload's own evidence
    weight, or the learned transition's confidence when it is anticipated. Only the
    predictive cache weighs it (value per MB); placement reads the rate, and these rows
    carry no trend for the confidence to scale."""
    anticipated = demand.anticipated_confidence if demand.anticipated_requests_per_minute else 0.0
    return min(1.0, max(workload_confidence(demand), anticipated))


def _unvalidated_replacement(row: CandidateRow) -> bool:
    path = selected_path(row)
    return path is not None and path.replacement and row.confidence <= 0.0


def selected_path(row: CandidateRow) -> PreemptionPath | None:
    """The path the controller authorizes: the first one (floor-preserving paths first)."""
    return row.preemption_paths[0] if row.preemption_paths else None


def authorizations(state: SearchState, mapping: Mapping_) -> dict[str, PreemptionPath]:
    """Preemption-only model -> the one exact path it may use this tick."""
    found: dict[str, PreemptionPath] = {}
    for workload, model_id in mapping:
        row = row_for(state, workload, model_id)
        if row is None or not row.preemption_only or model_id in found:
            continue
        path = selected_path(row)
        if path is not None:
            found[row.model_id] = path
    return found


def evaluate(state: SearchState, mapping: Mapping_) -> Evaluation:
    found = state.seen.get(mapping)
    if found is not None:
        return found[0]
    demand = portfolio_demand(state, mapping)
    snapshot = with_demand(state.inputs.snapshot, demand)
    for model_id, path in sorted(authorizations(state, mapping).items()):
        # the authorization travels with the forecast: only the selected path's host
        others = [h.host_id for h in snapshot.hosts if h.host_id != path.host_id]
        snapshot = deny(snapshot, model_id, others)
    state.runs += 1
    plan = state.planner(snapshot)
    evaluation = judge(state, mapping, plan)
    state.seen[mapping] = (evaluation, plan, snapshot.demand)
    return evaluation


def judge(state: SearchState, mapping: Mapping_, plan: Plan) -> Evaluation:
    protected = protected_models(state.inputs)
    selected = {m for _, m in mapping if m is not None}
    authorized = authorizations(state, mapping)
    inherited = {(p.host_id, p.model_id, p.beneficiary) for p in state.base.preemptions}
    counts = _counts(plan)
    for p in plan.preemptions:
        if (p.host_id, p.model_id, p.beneficiary) in inherited:
            continue  # the base plan's own move (direct or baseline authority), not the portfolio's
        if p.model_id in protected:
            return Evaluation(mapping, False, (), (), f"would preempt {p.model_id}")
        if yields_cooldown_hold(p) and p.model_id in state.serving:
            # an admitted workload uses it, whatever this mapping gives it
            return Evaluation(mapping, False, (), (), f"would preempt {p.model_id}")
        if p.model_id in selected and not (
            yields_cooldown_hold(p) and counts.get(p.model_id, 0) > 0
        ):
            # a selected model may give up only a replica its demand does not ask for
            return Evaluation(mapping, False, (), (), f"would preempt {p.model_id}")
        if p.beneficiary not in selected or p.beneficiary in protected:
            continue  # direct or baseline demand keeps its own preemption authority
        path = authorized.get(p.beneficiary)
        if path is None or p.host_id != path.host_id or p.model_id not in path.victims:
            return Evaluation(
                mapping, False, (), (), f"preemption of {p.model_id} is not the authorized path"
            )
    base_counts = _counts(state.base)
    for model_id in protected:
        if counts.get(model_id, 0) < base_counts.get(model_id, 0):
            return Evaluation(mapping, False, (), (), f"would displace {model_id}")
    staged = {p.beneficiary for p in plan.preemptions}
    covered = sorted(
        w for w, m in mapping if m is not None and (counts.get(m, 0) > 0 or m in staged)
    )
    missing = sum(u.missing_replicas for u in plan.unsatisfied if u.model_id in selected)
    utility = transition = 0.0
    for w, m in mapping:
        row = row_for(state, w, m)
        if row is not None and w in covered:
            utility += row.utility
            transition += row.transition_penalty
    used = {m for w, m in mapping if m is not None and w in covered}
    objective = _objective(
        state, covered, used, float(missing), round(utility, 9), round(transition, 9)
    )
    return Evaluation(mapping, True, objective, tuple(covered))


def _objective(
    state: SearchState,
    covered: Sequence[str],
    used: set[str],
    missing: float,
    utility: float,
    transition: float,
) -> tuple[float, ...]:
    """The lexicographic objective; spare slots rank before utility only where scarce.

    A spare slot is kept by not loading another model. While no admitted workload is shut
    out, a model already live (ready or starting) holds its slot whichever portfolio is
    chosen this tick, and draining it frees a slot nobody asked for: there the slots a
    portfolio costs are the models it would newly start, and fewer models overall only
    breaks ties after utility. A shut-out workload needs a slot released, so there every
    model counts, and consolidation frees one."""
    served = (
        float(len(covered)),
        round(sum(state.demand[w].failures for w in covered), 9),
        round(sum(state.demand[w].offered_concurrency for w in covered), 9),
        round(sum(state.demand[w].requests_per_minute for w in covered), 9),
    )
    count = float(len(used))
    if state.scarce:
        # a shut-out workload needs a slot released, so there every model counts
        cost = count if state.shut_out else float(len(used - state.live))
        return (*served, -cost, -missing, utility, -count, -transition)
    return (*served, -missing, utility, -count, -transition)


def _counts(plan: Plan) -> dict[str, int]:
    counts: dict[str, int] = {}
    for a in plan.assignments:
        counts[a.model_id] = counts.get(a.model_id, 0) + 1
    return counts


def optimistic(state: SearchState, mapping: Mapping_) -> tuple[float, ...]:
    """An upper bound of the objective: every mapped workload covered, nothing missing."""
    covered = [w for w, m in mapping if m is not None]
    utility = transition = 0.0
    for w, m in mapping:
        row = row_for(state, w, m)
        if row is not None:
            utility += row.utility
            transition += row.transition_penalty
    used = {m for _, m in mapping if m is not None}
    return _objective(state, covered, used, 0.0, round(utility, 9), round(transition, 9))


def promising(state: SearchState, mapping: Mapping_, best: Evaluation | None) -> bool:
    """Worth a planner run: its optimistic objective beats the best one evaluated."""
    if best is None or not best.valid:
        return True
    return optimistic(state, mapping) > best.objective


def allowed(state: SearchState, mapping: Mapping_) -> bool:
    return len(exploring_models(state, mapping)) <= 1 and (
        len(preemption_only_models(state, mapping)) <= 1
    )


def better(a: Evaluation, b: Evaluation | None) -> bool:
    if not a.valid:
        return False
    if b is None or not b.valid:
        return True
    if a.objective != b.objective:
        return a.objective > b.objective
    return _mapping_key(a.mapping) < _mapping_key(b.mapping)


def _mapping_key(mapping: Mapping_) -> tuple[tuple[str, str], ...]:
    return tuple((w, m or "") for w, m in mapping)


def leaders(state: SearchState, workloads: Sequence[str]) -> Mapping_:
    chosen: list[tuple[str, str | None]] = []
    for w in workloads:
        rows = state.candidates.get(w, ())
        if not rows:
            chosen.append((w, None))
            continue
        leader = min(rows, key=lambda r: (-r.exploitation_utility, r.model_id))
        chosen.append((w, leader.model_id))
    return tuple(chosen)


def coordinate_search(state: SearchState, start: Mapping_) -> Evaluation | None:
    best: Evaluation | None = None
    first = evaluate(state, start) if allowed(state, start) else None
    if first is not None and first.valid:
        best = first
    current = start
    improved = True
    while improved and state.budget_left:
        improved = False
        for index, (workload, model_id) in enumerate(current):
            options: list[str | None] = [r.model_id for r in state.candidates.get(workload, ())]
            options.append(None)
            for option in options:
                if option == model_id or not state.budget_left:
                    continue
                trial = (*current[:index], (workload, option), *current[index + 1 :])
                if trial in state.seen or not allowed(state, trial):
                    continue
                if not promising(state, trial, best):
                    continue
                evaluation = evaluate(state, trial)
                if better(evaluation, best):
                    best, current, improved = evaluation, trial, True
                    break
            if improved:
                break
    return best


def nominal_slots(inputs: PortfolioInputs) -> int | None:
    """Model slots of the serving fleet, or None when any host's limit is unknown."""
    total = 0
    for host in inputs.snapshot.hosts:
        if host.state.value not in ("accepting", "throttled"):
            continue
        if host.resources.capacity_mb <= 0:
            continue  # an external endpoint: no serving slot for a managed model
        if host.resources.max_models <= 0:
            return None
        total += host.resources.max_models
    return total


def subset_search(
    state: SearchState, workloads: Sequence[str], slots: int, incumbent: Evaluation | None
) -> Evaluation | None:
    """Admitted model subsets ranked by cheap set coverage, verified by the planner."""
    models = sorted({r.model_id for w in workloads for r in state.candidates.get(w, ())})
    protected_now = {m for m in models if m in protected_models(state.inputs)}
    ranked: list[tuple[tuple[float, ...], Mapping_]] = []
    enumerated = 0
    for size in range(1, min(slots, len(models)) + 1):
        for subset in itertools.combinations(models, size):
            enumerated += 1
            if enumerated > SUBSET_ENUMERATION_LIMIT:
                break
            chosen = set(subset) | protected_now
            mapping: list[tuple[str, str | None]] = []
            utility = 0.0
            for w in workloads:
                rows = [r for r in state.candidates.get(w, ()) if r.model_id in chosen]
                best = max(rows, key=lambda r: (r.exploitation_utility, r.model_id), default=None)
                mapping.append((w, best.model_id if best else None))
                utility += best.exploitation_utility if best else 0.0
            covered = [w for w, m in mapping if m is not None]
            pressure = sum(state.demand[w].offered_concurrency for w in covered)
            key = (float(len(covered)), pressure, -float(size), utility)
            ranked.append((key, tuple(mapping)))
    ranked.sort(key=lambda item: (tuple(-k for k in item[0]), _mapping_key(item[1])))
    best_eval: Evaluation | None = incumbent
    for _, mapping_ in ranked:
        if not state.budget_left:
            break
        if not allowed(state, mapping_) or not promising(state, mapping_, best_eval):
            continue
        evaluation = evaluate(state, mapping_)
        if better(evaluation, best_eval):
            best_eval = evaluation
    return best_eval


def search(state: SearchState, workloads: Sequence[str]) -> Evaluation | None:
    slots = nominal_slots(state.inputs)
    state.scarce = bool(state.shut_out & set(workloads)) or (
        slots is not None and len(workloads) > slots
    )
    start = leaders(state, workloads)
    best = coordinate_search(state, start)
    distinct = len({m for _, m in start if m is not None})
    if slots is not None and state.scarce and distinct > 0:
        alternative = subset_search(state, workloads, max(1, slots), best)
        if alternative is not None and alternative is not best and better(alternative, best):
            best = alternative
            refined = coordinate_search(state, alternative.mapping)
            if refined is not None and better(refined, best):
                best = refined
    return best


def unplaced_predictions(
    every: Mapping[str, Sequence[CandidateRow]],
    mapping: Mapping[str, str | None],
    demand: Mapping[str, WorkloadDemand],
) -> tuple[ModelDemand, ...]:
    """Admitted workloads the joint search found no serving slot for, as predictions.

    Each names the workload's best statically eligible model as correlation-only
    demand, confidence-weighted like every prediction. The plan is already made,
    so a row never takes a slot: it is what the predictive cache reads to stage a
    cache-only copy on disk for when a slot opens (and what lets that copy expire
    once the prediction is gone)."""
    rows: list[ModelDemand] = []
    for workload, model_id in sorted(mapping.items()):
        if model_id is not None:
            continue
        eligible = [r for r in every.get(workload, ()) if r.eligible_hosts and r.suitability > 0]
        if not eligible:
            continue
        best = min(eligible, key=lambda r: (-r.exploitation_utility, r.model_id))
        d = demand[workload]
        rate = max(d.requests_per_minute, d.anticipated_requests_per_minute, 1e-6)
        rows.append(
            ModelDemand(
                best.model_id,
                correlated_requests_per_minute=rate,
                confidence=prediction_confidence(d),
            )
        )
    return tuple(rows)
