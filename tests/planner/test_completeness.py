"""Completeness against brute force, so a planner that places nothing cannot pass.

On random empty fleets of <= 4 hosts and <= 3 models, the planner's replica targets
are first checked against the spec's target rule (``rules.cold_target_bounds``), then
every assignment of replicas to hosts is enumerated and checked with the independent rules in
``rules.py``. Whenever some assignment meets every model's replica minimum,
the planner must meet them too, unless higher-priority work (which fills
first) took a host the model could use; and every replica it leaves missing must be
truly impossible to add beside what it placed (so each reported reason code
is honest), and it places at least as many replicas as the best assignment
whenever the models share one priority and one size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import combinations, product

from hypothesis import HealthCheck, given, settings

from gridctl.domain import ControllerPolicy, FleetSnapshot, HostSnapshot, ModelProfile, Plan
from gridctl.planner import plan_placement

from .rules import admits, cold_target_bounds, new_capacity_mb, raw_mb, static_ok
from .strategies import planning_inputs

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]


def footprint(p: ModelProfile, h: HostSnapshot) -> int:
    runtimes = [r for r in p.runtimes if r in h.resources.runtimes]
    return min(p.runtime_memory_mb.get(r, p.memory_mb) for r in runtimes)


def host_ok(h: HostSnapshot, models: Sequence[ModelProfile], policy: ControllerPolicy) -> bool:
    if not models:
        return True
    fps = [footprint(p, h) for p in models]
    used = h.resources.external_mb + sum(fps)
    if used + policy.admission_headroom_mb > new_capacity_mb(h) or used > raw_mb(h):
        return False
    limit = h.resources.max_models
    if limit and len(models) > limit:
        return False
    names = {p.name for p in models}
    for p in models:
        if p.max_colocated_models and len(models) > p.max_colocated_models:
            return False
        if set(p.colocation_excludes) & (names - {p.name}):
            return False
    disk = 0
    for p in models:
        cached = any(
            c.model_id == p.name
            and (p.artifact.sha256 is None or c.artifact_sha256 == p.artifact.sha256)
            for c in h.cached
        )
        if not cached and p.artifact.size_mb:
            disk += p.artifact.size_mb
    return not disk or (h.resources.disk_free_mb is not None and disk <= h.resources.disk_free_mb)


def choices(
    p: ModelProfile,
    hosts: Sequence[HostSnapshot],
    snapshot: FleetSnapshot,
    target: int,
    pol: ControllerPolicy,
) -> list[tuple[str, ...]]:
    usable = [h.host_id for h in hosts if admits(h, snapshot.now, pol) and static_ok(p, h) is None]
    return [c for k in range(0, min(target, len(usable)) + 1) for c in combinations(usable, k)]


def assignments(
    profiles: list[ModelProfile],
    snapshot: FleetSnapshot,
    targets: dict[str, int],
    pol: ControllerPolicy,
) -> Iterator[dict[str, tuple[str, ...]]]:
    options = [choices(p, snapshot.hosts, snapshot, targets[p.name], pol) for p in profiles]
    by_host = {h.host_id: h for h in snapshot.hosts}
    for combo in product(*options):
        load: dict[str, list[ModelProfile]] = {}
        for p, hosts in zip(profiles, combo, strict=True):
            for host_id in hosts:
                load.setdefault(host_id, []).append(p)
        if all(host_ok(by_host[h], ms, pol) for h, ms in load.items()):
            yield {p.name: hosts for p, hosts in zip(profiles, combo, strict=True)}


def minimum(p: ModelProfile, target: int) -> int:
    return len(p.pins) if p.pins else min(p.min_replicas, target)


def placed(plan: Plan, model: str) -> tuple[str, ...]:
    return tuple(sorted(a.host_id for a in plan.assignments if a.model_id == model))


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs(max_hosts=4, max_models=3, empty=True))
def test_planner_is_complete_against_brute_force(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    targets = dict(plan.targets)
    # the targets the search is held to are checked against the spec's rule first, so a
    # planner that asked for too few replicas cannot pass by asking for nothing
    demand = {d.model_id: d for d in snapshot.demand}
    for p in profiles:
        low, high = cold_target_bounds(p, demand.get(p.name), policy)
        assert low <= targets[p.name] <= high, (p.name, targets[p.name], (low, high))
    by_host = {h.host_id: h for h in snapshot.hosts}
    mine = {p.name: placed(plan, p.name) for p in profiles}

    best_total = 0
    minimums_possible = False
    for option in assignments(profiles, snapshot, targets, policy):
        best_total = max(best_total, sum(len(v) for v in option.values()))
        if all(len(option[p.name]) >= minimum(p, targets[p.name]) for p in profiles):
            minimums_possible = True

    if minimums_possible:
        for p in profiles:
            if len(mine[p.name]) >= minimum(p, targets[p.name]):
                continue
            # higher-priority classes fill first (spec), so a lower-priority minimum may
            # lose a host it could use to more important work; otherwise it must be met
            usable = {
                h.host_id
                for h in snapshot.hosts
                if admits(h, snapshot.now, policy) and static_ok(p, h) is None
            }
            displaced = any(
                q.priority > p.priority and usable & set(mine[q.name]) for q in profiles
            )
            assert displaced, (p.name, plan.unsatisfied)

    for p in profiles:
        short = targets[p.name] - len(mine[p.name])
        if short <= 0:
            continue
        reported = sum(u.missing_replicas for u in plan.unsatisfied if u.model_id == p.name)
        assert reported == short, (p.name, plan.unsatisfied)
        for h in snapshot.hosts:  # the shortfall is real: no host can take one more
            if h.host_id in mine[p.name] or not admits(h, snapshot.now, policy):
                continue
            if static_ok(p, h) is not None:
                continue
            beside = [q for q in profiles if h.host_id in mine[q.name]]
            assert not host_ok(by_host[h.host_id], [*beside, p], policy), (p.name, h.host_id)

    uniform = len({p.priority for p in profiles}) == 1 and len({p.memory_mb for p in profiles}) == 1
    if uniform and not any(p.runtime_memory_mb or p.pins for p in profiles):
        assert sum(len(v) for v in mine.values()) >= best_total
