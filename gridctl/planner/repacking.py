"""Moving live incumbents out of the way: the sole-host override and rollouts.

A demanded model whose only eligible host is occupied is a hard override:
removable incumbents there are re-placed on another host now (make-before-
break: their replacement warms first) and staged out of the sole host, and
the demanded model is placed there once a later snapshot shows the memory
free. The target stays sticky while the victims drain, because it is still
the model's only host.

A residency of an old artifact revision does not satisfy placement. When no
other host can take the new revision, replacing it in place is only staged if
another ready replica keeps the model available; otherwise it is refused as
``unsafe_replacement``.
"""

from __future__ import annotations

from gridctl.domain import Assignment, DemandClass, Preemption, ResidencyState, UnsatisfiedCode
from gridctl.planner.host_views import LiveResidency
from gridctl.planner.preemption import _fits_without, warm_back_seconds
from gridctl.planner.rejections import Rejection
from gridctl.planner.selection import candidate_for, choose_host, commit, disk_admission, uncommit
from gridctl.planner.workspace import Workspace


def relocate_for_sole_host(ws: Workspace, model_id: str, demand_class: DemandClass) -> bool:
    """Repack the model's only eligible host; True when the move was staged."""
    hosts = ws.eligible[model_id]
    if len(hosts) != 1 or demand_class is DemandClass.INFERRED:
        return False
    host_id = hosts[0]
    shaped = candidate_for(ws, model_id, host_id)
    if isinstance(shaped, Rejection) or shaped.incumbent is not None:
        return False
    if disk_admission(shaped, ws) is not None:
        return False
    pool = sorted(
        (
            row
            for row in shaped.view.live
            if row.removable
            and row.model_id != model_id
            and (host_id, row.model_id) not in ws.preemptions
            and not (row.configured and host_id in ws.profiles[row.model_id].pins)
        ),
        key=lambda row: (row.priority, warm_back_seconds(ws, row), row.model_id),
    )
    gone: list[LiveResidency] = []
    moved: list[Assignment] = []
    fits = False
    for row in pool:
        if row.model_id in shaped.ledger.assigned:
            others = [h for h in ws.ordered_hosts(row.model_id) if h != host_id]
            choice = choose_host(ws, row.model_id, others, relax_domains=True)
            if choice.winner is None:
                continue
            kept = ws.assignments[row.model_id][host_id]
            moved.append(
                commit(ws, choice.winner, kept.demand_class, f"moved off {host_id} for {model_id}")
            )
        gone.append(row)
        if _fits_without(ws, shaped, gone):
            fits = True
            break
    if not fits or len(gone) > ws.evictions_left():
        for assignment in moved:
            uncommit(ws, assignment.model_id, assignment.host_id)
        return False
    for row in gone:
        if row.model_id in shaped.ledger.assigned:
            ws.remove_assignment(row.model_id, host_id)
            shaped.ledger.drop_existing(row.model_id, row.memory_mb, True)
        ws.preemptions[(host_id, row.model_id)] = Preemption(
            host_id=host_id,
            model_id=row.model_id,
            beneficiary=model_id,
            reason=f"repack: {host_id} is the only eligible host of {model_id}",
        )
    shaped.ledger.reserve(model_id, shaped.memory_mb)
    ws.explain.choose(model_id, host_id, "sole eligible host; repack staged")
    ws.add_shortfall(
        model_id,
        UnsatisfiedCode.PREEMPTION_STAGED,
        f"repack of {host_id} staged: " + ", ".join(r.model_id for r in gone) + " move first",
        host_id=host_id,
    )
    return True


def replace_in_place(ws: Workspace, model_id: str) -> bool:
    """Stage an in-place artifact replacement when a peer keeps availability; else refuse."""
    for host_id in ws.ordered_hosts(model_id):
        if not ws.stale_resident(model_id, host_id) or model_id in ws.ledgers[host_id].reserved:
            continue
        stale = [
            row
            for row in ws.views[host_id].residencies_of(model_id)
            if (host_id, model_id) not in ws.preemptions
        ]
        peer_ready = any(
            a.existing and _ready(ws, model_id, a.host_id)
            for a in ws.assignments[model_id].values()
        )
        movable = all(row.removable for row in stale) and host_id not in ws.profiles[model_id].pins
        if not peer_ready or not movable or not stale:
            ws.add_shortfall(
                model_id,
                UnsatisfiedCode.UNSAFE_REPLACEMENT,
                f"old artifact on {host_id}: no peer can keep {model_id} available",
                host_id=host_id,
            )
            return True
        if ws.evictions_left() < 1:
            return False
        ws.preemptions[(host_id, model_id)] = Preemption(
            host_id=host_id,
            model_id=model_id,
            beneficiary=model_id,
            reason="replace an old artifact revision in place; a peer stays ready",
        )
        ws.ledgers[host_id].reserve(model_id, max(r.memory_mb for r in stale))
        ws.add_shortfall(
            model_id,
            UnsatisfiedCode.PREEMPTION_STAGED,
            f"old artifact on {host_id} drains first",
            host_id=host_id,
        )
        return True
    return False


def _ready(ws: Workspace, model_id: str, host_id: str) -> bool:
    row = ws.incumbent(model_id, host_id)
    return row is not None and row.residency.state is ResidencyState.READY
