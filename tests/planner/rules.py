"""An independent, deliberately naive checker of the planner's hard rules.

It re-derives every rule from the spec and the inputs without importing the
planner's internals, so a bug shared by the planner and its own helpers
cannot hide. Each function returns a list of human-readable violations.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    HostSnapshot,
    HostState,
    ModelDemand,
    ModelProfile,
    Ownership,
    Plan,
    Residency,
    ResidencyState,
    UnsatisfiedCode,
)

SERVING = (ResidencyState.READY, ResidencyState.LOADING, ResidencyState.WARMING)
PRESSURE_ERROR_RATE = 0.05  # an error share that is service harm on its own


def _replicas(concurrency: float, p: ModelProfile, policy: ControllerPolicy) -> int:
    """Replicas for ``concurrency`` at the profile's utilisation, with demand headroom."""
    if concurrency <= 0:
        return 0
    per_replica = p.replica_concurrency * p.target_utilization
    return max(1, math.ceil(concurrency * policy.demand_headroom / per_replica - 1e-9))


def cold_target_bounds(
    p: ModelProfile, d: ModelDemand | None, policy: ControllerPolicy
) -> tuple[int, int]:
    """The replica target on a fleet where nothing is ready or recently used, as
    (lowest, highest): pins fix it; otherwise the larger of direct demand (offered
    concurrency at the target utilisation with headroom, and one replica under queue,
    latency or error pressure), correlated demand (capped by the observed peak) and
    ``min_replicas``, kept within the replica bounds. A rising trend may raise direct
    demand across the cold start by at most the lookahead multiplier, so the bounds
    differ only then."""
    if p.pins:
        return len(p.pins), len(p.pins)
    low = high = inferred = 0
    if d is not None:
        if d.requests_per_minute > 0 or d.queue_depth > 0 or d.error_rate > 0:
            offered = d.offered_concurrency or (
                d.requests_per_minute / 60.0 * p.expected_service_seconds + d.queue_depth
            )
            low = high = _replicas(offered, p, policy)
            if d.trend_per_minute > 0 and d.requests_per_minute > 0:
                high = _replicas(offered * policy.lookahead_max_multiplier, p, policy)
            slow = (
                p.latency_slo_ms is not None
                and d.p95_latency_ms is not None
                and d.p95_latency_ms > p.latency_slo_ms
            )
            if d.queue_depth > 0 or slow or d.error_rate >= PRESSURE_ERROR_RATE:
                low, high = max(low, 1), max(high, 1)
        rate = d.correlated_requests_per_minute
        if d.observed_peak_requests_per_minute > 0:
            rate = min(
                rate, d.observed_peak_requests_per_minute * policy.inferred_demand_peak_multiplier
            )
        inferred = _replicas(rate / 60.0 * p.expected_service_seconds, p, policy)

    def bounded(direct: int) -> int:
        wanted = max(direct, inferred, p.min_replicas)
        return max(min(wanted, p.max_replicas), p.min_replicas)

    return bounded(low), bounded(high)


def raw_mb(h: HostSnapshot) -> int:
    r = h.resources
    return max(0, int(r.capacity_mb * r.thermal_derate) - r.reserved_mb)


def new_capacity_mb(h: HostSnapshot) -> int:
    raw = raw_mb(h)
    return int(raw * h.resources.throttle_fraction) if h.state is HostState.THROTTLED else raw


def charged(p: ModelProfile | None, row: Residency, h: HostSnapshot) -> int:
    if p is None:
        return row.memory_mb
    if row.runtime is not None:
        estimate = p.runtime_memory_mb.get(row.runtime, p.memory_mb)
    else:
        matching = [
            p.runtime_memory_mb.get(r, p.memory_mb) for r in p.runtimes if r in h.resources.runtimes
        ]
        estimate = max(matching) if matching else p.memory_mb
    return max(row.memory_mb, estimate)


def live_rows(h: HostSnapshot) -> list[Residency]:
    return [r for r in h.residencies if r.state is not ResidencyState.CACHED]


def admits(h: HostSnapshot, now: float, policy: ControllerPolicy) -> bool:
    if h.state not in (HostState.ACCEPTING, HostState.THROTTLED) or h.last_heartbeat is None:
        return False
    age = now - h.last_heartbeat
    if age > policy.heartbeat_stale_seconds or -age > policy.heartbeat_future_skew_seconds:
        return False
    return h.kind not in ("external-endpoint", "external")


def static_ok(p: ModelProfile, h: HostSnapshot) -> str | None:
    r = h.resources
    if not set(p.runtimes) & set(r.runtimes):
        return "runtime"
    if p.backends and not set(p.backends) & set(r.backends):
        return "backend"
    if p.data_tier not in r.allowed_data_tiers:
        return "data tier"
    if not set(p.required_tags) <= set(r.tags):
        return "required tag"
    if set(p.forbidden_tags) & set(r.tags):
        return "forbidden tag"
    if r.allowed_models and p.name not in r.allowed_models:
        return "allow list"
    if p.name in r.denied_models:
        return "deny list"
    if p.pins and h.host_id not in p.pins:
        return "pin"
    if p.min_gpu_count and r.gpu_count < p.min_gpu_count:
        return "gpu count"
    if p.min_gpu_memory_mb and r.gpu_memory_mb < p.min_gpu_memory_mb:
        return "gpu memory"
    return None


def _colocation_broken(members: set[str], profiles: dict[str, ModelProfile]) -> str | None:
    for name in sorted(members):
        p = profiles.get(name)
        if p is None:
            continue
        if p.max_colocated_models and len(members) > p.max_colocated_models:
            return f"{name} ceiling {p.max_colocated_models} < {len(members)}"
        for other in p.colocation_excludes:
            if other in members and other != name:
                return f"{name} excludes {other}"
    return None


def hard_rule_violations(
    profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, policy: ControllerPolicy, plan: Plan
) -> list[str]:
    """Ledgers, eligibility, runtime, slots, colocation, disk, one replica per host."""
    by_name = {p.name: p for p in profiles}
    out: list[str] = []
    seen: set[tuple[str, str]] = set()
    for a in plan.assignments:
        if (a.model_id, a.host_id) in seen:
            out.append(f"two replicas of {a.model_id} on {a.host_id}")
        seen.add((a.model_id, a.host_id))
    for h in snapshot.hosts:
        mine = [a for a in plan.assignments if a.host_id == h.host_id]
        if not mine:
            continue
        live = live_rows(h)
        unmanaged = max(
            h.resources.external_mb,
            sum(
                charged(by_name.get(r.model_id), r, h)
                for r in live
                if r.ownership is not Ownership.MANAGED
            ),
        )
        live_managed = sum(
            charged(by_name.get(r.model_id), r, h) for r in live if r.ownership is Ownership.MANAGED
        )
        fixed_rows = [r for r in live if r.ownership is not Ownership.MANAGED or r.pinned]
        fixed_mb = sum(
            charged(by_name.get(r.model_id), r, h)
            for r in fixed_rows
            if r.ownership is Ownership.MANAGED
        )
        new = [a for a in mine if not a.existing]
        if not admits(h, snapshot.now, policy):
            out.append(f"assignment on ineligible host {h.host_id}")
        for a in mine:
            p = by_name[a.model_id]
            why = static_ok(p, h)
            if why:
                out.append(f"{a.model_id} on {h.host_id} breaks {why}")
            if a.runtime not in p.runtimes or a.runtime not in h.resources.runtimes:
                out.append(f"{a.model_id} on {h.host_id} runs incompatible runtime {a.runtime}")
        new_mb = sum(a.memory_mb for a in new)
        if (
            new
            and unmanaged + live_managed + new_mb + policy.admission_headroom_mb
            > new_capacity_mb(h)
        ):
            out.append(f"incremental ledger overcommitted on {h.host_id}")
        desired = unmanaged + fixed_mb + new_mb
        for a in mine:
            if not a.existing:
                continue
            rows = [r for r in live if r.model_id == a.model_id and r.state in SERVING]
            if rows and all(r.ownership is Ownership.MANAGED and not r.pinned for r in rows):
                desired += a.memory_mb
        if desired - unmanaged - fixed_mb > 0 and desired > raw_mb(h):
            out.append(f"desired ledger overcommitted on {h.host_id}: {desired} > {raw_mb(h)}")
        fixed_models = {r.model_id for r in fixed_rows}
        desired_models = {a.model_id for a in mine} | fixed_models
        limit = h.resources.max_models
        if (
            limit
            and len(desired_models) > limit
            and any(a.model_id not in fixed_models for a in mine)
        ):
            out.append(
                f"desired models {sorted(desired_models)} exceed {limit} slots on {h.host_id}"
            )
        if new and limit:
            now_models = {r.model_id for r in live} | {a.model_id for a in new}
            if len(now_models) > limit:
                out.append(f"new placement over {limit} live slots on {h.host_id}")
        if new:
            broken = _colocation_broken(
                {r.model_id for r in live} | {a.model_id for a in new}, by_name
            )
            if broken:
                out.append(f"colocation on {h.host_id}: {broken}")
        broken = _colocation_broken(desired_models, by_name)
        if broken and any(a.model_id not in fixed_models for a in mine):
            out.append(f"desired colocation on {h.host_id}: {broken}")
        disk = 0
        for a in new:
            p = by_name[a.model_id]
            cached = any(
                c.model_id == p.name
                and (p.artifact.sha256 is None or c.artifact_sha256 == p.artifact.sha256)
                for c in h.cached
            ) or any(
                r.model_id == p.name
                and (p.artifact.sha256 is None or r.artifact_sha256 == p.artifact.sha256)
                and r.state in (*SERVING, ResidencyState.CACHED)
                for r in h.residencies
            )
            if not cached and p.artifact.size_mb:
                disk += p.artifact.size_mb
        if disk and (h.resources.disk_free_mb is None or disk > h.resources.disk_free_mb):
            out.append(f"disk overcommitted on {h.host_id}: {disk} MB")
    return out


def pin_violations(profiles: Sequence[ModelProfile], plan: Plan) -> list[str]:
    out = []
    for p in profiles:
        if not p.pins:
            continue
        hosts = {a.host_id for a in plan.assignments if a.model_id == p.name}
        if hosts - set(p.pins):
            out.append(f"{p.name} placed off its pins: {sorted(hosts - set(p.pins))}")
        missing = set(p.pins) - hosts
        reported = sum(u.missing_replicas for u in plan.unsatisfied if u.model_id == p.name)
        if missing and reported < len(missing):
            out.append(f"{p.name} pins {sorted(missing)} neither placed nor reported")
    return out


def domain_violations(
    profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, plan: Plan
) -> list[str]:
    out = []
    domains = {h.host_id: h.resources.failure_domain for h in snapshot.hosts}
    targets = dict(plan.targets)
    for p in profiles:
        placed = {domains[a.host_id] for a in plan.assignments if a.model_id == p.name}
        required = min(p.min_failure_domains, targets[p.name])
        if placed and len(placed) < required:
            codes = {u.code for u in plan.unsatisfied if u.model_id == p.name}
            if UnsatisfiedCode.FAILURE_DOMAIN_SHORTFALL not in codes:
                out.append(f"{p.name} spans {len(placed)} < {required} domains, unreported")
    return out


def preemption_violations(
    profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, policy: ControllerPolicy, plan: Plan
) -> list[str]:
    by_name = {p.name: p for p in profiles}
    demand = {d.model_id: d for d in snapshot.demand}
    hosts = {h.host_id: h for h in snapshot.hosts}
    out = []
    if len(plan.preemptions) > policy.max_evictions_per_plan:
        out.append(f"{len(plan.preemptions)} evictions > {policy.max_evictions_per_plan}")
    for e in plan.preemptions:
        rows = [r for r in live_rows(hosts[e.host_id]) if r.model_id == e.model_id]
        if not rows:
            out.append(f"preempting absent {e.model_id} on {e.host_id}")
        for r in rows:
            if r.ownership is not Ownership.MANAGED or r.pinned:
                out.append(f"preempting {r.ownership.value} pinned={r.pinned} {e.model_id}")
        victim = by_name.get(e.model_id)
        if victim is not None and e.host_id in victim.pins:
            out.append(f"preempting {e.model_id} on its pinned host {e.host_id}")
        if any(a.model_id == e.model_id and a.host_id == e.host_id for a in plan.assignments):
            out.append(f"{e.model_id} both kept and staged out on {e.host_id}")
        if e.reason.startswith("host policy tightened") or e.beneficiary == e.model_id:
            continue
        b = by_name[e.beneficiary]
        d = demand.get(b.name)
        correlation_only = d is not None and d.correlation_only
        if (d is None or correlation_only) and not b.pins and b.min_replicas == 0:
            out.append(f"{b.name} preempted {e.model_id} without baseline, pin or direct demand")
    return out


def repack_violations(
    profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, plan: Plan
) -> list[str]:
    """A proactive repack moves only configured work of no higher priority, past its minimum
    residency (unless already releasing), and the beneficiary is not placed on the host
    before its release."""
    by_name = {p.name: p for p in profiles}
    hosts = {h.host_id: h for h in snapshot.hosts}
    releasing = {"draining", "unloading", "failed"}
    out = []
    for e in plan.preemptions:
        if not e.reason.startswith("proactive repack"):
            continue
        victim = by_name.get(e.model_id)
        beneficiary = by_name[e.beneficiary]
        if victim is None:
            out.append(f"repack moved unconfigured {e.model_id}")
            continue
        if victim.priority > beneficiary.priority:
            out.append(f"repack moved {e.model_id} ({victim.priority}) for {e.beneficiary}")
        if any(a.model_id == e.beneficiary and a.host_id == e.host_id for a in plan.assignments):
            out.append(f"{e.beneficiary} placed on {e.host_id} before its release")
        for r in live_rows(hosts[e.host_id]):
            young = r.loaded_at is not None and snapshot.now - r.loaded_at < (
                victim.min_residency_seconds
            )
            if r.model_id == e.model_id and young and r.state.value not in releasing:
                out.append(f"repack moved {e.model_id} inside its minimum residency")
    return out


def accounting_violations(plan: Plan) -> list[str]:
    """Every target replica is placed or reported missing (fail honestly)."""
    out = []
    for model, target in plan.targets:
        placed = sum(1 for a in plan.assignments if a.model_id == model)
        missing = sum(u.missing_replicas for u in plan.unsatisfied if u.model_id == model)
        if placed + missing != target:
            out.append(f"{model}: {placed} placed + {missing} reported != target {target}")
    return out
