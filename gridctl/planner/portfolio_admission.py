"""Admission rows: one per active unbound workload, explaining the joint decision.

Rows read the authoritative plan and the observed residencies; they never
run a second solver. States, in the order they are decided: below the
evidence gate, ready when a model scoring the workload is already READY (the
router serves the workload there, so a workload whose earlier evidence left the
demand window while its request is being served never falls back), else
awaiting-plan; with no usable candidate, blocked-by-residency (a
non-serving or stale copy occupies the host), capacity-contended or
infeasible (no configured model can ever serve it here); deferred
(intentionally left out under current capacity); then for the chosen model:
ready / undersupplied, starting, planned, blocked-by-residency and
capacity-contended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from gridctl.domain import (
    Assignment,
    ControllerPolicy,
    FleetSnapshot,
    ModelProfile,
    Plan,
    ResidencyState,
)
from gridctl.planner.portfolio_types import (
    AdmissionRow,
    AdmissionState,
    CandidateRow,
    Gate,
    ranked_scorers,
)

if TYPE_CHECKING:
    from gridctl.demand.learning import WorkloadDemand

_RESIDENCY_BLOCKS = ("model_resident", "stale_artifact_in_place")


def replica_counts(snapshot: FleetSnapshot, profile: ModelProfile) -> tuple[int, int]:
    """(ready, starting) residencies of the profile's exact artifact."""
    ready = starting = 0
    sha = profile.artifact.sha256
    for host in snapshot.hosts:
        for r in host.residencies:
            if r.model_id != profile.name or (sha is not None and r.artifact_sha256 != sha):
                continue
            if r.state is ResidencyState.READY:
                ready += 1
            elif r.state in (ResidencyState.LOADING, ResidencyState.WARMING):
                starting += 1
    return ready, starting


def _fetched_for_assignment(
    snapshot: FleetSnapshot, profile: ModelProfile, assignments: Sequence[Assignment]
) -> int:
    """Assigned hosts whose load has finished and whose warm is still to come.

    Between an acknowledged load and the delivery of its warm the host only shows
    the weights on disk; the replica is still starting, so the row must not fall
    back to "planned".
    """
    sha = profile.artifact.sha256
    count = 0
    for assignment in assignments:
        host = snapshot.host(assignment.host_id)
        if host is None:
            continue
        rows = [r for r in host.residencies if r.model_id == profile.name]
        if any(r.state is not ResidencyState.CACHED for r in rows):
            continue  # loading/warming/ready rows are counted by replica_counts
        on_disk = [r.artifact_sha256 for r in rows] + [
            c.artifact_sha256 for c in host.cached if c.model_id == profile.name
        ]
        if any(sha is None or have == sha for have in on_disk):
            count += 1
    return count


def admission_rows(
    snapshot: FleetSnapshot,
    profiles: Sequence[ModelProfile],
    plan: Plan,
    workloads: Sequence[WorkloadDemand],
    gates: Mapping[str, Gate],
    candidates: Mapping[str, Sequence[CandidateRow]],
    mapping: Mapping[str, str | None],
    policy: ControllerPolicy,
) -> tuple[AdmissionRow, ...]:
    by_name = {p.name: p for p in profiles}
    rows: list[AdmissionRow] = []
    for demand in sorted(workloads, key=lambda d: d.workload):
        gate = gates[demand.workload]
        options = list(candidates.get(demand.workload, ()))
        model_id = mapping.get(demand.workload)
        row = _Row(demand)
        if not gate.admitted:
            serving = serving_model(snapshot, profiles, demand.workload, policy)
            if serving is None:
                rows.append(row.done(AdmissionState.AWAITING_PLAN, None, gate.reason))
            else:
                rows.append(_served_below_gate(row, snapshot, serving, plan, gate, options))
            continue
        usable = [c for c in options if c.usable]
        if not usable:
            hostable = [c for c in options if c.eligible_hosts > 0]
            if hostable:
                best = min(hostable, key=lambda c: (-c.exploitation_utility, c.model_id))
                row.eligible, row.startup = best.eligible_hosts, best.startup_seconds
                if best.rejection is not None and _residency_blocked(best.rejection):
                    rows.append(
                        row.done(
                            AdmissionState.BLOCKED_BY_RESIDENCY,
                            best.model_id,
                            f"{best.model_id}: {best.rejection}; a non-serving copy or an old "
                            "artifact revision still occupies its host",
                        )
                    )
                    continue
                rows.append(
                    row.done(
                        AdmissionState.CAPACITY_CONTENDED,
                        best.model_id,
                        f"{best.model_id}: {best.rejection}; no speculative capacity to replace",
                    )
                )
                continue
            rows.append(row.done(AdmissionState.INFEASIBLE, None, _infeasible(options, demand)))
            continue
        if model_id is None:
            best = min(usable, key=lambda c: (-c.exploitation_utility, c.model_id))
            row.eligible, row.startup = best.eligible_hosts, best.startup_seconds
            rows.append(
                row.done(
                    AdmissionState.DEFERRED,
                    best.model_id,
                    f"deferred under current capacity; {best.model_id} would serve it",
                )
            )
            continue
        rows.append(_chosen(row, snapshot, by_name[model_id], plan, options, gate))
    return tuple(rows)


def serving_model(
    snapshot: FleetSnapshot,
    profiles: Sequence[ModelProfile],
    workload: str,
    policy: ControllerPolicy,
) -> ModelProfile | None:
    """The model the router answers a below-gate ``workload`` with: the best-scoring
    profile (then by name) with a READY copy of its exact artifact on a host that admits
    new work and whose heartbeat is fresh; None when there is none."""
    by_name = {p.name: p for p in profiles}
    scorers = ranked_scorers({p.name: p.workload_scores for p in profiles}, workload)
    live = {
        (r.model_id, r.artifact_sha256)
        for h in snapshot.hosts
        if h.state.admits_new_work
        and h.last_heartbeat is not None
        and snapshot.now - h.last_heartbeat <= policy.heartbeat_stale_seconds
        for r in h.residencies
        if r.state is ResidencyState.READY
    }
    for _score, name in scorers:
        profile = by_name[name]
        sha = profile.artifact.sha256
        if any(m == profile.name and (sha is None or s == sha) for m, s in live):
            return profile
    return None


def _served_below_gate(
    row: _Row,
    snapshot: FleetSnapshot,
    profile: ModelProfile,
    plan: Plan,
    gate: Gate,
    options: Sequence[CandidateRow],
) -> AdmissionRow:
    """Below the evidence gate, served by a model that is already ready: the gate decides
    new placements only, so the row reports the service, and the gate in its reason."""
    model_id = profile.name
    row.desired = dict(plan.targets).get(model_id, 0)
    row.planned = len(plan.assignments_for(model_id))
    row.ready, _ = replica_counts(snapshot, profile)
    candidate = next((c for c in options if c.model_id == model_id), None)
    row.eligible = max(candidate.eligible_hosts if candidate else 0, row.ready)
    row.missing = max(0, row.desired - row.planned)
    served = f"{model_id} is ready and serves {row.demand.workload}"
    if row.ready < row.desired:
        return row.done(
            AdmissionState.UNDERSUPPLIED,
            model_id,
            f"{served}: {row.ready} of {row.desired} replicas ready; "
            f"below the evidence gate: {gate.reason}",
        )
    return row.done(
        AdmissionState.READY, model_id, f"{served}; below the evidence gate: {gate.reason}"
    )


class _Row:
    def __init__(self, demand: WorkloadDemand) -> None:
        self.demand = demand
        self.desired = self.planned = self.ready = self.missing = self.eligible = 0
        self.startup: float | None = None

    def done(self, state: AdmissionState, model_id: str | None, reason: str) -> AdmissionRow:
        return AdmissionRow(
            workload=self.demand.workload,
            state=state,
            model_id=model_id,
            requests=self.demand.requests,
            offered_concurrency=round(self.demand.offered_concurrency, 6),
            desired=self.desired,
            planned=self.planned,
            ready=self.ready,
            missing=self.missing,
            eligible_hosts=self.eligible,
            startup_seconds=self.startup,
            reason=reason,
        )


def _residency_blocked(rejection: str) -> bool:
    return any(code in rejection for code in _RESIDENCY_BLOCKS)


def _infeasible(options: Sequence[CandidateRow], demand: WorkloadDemand) -> str:
    if not options:
        return f"no configured model scores workload {demand.workload}"
    parts = [f"{c.model_id}: {c.rejection or 'no path'}" for c in options]
    return "; ".join(parts)


def _chosen(
    row: _Row,
    snapshot: FleetSnapshot,
    profile: ModelProfile,
    plan: Plan,
    options: Sequence[CandidateRow],
    gate: Gate,
) -> AdmissionRow:
    model_id = profile.name
    candidate = next((c for c in options if c.model_id == model_id), None)
    targets = dict(plan.targets)
    assignments = plan.assignments_for(model_id)
    row.desired = targets.get(model_id, 0)
    row.planned = len(assignments)
    row.ready, starting = replica_counts(snapshot, profile)
    starting += _fetched_for_assignment(snapshot, profile, assignments)
    row.missing = max(0, row.desired - row.planned)
    if candidate is not None:
        row.eligible, row.startup = candidate.eligible_hosts, candidate.startup_seconds
    canary = " (one canary: " + gate.path + ")" if gate.canary_only else ""
    if row.ready:
        row.eligible = max(row.eligible, row.ready)  # a host serving it is one that can
        if row.ready < row.desired:
            return row.done(
                AdmissionState.UNDERSUPPLIED,
                model_id,
                f"{model_id}: {row.ready} of {row.desired} replicas ready, "
                f"{row.planned} planned, {starting} starting",
            )
        return row.done(AdmissionState.READY, model_id, f"{model_id} ready{canary}")
    if starting:
        return row.done(
            AdmissionState.STARTING,
            model_id,
            f"{model_id} starting ({starting} loading or warming)",
        )
    if assignments:
        hosts = ", ".join(a.host_id for a in assignments)
        return row.done(AdmissionState.PLANNED, model_id, f"{model_id} planned on {hosts}{canary}")
    staged = [p for p in plan.preemptions if p.beneficiary == model_id]
    if staged:
        victims = ", ".join(f"{p.model_id} on {p.host_id}" for p in staged)
        return row.done(AdmissionState.PLANNED, model_id, f"preemption staged: {victims}")
    unsatisfied = [u for u in plan.unsatisfied if u.model_id == model_id]
    rejection = candidate.rejection if candidate is not None else None
    if rejection is not None and _residency_blocked(rejection):
        return row.done(AdmissionState.BLOCKED_BY_RESIDENCY, model_id, rejection)
    message = unsatisfied[0].message if unsatisfied else (rejection or "no free capacity")
    return row.done(AdmissionState.CAPACITY_CONTENDED, model_id, message)
