"""Seed each target with its healthy live incumbents before opening new slots.

If the fleet already holds a complete placement it is kept as it is (the
feasibility witness): soft scoring never dismantles it. Incumbents are kept
unmovable-first, higher priority first, then more constrained, so when a host
no longer fits everything it reports — a reserve grew, a per-host model limit
or a colocation rule was tightened — the survivors are elected
deterministically. Removable losers of a tightened slot or colocation rule
are staged out; losers of the memory ledger simply stop being desired and are
re-placed elsewhere first (make-before-break). Unmovable inventory that breaks
a profile stays visible and is reported.

Per model, ready incumbents are kept before starting ones and the longest
loaded first (a scale-down removes the newest replica), incumbents in
distinct failure domains first, and extra same-domain incumbents only while
the model's failure-domain minimum still has room to be met by new replicas
elsewhere.
"""

from __future__ import annotations

from gridctl.domain import Preemption, UnsatisfiedCode
from gridctl.planner.candidates import Candidate
from gridctl.planner.host_views import LiveResidency
from gridctl.planner.placement_filters import COLOCATION, MEMORY_DESIRED, MODEL_SLOTS
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.selection import candidate_for, commit
from gridctl.planner.workspace import Workspace

SEED_FILTERS = (MODEL_SLOTS, COLOCATION, MEMORY_DESIRED)  # the rules an incumbent must keep
_STATE_RANK = {"ready": 0, "warming": 1, "loading": 2}
_NEVER = float("inf")  # a residency that reports no load time is kept after those that do


def _keeping_order(item: tuple[str, LiveResidency]) -> tuple[int, float, str]:
    """Ready before starting, then the longest loaded first (the host id breaks ties):
    a scale-down removes the newest replica and keeps the one that has served longest,
    as a ReplicaSet deletes the pods ready for the shortest time first."""
    host_id, row = item
    loaded_at = row.residency.loaded_at
    return (
        _STATE_RANK.get(row.residency.state.value, 3),
        _NEVER if loaded_at is None else loaded_at,
        host_id,
    )


def _preferred_incumbents(ws: Workspace, model_id: str) -> list[tuple[str, LiveResidency]]:
    """This model's incumbents in keeping order, at most its target, domains reserved."""
    target = ws.targets[model_id].replicas
    if target <= 0:
        return []
    eligible = ws.eligible_set[model_id]
    found = [(h, row) for h, row in ws.incumbents[model_id].items() if h in eligible]
    found.sort(key=_keeping_order)
    spread: list[tuple[str, LiveResidency]] = []
    rest: list[tuple[str, LiveResidency]] = []
    domains: set[str] = set()
    for host_id, row in found:
        domain = ws.views[host_id].domain
        if domain in domains:
            rest.append((host_id, row))
        else:
            domains.add(domain)
            spread.append((host_id, row))
    kept = spread[:target]
    missing_domains = max(
        0, ws.required_domains(model_id) - len({ws.views[h].domain for h, _ in kept})
    )
    room = target - missing_domains
    for item in rest:
        if len(kept) >= room:
            break
        kept.append(item)
    return kept


def seed_incumbents(ws: Workspace) -> None:
    rows: list[tuple[tuple[int, int, int, str, int], str, str]] = []
    for model_id in ws.model_ids:
        if not ws.incumbents[model_id]:
            continue  # nothing live to keep
        for rank, (host_id, row) in enumerate(_preferred_incumbents(ws, model_id)):
            pinned_here = host_id in ws.profiles[model_id].pins
            key = (
                0 if not row.removable else 1 if pinned_here else 2,
                -ws.priority(model_id),
                ws.compatible_count[model_id],
                model_id,
                rank,
            )
            rows.append((key, model_id, host_id))
    rows.sort()
    for _, model_id, host_id in rows:
        shaped = candidate_for(ws, model_id, host_id)
        if isinstance(shaped, Rejection) or shaped.incumbent is None:
            continue
        rejection = _first_rejection(ws, shaped)
        if rejection is None:
            target = ws.targets[model_id]
            index = ws.placed(model_id)
            commit(ws, shaped, target.class_of(index), "existing residency kept")
            continue
        ws.explain.reject(model_id, host_id, rejection)
        _lose(ws, shaped, rejection)


def _first_rejection(ws: Workspace, candidate: Candidate) -> Rejection | None:
    for rule in SEED_FILTERS:
        rejection = rule.check(candidate, ws)
        if rejection is not None:
            return rejection
    return None


def _lose(ws: Workspace, candidate: Candidate, rejection: Rejection) -> None:
    """An incumbent that lost the election on its host."""
    assert candidate.incumbent is not None
    model_id = candidate.profile.name
    host_id = candidate.view.host_id
    policy_loss = rejection.code in (
        RejectionCode.MODEL_SLOTS,
        RejectionCode.COLOCATION_CEILING,
        RejectionCode.COLOCATION_EXCLUDE,
    )
    if not policy_loss:
        return  # the memory ledger: stop desiring it; it is re-placed before it drains
    if not candidate.incumbent.removable or host_id in candidate.profile.pins:
        ws.add_shortfall(
            model_id,
            UnsatisfiedCode.COLOCATION_CONFLICT,
            f"unmanaged inventory on {host_id} breaks the profile: {rejection.detail}",
            host_id=host_id,
            missing=0,
        )
        return
    if ws.evictions_left() <= 0:
        return
    survivors = sorted(candidate.ledger.assigned, key=lambda m: (-ws.priority(m), m))
    beneficiary = survivors[0] if survivors else model_id
    ws.preemptions[(host_id, model_id)] = Preemption(
        host_id=host_id,
        model_id=model_id,
        beneficiary=beneficiary,
        reason=f"host policy tightened ({rejection.code.value}): {rejection.detail}",
    )
