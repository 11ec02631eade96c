"""Bounded backtracking repair when greedy placement fragmented capacity.

When a replica finds no host but the fleet as a whole still has room, moving a
few equal-priority replicas that this plan has just placed can open a host
for it. The search tries each eligible host (best static score first), evicts
subsets of at most ``MAX_MOVES`` of its newly planned equal-priority replicas,
and keeps the first arrangement in which the stuck replica fits there and
every moved replica fits elsewhere. Live inventory and other priorities are
never moved. The number of trial evaluations is bounded by
``policy.repair_budget``, and the search order depends only on the plan so
far, so unrelated or ineligible inventory cannot change the result.

On homogeneous fleets with no residencies, moves provably preserve resource
use, so aggregate free memory and slots give an admissible lower bound: an
already saturated fleet fails fast without searching.
"""

from __future__ import annotations

from itertools import combinations

from gridctl.domain import Assignment, DemandClass
from gridctl.planner.rejections import Rejection
from gridctl.planner.selection import candidate_for, choose_host, commit, evaluate, uncommit
from gridctl.planner.workspace import Workspace

MAX_MOVES = 2


def homogeneous_and_empty(ws: Workspace) -> bool:
    """Identical host resources, no residencies, and no runtime-specific footprints."""
    if any(v.host.residencies for v in ws.views.values()):
        return False
    if any(p.runtime_memory_mb for p in ws.profiles.values()):
        return False
    shapes = {
        (v.host.resources, v.host.state, v.admission is None)
        for v in ws.views.values()
        if v.admission is None
    }
    return len(shapes) <= 1


def cannot_fit_anywhere(ws: Workspace, model_id: str) -> bool:
    """Admissible bound: aggregate free memory or slots cannot hold one more replica."""
    profile = ws.profiles[model_id]
    need = profile.memory_mb + ws.policy.admission_headroom_mb
    hosts = ws.eligible[model_id]
    free = sum(max(0, ws.ledgers[h].incremental_free_mb) for h in hosts)
    if free < need:
        return True
    slots = 0
    for host_id in hosts:
        limit = ws.views[host_id].host.resources.max_models
        if limit <= 0:
            return False
        slots += max(0, limit - len(ws.ledgers[host_id].members()))
    return slots < 1


def try_repair(ws: Workspace, model_id: str, demand_class: DemandClass, reason: str) -> bool:
    """Move up to ``MAX_MOVES`` fresh equal-priority replicas to make room; True on success."""
    if homogeneous_and_empty(ws) and cannot_fit_anywhere(ws, model_id):
        return False
    budget = ws.policy.repair_budget
    priority = ws.priority(model_id)
    for host_id in ws.ordered_hosts(model_id):
        ledger = ws.ledgers[host_id]
        movable = sorted(
            m
            for m in ledger.new_models
            if m != model_id
            and ws.priority(m) == priority
            and ws.assignments[m][host_id].demand_class is not DemandClass.PINNED
        )
        for size in range(1, min(MAX_MOVES, len(movable)) + 1):
            for group in combinations(movable, size):
                budget -= 1 + size
                if budget < 0:
                    return False
                if _attempt(ws, model_id, host_id, group, demand_class, reason):
                    return True
    return False


def _attempt(
    ws: Workspace,
    model_id: str,
    host_id: str,
    group: tuple[str, ...],
    demand_class: DemandClass,
    reason: str,
) -> bool:
    removed: list[Assignment] = [uncommit(ws, m, host_id) for m in group]
    shaped = candidate_for(ws, model_id, host_id)
    placed: list[Assignment] = []
    if not isinstance(shaped, Rejection) and evaluate(ws, shaped) is None:
        mine = commit(ws, shaped, demand_class, reason + " (after repair)")
        for old in removed:
            others = [h for h in ws.ordered_hosts(old.model_id) if h != host_id]
            choice = choose_host(ws, old.model_id, others)
            if choice.winner is None:
                break
            placed.append(commit(ws, choice.winner, old.demand_class, old.reason + " (moved)"))
        else:
            return True
        for moved in placed:
            uncommit(ws, moved.model_id, moved.host_id)
        uncommit(ws, mine.model_id, mine.host_id)
    for old in removed:
        restored = candidate_for(ws, old.model_id, host_id)
        assert not isinstance(restored, Rejection)
        commit(ws, restored, old.demand_class, old.reason)
    return False
