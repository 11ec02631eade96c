"""Staged preemption: free a compatible host for more important work, later.

Only when no compatible host can take a replica, and only for pinned, baseline
or direct demand (correlation-only demand never preempts). On each candidate
host the victims are managed, unpinned, live residencies of strictly lower
priority that are not protected by their minimum residency and not already
staged for someone else; external and manual work is never a victim. Victims
are taken failed/draining/idle first, then by the lowest learned warm-back cost, until
the beneficiary would fit every rule once they are gone. Across hosts the
lowest-priority sufficient set wins, then one that supplies a failure domain
the model still needs, then the least disruption (busy victims, warm-back
cost, count), then the host id. A missing pin only ever targets its node.

Nothing is assigned: the beneficiary is reported ``preemption_staged`` and
desired capacity is reserved for it, so no other model takes the released
host in this plan; a later snapshot that shows the memory free places it. At
most ``policy.max_evictions_per_plan`` evictions are staged per plan.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.domain import Preemption, ResidencyState, UnsatisfiedCode
from gridctl.planner.candidates import Candidate
from gridctl.planner.host_views import LiveResidency
from gridctl.planner.placement_filters import DISK_ADMISSION
from gridctl.planner.rejections import Rejection
from gridctl.planner.selection import candidate_for
from gridctl.planner.startup_paths import start_seconds
from gridctl.planner.workspace import Workspace

_CHEAP_STATES = frozenset(
    {ResidencyState.FAILED, ResidencyState.DRAINING, ResidencyState.UNLOADING}
)


@dataclass(frozen=True, slots=True)
class VictimSet:
    host_id: str
    victims: tuple[LiveResidency, ...]
    key: tuple[int, int, int, float, int, str]


def protected(ws: Workspace, row: LiveResidency) -> bool:
    """Minimum residency protects a young, serving residency from disruption."""
    r = row.residency
    profile = ws.profiles.get(r.model_id)
    if profile is None or r.loaded_at is None or r.state in _CHEAP_STATES:
        return False
    return ws.now - r.loaded_at < profile.min_residency_seconds


def warm_back_seconds(ws: Workspace, row: LiveResidency) -> float:
    """Seconds to restore a displaced model: its fastest eligible learned load-plus-warm
    path (the configured estimates on hosts where nothing was learned)."""
    profile = ws.profiles.get(row.model_id)
    if profile is None:
        return 0.0
    found = ws.warm_back.get(profile.name)
    if found is None:
        paths = [start_seconds(profile, None, False)]
        for host_id in ws.special_hosts(profile.name):
            learned = ws.views[host_id].learned.get(profile.name)
            if learned is not None and host_id in ws.eligible_set[profile.name]:
                paths.append(start_seconds(profile, learned, False))
        found = ws.warm_back[profile.name] = min(paths)
    return found


def busy(row: LiveResidency) -> bool:
    r = row.residency
    return r.state not in _CHEAP_STATES and r.active_requests > 0


def _pinned_here(ws: Workspace, row: LiveResidency, host_id: str) -> bool:
    profile = ws.profiles.get(row.model_id)
    return profile is not None and host_id in profile.pins


COOLDOWN_YIELD = "idle and held only by the cooldown"


def yields_cooldown_hold(p: Preemption) -> bool:
    """Is ``p`` an idle replica that only the scale-down cooldown kept (``held_idle``)?"""
    return COOLDOWN_YIELD in p.reason


def held_idle(ws: Workspace, row: LiveResidency) -> bool:
    """An idle, ready replica that only the scale-down cooldown keeps: its model has no
    baseline, pinned or direct replica and no demand of any kind asks for this one. It
    yields to direct or baseline demand of its own priority: the cooldown stops a quiet
    minute from unloading a model just used, not a demanded peer from starting."""
    target = ws.targets.get(row.model_id)
    r = row.residency
    if target is None or target.cooldown_held <= 0:
        return False
    if r.state is not ResidencyState.READY or r.active_requests != 0:
        return False
    taken = sum(1 for _, m in ws.preemptions if m == row.model_id)
    return taken < target.cooldown_held


def _victim_order(ws: Workspace, row: LiveResidency) -> tuple[int, int, float, str]:
    cheap = row.residency.state in _CHEAP_STATES or row.residency.active_requests == 0
    return (row.priority, 0 if cheap else 1, warm_back_seconds(ws, row), row.model_id)


def _fits_without(ws: Workspace, c: Candidate, gone: list[LiveResidency]) -> bool:
    """Would the beneficiary pass every capacity rule once ``gone`` has been released?"""
    ledger = c.ledger
    freed = sum(v.memory_mb for v in gone)
    if c.memory_mb + ws.policy.admission_headroom_mb > ledger.incremental_free_mb + freed:
        return False
    names = {v.model_id for v in gone}
    # a kept model is charged once (its assignment), however many of its rows go
    kept = ws.assignments
    host_id = c.host_id
    seeded = sum(kept[m][host_id].memory_mb for m in names if m in ledger.assigned)
    if c.memory_mb > ledger.desired_free_mb + seeded:
        return False
    members = (ledger.members() - names) - {c.profile.name}
    limit = c.view.host.resources.max_models
    if limit > 0 and len(members) + 1 > limit:
        return False
    if members & ws.exclusions.get(c.profile.name, frozenset()):
        return False
    count = len(members) + 1
    if 0 < c.profile.max_colocated_models < count:
        return False
    for peer in members:
        other = ws.profiles.get(peer)
        if other is not None and 0 < other.max_colocated_models < count:
            return False
    return True


def victim_set(ws: Workspace, model_id: str, host_id: str) -> VictimSet | None:
    """The lowest-priority sufficient victim set on one host, or None."""
    shaped = candidate_for(ws, model_id, host_id)
    if isinstance(shaped, Rejection) or shaped.incumbent is not None:
        return None
    if DISK_ADMISSION.check(shaped, ws) is not None:
        return None  # releasing memory does not release disk
    priority = ws.priority(model_id)
    pool = [
        row
        for row in shaped.view.live
        if row.removable
        and (row.priority < priority or (row.priority == priority and held_idle(ws, row)))
        and (host_id, row.model_id) not in ws.preemptions
        and not protected(ws, row)
        and not _pinned_here(ws, row, host_id)
    ]
    pool.sort(key=lambda row: _victim_order(ws, row))
    chosen: list[LiveResidency] = []
    for row in pool:
        chosen.append(row)
        if _fits_without(ws, shaped, chosen):
            break
    else:
        return None
    wants_domain = ws.needs_new_domain(model_id)
    gives_domain = shaped.view.domain not in ws.domains[model_id]
    key = (
        max(v.priority for v in chosen),
        0 if (gives_domain or not wants_domain) else 1,
        sum(1 for v in chosen if busy(v)),
        round(sum(warm_back_seconds(ws, v) for v in chosen), 6),
        len(chosen),
        host_id,
    )
    return VictimSet(host_id, tuple(chosen), key)


def _victim_reason(ws: Workspace, victim: LiveResidency, model_id: str) -> str:
    mine = ws.priority(model_id)
    why = (
        f"priority {victim.priority} < {mine}"
        if victim.priority < mine
        else f"priority {victim.priority} = {mine}, {COOLDOWN_YIELD}"
    )
    return f"{why}: release {victim.memory_mb} MB for {model_id}"


def stage_preemption(ws: Workspace, model_id: str, hosts: tuple[str, ...] | list[str]) -> bool:
    """Stage the best victim set among ``hosts``; True when staged (or blocked by the limit)."""
    best: VictimSet | None = None
    for host_id in hosts:
        found = victim_set(ws, model_id, host_id)
        if found is not None and (best is None or found.key < best.key):
            best = found
    if best is None:
        return False
    if len(best.victims) > ws.evictions_left():
        ws.add_shortfall(
            model_id,
            UnsatisfiedCode.EVICTION_LIMIT,
            f"preemption on {best.host_id} needs {len(best.victims)} evictions; "
            f"at most {ws.policy.max_evictions_per_plan} per plan",
        )
        return True
    shaped = candidate_for(ws, model_id, best.host_id)
    assert not isinstance(shaped, Rejection)
    for victim in best.victims:
        if victim.model_id in shaped.ledger.assigned:
            kept = ws.remove_assignment(victim.model_id, best.host_id)
            ws.displaced[victim.model_id] = ws.displaced.get(victim.model_id, 0) + 1
            charged = victim.managed and not victim.residency.pinned
            shaped.ledger.drop_existing(victim.model_id, kept.memory_mb, charged)
        ws.preemptions[(best.host_id, victim.model_id)] = Preemption(
            host_id=best.host_id,
            model_id=victim.model_id,
            beneficiary=model_id,
            reason=_victim_reason(ws, victim, model_id),
        )
    shaped.ledger.reserve(model_id, shaped.memory_mb)
    ws.explain.choose(model_id, best.host_id, "preemption staged; placed after release")
    names = ", ".join(v.model_id for v in best.victims)
    ws.add_shortfall(
        model_id,
        UnsatisfiedCode.PREEMPTION_STAGED,
        f"waiting for {names} to drain on {best.host_id}",
        host_id=best.host_id,
    )
    return True
