"""Admission gates and the feasibility scan of portfolio candidates.

Gates: a workload joins the portfolio after ``portfolio_min_observations``
requests, or with at least ``portfolio_min_offered_concurrency`` units of
device-time pressure (one canary). Image and video work between
``media_canary_min_offered_concurrency`` and that threshold may earn one
canary only after the fleet spare-capacity proof. A workload anticipated by
a mature affinity transition may earn one inferred-only canary.

Scan: every candidate is judged by the real planner, never by a copy of its
rules. One probe plan adds one inferred replica of every candidate at once;
a candidate the shared probe could not place is probed alone (current
headroom), and a candidate that still does not fit is probed with direct
demand to learn up to ``preemption_path_limit`` planner-proved preemption
paths (each staged host is then denied to it and the planner asked again),
kept only when every victim is speculative (no pin, no minimum replicas, no
direct demand). Per workload, the authorized paths are those that leave every
active victim a ready copy elsewhere, then at most one replacement of an
active victim's only copy for a mature beneficiary with at least
``replacement_pressure_ratio`` x its confidence-weighted device-time pressure.
The explanations give eligible and compatible host counts and the best host.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    ModelDemand,
    ModelExplanation,
    ModelProfile,
    Plan,
    ResidencyState,
)
from gridctl.planner.portfolio_admission import serving_model
from gridctl.planner.portfolio_types import CandidateRow, Gate, PortfolioInputs, PreemptionPath
from gridctl.planner.preemption import yields_cooldown_hold
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.startup_paths import learned_on, start_seconds

if TYPE_CHECKING:
    from gridctl.demand.learning import WorkloadDemand
    from gridctl.demand.outcomes import OutcomeScore

Planner = Callable[[FleetSnapshot], Plan]
SUITABILITY_POINTS = 100.0
FULL_CONFIDENCE_REQUESTS = 20.0  # like a model forecast's confidence
FAILURE_POINTS = 30.0
TRANSITION_POINTS_MAX = 10.0
TRANSITION_SECONDS_PER_POINT = 30.0
LIFECYCLE_CODES = frozenset(
    {"host_state", "heartbeat_missing", "heartbeat_stale", "heartbeat_future"}
)
SERVING_STATES = frozenset({ResidencyState.READY, ResidencyState.WARMING, ResidencyState.LOADING})


def gate(workload: WorkloadDemand, inputs: PortfolioInputs, spare_proof: bool) -> Gate:
    policy = inputs.policy
    name = workload.workload
    concurrency = workload.offered_concurrency
    if workload.requests >= policy.portfolio_min_observations:
        return Gate(
            name,
            True,
            "observations",
            False,
            f"{workload.requests} observations >= {policy.portfolio_min_observations}",
        )
    if concurrency >= policy.portfolio_min_offered_concurrency:
        return Gate(
            name,
            True,
            "concurrency",
            True,
            f"offered concurrency {concurrency:.2f} >= "
            f"{policy.portfolio_min_offered_concurrency:g}",
        )
    media = name in inputs.media_workloads
    if media and concurrency >= policy.media_canary_min_offered_concurrency:
        if spare_proof:
            return Gate(
                name,
                True,
                "media-canary",
                True,
                f"offered concurrency {concurrency:.2f} with fleet spare capacity",
            )
        return Gate(
            name,
            False,
            "none",
            True,
            f"offered concurrency {concurrency:.2f} < "
            f"{policy.portfolio_min_offered_concurrency:g}; no fleet spare-capacity proof",
        )
    if workload.anticipated_requests_per_minute > 0:
        return Gate(
            name,
            True,
            "anticipated",
            True,
            f"anticipated after {', '.join(workload.anticipated_from)}",
            edge=f"{','.join(workload.anticipated_from)} -> {name}",
            edge_confidence=round(workload.anticipated_confidence, 6),
        )
    return Gate(
        name,
        False,
        "none",
        False,
        f"{workload.requests} of {policy.portfolio_min_observations} observations, "
        f"offered concurrency {concurrency:.2f} < "
        f"{policy.portfolio_min_offered_concurrency:g}",
    )


def with_second_compatible_host(gate_: Gate, rows: Sequence[CandidateRow]) -> Gate:
    """A media canary admitted on the fleet proof also needs a second compatible host for
    some model that scores the workload: a canary that fits on one host only is not
    exploration the fleet can afford to lose a node over."""
    if gate_.path != "media-canary" or any(r.compatible_hosts >= 2 for r in rows):
        return gate_
    return Gate(
        gate_.workload,
        False,
        "none",
        True,
        gate_.reason + ", but no model that scores it has a second compatible host",
    )


def validated_canary(outcome: OutcomeScore | None, policy: ControllerPolicy) -> bool:
    """A fresh successful response from the exact model, workload and artifact: it proves
    the canary and removes its one-replica cap. Fresh = within the demand window."""
    if outcome is None or not outcome.success_rate or outcome.samples <= 0:
        return False
    age = outcome.service_age_seconds
    window = policy.demand_bucket_seconds * policy.demand_window_buckets
    return age is not None and age <= window


def spare_capacity_proof(inputs: PortfolioInputs, base: Plan) -> bool:
    """Can the fleet safely explore? Known free model slots must cover one canary, one
    unseen workload, one node failure and one copy of every enabled catalog model."""
    desired: dict[str, set[str]] = {}
    for a in base.assignments:
        desired.setdefault(a.host_id, set()).add(a.model_id)
    free = 0
    largest = 0
    resident: set[str] = set()  # a live copy is a feasible copy: it is not needed twice
    for host in inputs.snapshot.hosts:
        limit = host.resources.max_models
        if limit <= 0 or host.state.value not in ("accepting", "throttled"):
            continue  # unknown model-slot limits give no hypothetical headroom
        live = {r.model_id for r in host.residencies}
        resident |= live
        host_free = max(0, limit - len(desired.get(host.host_id, set()) | live))
        free += host_free
        largest = max(largest, host_free)
    placed = {a.model_id for a in base.assignments}
    enabled = {p.name for p in inputs.profiles if p.workload_scores} - placed - resident
    return free - largest >= 2 + len(enabled)


def with_demand(snapshot: FleetSnapshot, extra: Sequence[ModelDemand]) -> FleetSnapshot:
    """The snapshot with ``extra`` merged into its demand (correlated fields by maximum)."""
    merged = {d.model_id: d for d in snapshot.demand}
    for d in extra:
        old = merged.get(d.model_id)
        if old is None:
            merged[d.model_id] = d
            continue
        merged[d.model_id] = replace(
            old,
            requests_per_minute=max(old.requests_per_minute, d.requests_per_minute),
            offered_concurrency=max(old.offered_concurrency, d.offered_concurrency),
            correlated_requests_per_minute=max(
                old.correlated_requests_per_minute, d.correlated_requests_per_minute
            ),
        )
    return replace(snapshot, demand=tuple(merged[m] for m in sorted(merged)))


def deny(snapshot: FleetSnapshot, model_id: str, hosts: Iterable[str]) -> FleetSnapshot:
    """The snapshot with ``model_id`` on the deny list of ``hosts`` (a probe-only fence)."""
    fenced = frozenset(hosts)
    if not fenced:
        return snapshot
    return replace(
        snapshot,
        hosts=tuple(
            replace(
                h,
                resources=replace(
                    h.resources, denied_models=(*h.resources.denied_models, model_id)
                ),
            )
            if h.host_id in fenced and model_id not in h.resources.denied_models
            else h
            for h in snapshot.hosts
        ),
    )


def workload_confidence(demand: WorkloadDemand) -> float:
    """Evidence weight of a workload's demand: full at ``FULL_CONFIDENCE_REQUESTS``."""
    return min(1.0, demand.requests / FULL_CONFIDENCE_REQUESTS)


def workload_pressure(demand: WorkloadDemand) -> float:
    """Confidence-weighted device-time pressure: offered concurrency x confidence."""
    return demand.offered_concurrency * workload_confidence(demand)


def serving_active(inputs: PortfolioInputs, workloads: Iterable[str]) -> frozenset[str]:
    """The models the router answers the admitted ``workloads`` with now. The scale-down
    cooldown is not what keeps them: a workload uses them, so a probe that sees only
    the cooldown behind one must not take it (``held_idle``)."""
    found = set()
    for workload in workloads:
        model = serving_model(inputs.snapshot, inputs.profiles, workload, inputs.policy)
        if model is not None:
            found.add(model.name)
    return frozenset(found)


def canary(model_id: str) -> ModelDemand:
    return ModelDemand(model_id, correlated_requests_per_minute=1e-6, confidence=0.0)


def protected_models(inputs: PortfolioInputs) -> frozenset[str]:
    """Models speculative demand may never displace: pinned, baseline, directly demanded."""
    found = {p.name for p in inputs.profiles if p.pins or p.min_replicas > 0}
    found |= {d.model_id for d in inputs.snapshot.demand if d.has_direct_evidence}
    for host in inputs.snapshot.hosts:
        found |= {r.model_id for r in host.residencies if r.pinned or not r.actuatable}
    return frozenset(found)


def _explanation(plan: Plan, model_id: str) -> ModelExplanation | None:
    for e in plan.explanations:
        if e.model_id == model_id:
            return e
    return None


def _is_static(code: str) -> bool:
    try:
        return Rejection(RejectionCode(code)).is_static
    except ValueError:
        return False


class FeasibilityScan:
    """Probe plans, shared across every workload that lists the same model."""

    def __init__(
        self,
        inputs: PortfolioInputs,
        planner: Planner,
        active: Mapping[str, WorkloadDemand] | None = None,
    ) -> None:
        self.inputs = inputs
        self.planner = planner
        self.runs = 0
        self.protected = protected_models(inputs)
        self.active = dict(active or {})
        self.serving = serving_active(inputs, self.active)
        self._profiles = {p.name: p for p in inputs.profiles}
        self._facts: dict[
            str, tuple[int, int, bool, str | None, tuple[PreemptionPath, ...], str | None]
        ] = {}

    def _plan(self, extra: Sequence[ModelDemand]) -> Plan:
        self.runs += 1
        return self.planner(with_demand(self.inputs.snapshot, extra))

    def scan(self, models: Sequence[str]) -> None:
        todo = [m for m in sorted(set(models)) if m not in self._facts]
        if not todo:
            return
        shared = self._plan([canary(m) for m in todo])
        for model_id in todo:
            explanation = _explanation(shared, model_id)
            placed = [a for a in shared.assignments_for(model_id)]
            if placed or explanation is None:
                self._record(model_id, explanation, placed[0].host_id if placed else None, ())
                continue
            alone = self._plan([canary(model_id)])
            alone_placed = alone.assignments_for(model_id)
            if alone_placed:
                self._record(model_id, _explanation(alone, model_id), alone_placed[0].host_id, ())
                continue
            paths = self._preemption_paths(model_id)
            self._record(model_id, _explanation(alone, model_id), None, paths)

    def _preemption_paths(self, model_id: str) -> tuple[PreemptionPath, ...]:
        """Up to ``preemption_path_limit`` planner-proved paths, best first.

        Each probe gives the candidate direct-class demand; the host the planner
        stages is then denied to it and the planner asked again, so the ranking is
        the planner's own and every path is proved, not assumed. Paths that would
        displace a protected model are dropped.
        """
        demand = [ModelDemand(model_id, requests_per_minute=1e-6, confidence=0.0)]
        limit = self.inputs.policy.preemption_path_limit
        paths: list[PreemptionPath] = []
        tried: set[str] = set()
        for _ in range(len(self.inputs.snapshot.hosts)):
            if len(paths) >= limit:
                break
            self.runs += 1
            snapshot = deny(with_demand(self.inputs.snapshot, demand), model_id, tried)
            probe = self.planner(snapshot)
            by_host: dict[str, list[str]] = {}
            in_use: set[str] = set()  # hosts whose path would take a model a workload uses
            for p in probe.preemptions:
                if p.beneficiary == model_id and p.host_id not in tried:
                    by_host.setdefault(p.host_id, []).append(p.model_id)
                    if yields_cooldown_hold(p) and p.model_id in self.serving:
                        in_use.add(p.host_id)
            if not by_host:
                break
            for host, victims in sorted(by_host.items()):
                tried.add(host)
                if not set(victims) & self.protected and host not in in_use:
                    paths.append(PreemptionPath(host, tuple(sorted(victims))))
        return tuple(paths[:limit])

    def _ready_elsewhere(self, model_id: str, host_id: str) -> int:
        profile = self._profiles.get(model_id)
        sha = profile.artifact.sha256 if profile is not None else None
        return sum(
            1
            for host in self.inputs.snapshot.hosts
            if host.host_id != host_id
            for r in host.residencies
            if r.model_id == model_id
            and r.state is ResidencyState.READY
            and (sha is None or r.artifact_sha256 == sha)
        )

    def victim_pressure(self, model_id: str, workload: str) -> float:
        """Confidence-weighted device-time pressure an incumbent serves, besides ``workload``:
        active workloads it scores and is resident for, plus its correlated demand."""
        profile = self._profiles.get(model_id)
        if profile is None:
            return 0.0
        pressure = 0.0
        if self._resident(model_id):
            for name, demand in sorted(self.active.items()):
                if name != workload and profile.workload_scores.get(name, 0.0) > 0:
                    pressure += workload_pressure(demand)
        for d in self.inputs.snapshot.demand:
            if d.model_id == model_id and d.correlated_requests_per_minute > 0:
                pressure += (
                    d.correlated_requests_per_minute / 60.0 * (profile.expected_service_seconds)
                )
        return pressure

    def authorized_paths(
        self, model_id: str, workload: str, gate_: Gate | None
    ) -> tuple[tuple[PreemptionPath, ...], str | None]:
        """The paths this workload's candidate may use, and why others were refused.

        First every path that leaves each active victim a ready copy elsewhere (its
        ready-replica floor), in the planner's order; then at most one replacement
        path that removes an active victim's only ready copy, for a mature
        beneficiary (the observations gate) with at least ``replacement_pressure_ratio``
        x that victim's pressure. A canary never takes a speculative model's only copy.
        """
        paths = self._facts[model_id][4]
        keep: list[PreemptionPath] = []
        replacement: PreemptionPath | None = None
        refused: list[str] = []
        ratio = self.inputs.policy.replacement_pressure_ratio
        demand = self.active.get(workload)
        mine = workload_pressure(demand) if demand is not None else 0.0
        mature = gate_ is not None and gate_.admitted and not gate_.canary_only
        for path in paths:
            floors = [
                (v, self.victim_pressure(v, workload))
                for v in path.victims
                if self._ready_elsewhere(v, path.host_id) < 1
            ]
            breaking = [(v, pressure) for v, pressure in floors if pressure > 0]
            if not breaking:
                keep.append(path)
                continue
            theirs = max(pressure for _, pressure in breaking)
            names = ", ".join(v for v, _ in breaking)
            if not mature:
                refused.append(f"{path.host_id}: would remove the only ready copy of {names}")
            elif mine + 1e-9 < ratio * theirs:
                refused.append(
                    f"{path.host_id}: pressure {mine:.2f} < {ratio:g} x {theirs:.2f} of {names}"
                )
            elif replacement is None:
                replacement = replace(path, replacement=True, victim_pressure=round(theirs, 6))
        if replacement is not None:
            keep.append(replacement)
        reason = None if keep or not refused else "no authorized path (" + "; ".join(refused) + ")"
        return tuple(keep), reason

    def _record(
        self,
        model_id: str,
        explanation: ModelExplanation | None,
        best_host: str | None,
        paths: tuple[PreemptionPath, ...],
    ) -> None:
        compatible = eligible = 0
        codes: set[str] = set()
        if explanation is not None:
            for c in explanation.candidates:
                static = c.rejection is not None and _is_static(c.rejection)
                if not static:
                    eligible += 1
                if not static or c.rejection in LIFECYCLE_CODES:
                    compatible += 1
                if c.rejection is not None:
                    codes.add(c.rejection)
        rejection = None
        if best_host is None and not paths:
            rejection = "no eligible host" if eligible == 0 else "no capacity"
            if codes:
                rejection += f" ({', '.join(sorted(codes))})"
        resident = self._resident(model_id)
        self._facts[model_id] = (
            compatible,
            eligible,
            best_host is not None,
            best_host,
            paths,
            None if resident else rejection,
        )

    def _resident(self, model_id: str) -> bool:
        profile = next(p for p in self.inputs.profiles if p.name == model_id)
        for host in self.inputs.snapshot.hosts:
            for r in host.residencies:
                if (
                    r.model_id == model_id
                    and r.state in SERVING_STATES
                    and (
                        profile.artifact.sha256 is None
                        or r.artifact_sha256 == profile.artifact.sha256
                    )
                ):
                    return True
        return False

    def startup_seconds(self, profile: ModelProfile) -> float | None:
        if self._resident(profile.name):
            return 0.0
        # the fastest learned start path on any host (priors where nothing was learned)
        sha = profile.artifact.sha256
        paths = [start_seconds(profile, None, False)]
        for host in self.inputs.snapshot.hosts:
            cached = any(
                c.model_id == profile.name and (sha is None or c.artifact_sha256 == sha)
                for c in host.cached
            )
            learned = learned_on(host, profile.name)
            if cached or learned is not None:
                paths.append(start_seconds(profile, learned, cached))
        return min(paths)

    def candidate(
        self,
        profile: ModelProfile,
        workload: str,
        outcome: OutcomeScore | None,
        gate_: Gate | None = None,
    ) -> CandidateRow:
        compatible, eligible, feasible, best, paths, rejection = self._facts[profile.name]
        resident = self._resident(profile.name)
        if paths and not feasible and not resident:
            paths, refused = self.authorized_paths(profile.name, workload, gate_)
            rejection = rejection or refused
        policy = self.inputs.policy
        suitability = float(profile.workload_scores.get(workload, 0.0))
        points = SUITABILITY_POINTS * suitability
        confidence = quality_confidence = 0.0
        bonus = policy.exploration_bonus_points
        if outcome is not None:
            confidence, quality_confidence = outcome.confidence, outcome.quality_confidence
            bonus = outcome.exploration_bonus
            if outcome.quality is not None:
                points = (1 - quality_confidence) * points + quality_confidence * (
                    SUITABILITY_POINTS * outcome.quality
                )
            if outcome.success_rate is not None:
                points -= FAILURE_POINTS * (1.0 - outcome.success_rate) * confidence
        startup = None if eligible == 0 and not resident else self.startup_seconds(profile)
        penalty = 0.0
        if not resident and startup is not None:
            penalty = min(TRANSITION_POINTS_MAX, startup / TRANSITION_SECONDS_PER_POINT)
        exploit = points - penalty
        if not feasible and not resident:
            bonus = 0.0
            if paths:
                exploit -= 2.0 * policy.exploration_bonus_points  # preemption-only penalty
        return CandidateRow(
            workload=workload,
            model_id=profile.name,
            suitability=suitability,
            utility=exploit + bonus,
            exploitation_utility=exploit,
            exploration_bonus=bonus,
            transition_penalty=penalty,
            confidence=confidence,
            quality_confidence=quality_confidence,
            resident=resident,
            compatible_hosts=compatible,
            eligible_hosts=eligible,
            feasible_now=feasible,
            best_host=best,
            startup_seconds=startup,
            preemption_paths=paths,
            rejection=rejection,
            **_evidence_facts(outcome, policy.evidence_half_life_seconds),
        )


def _evidence_facts(outcome: OutcomeScore | None, half_life: float) -> dict[str, Any]:
    """Effective samples, ages and freshness (0..1, halving every half-life) for status."""
    if outcome is None:
        return {}

    def fresh(age: float | None) -> float:
        if age is None or half_life <= 0:
            return 0.0
        return round(float(0.5 ** (max(0.0, age) / half_life)), 6)

    return {
        "samples": round(outcome.samples, 6),
        "evaluations": round(outcome.evaluations, 6),
        "service_age_seconds": outcome.service_age_seconds,
        "quality_age_seconds": outcome.quality_age_seconds,
        "service_freshness": fresh(outcome.service_age_seconds),
        "quality_freshness": fresh(outcome.quality_age_seconds),
    }
