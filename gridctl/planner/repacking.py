"""Moving live incumbents out of the way: the sole-host override, the proactive
repack and rollouts.

A demanded model whose only eligible host is occupied is a hard override:
removable incumbents there are re-placed on another host now (make-before-
break: their replacement warms first) and staged out of the sole host, and
the demanded model is placed there once a later snapshot shows the memory
free. The target stays sticky while the victims drain, because it is still
the model's only host.

The proactive repack applies when an immediately free host exists but is
*materially worse* than an occupied one. For a baseline or direct replica whose
best feasible host F scores ``score_F``, an occupied eligible host O qualifies
when releasing some of its incumbents would let the replica fit there and

    gain = score_O - score_F >= REPACK_MATERIAL_GAIN (25 points), and
    net = gain - delay - loss >= REPACK_MATERIAL_GAIN

* ``score_O`` is the replica's full score on O once the incumbents are gone
  (static parts, failure-domain spread, best fit in the released memory), so
  startup time (cold start, cached weights), current work, hardware and fit
  are all accounted, on the same scale as every placement decision;
* ``delay`` charges the repack's longer path to service on the cold-start
  scale: the replica starts only after the moved incumbents' replacements are
  ready, so their (parallel) startup is added to its own before the cold-start
  cap;
* ``loss`` is what the moved incumbents give up in steady state: their score
  as a new placement on O minus their replacement host's, without the startup
  parts (make-before-break keeps them serving while they move).

25 points is more than any single marginal term (best fit, load, latency and
host priority are at most 10, cold start and throttling 15), so marginal
improvements use immediate capacity, which bounds churn; cached weights (40
plus the load time saved) or a hot model's faster hardware (up to 8x the
hardware terms) are material. Only managed, unpinned, configured incumbents of
no higher priority than the replica, past their minimum residency, are moved,
never more than the eviction budget. The incumbent gets its replacement host
now (an assignment), the old copy is staged out (a preemption naming the
beneficiary, which reconciliation drains only once the replacement is ready),
and the beneficiary is reported ``preemption_staged`` with O's capacity
reserved.

The target stays sticky: while a repack is in progress (every incumbent in the
way is already draining, unloading or failed, or already has a live
replacement elsewhere), O keeps the beneficiary as long as the gain and the
net gain stay above half the threshold (``REPACK_STAY_GAIN``), so a later
heartbeat's small changes cannot redirect it to an avoidable cold or slower
host. Repacks in progress are looked for first.

The search is bounded: only hosts the replica's own search just rejected for
memory, slots or colocation are candidates (a host it skipped cannot gain);
at most ``REPACK_HOSTS`` of them per pass; the gain, then a lower bound of the
net gain, are checked before any replacement is searched; a model that found
no replacement is not searched again until something is released; and one
plan spends at most ``REPACK_SEARCHES_PER_PLAN`` replacement searches on
starting new repacks (keeping those in progress is never limited).

A residency of an old artifact revision does not satisfy placement. When no
other host can take the new revision, replacing it in place is only staged if
another ready replica keeps the model available; otherwise it is refused as
``unsafe_replacement``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.domain import Assignment, DemandClass, Preemption, ResidencyState, UnsatisfiedCode
from gridctl.planner.candidates import Candidate
from gridctl.planner.host_views import LiveResidency
from gridctl.planner.placement_filters import DISK_ADMISSION, FAILURE_DOMAIN
from gridctl.planner.preemption import _fits_without, busy, protected, warm_back_seconds
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.scoring import (
    DYNAMIC_MAX,
    Components,
    cold_start_points,
    score_with_dynamic,
    static_components,
)
from gridctl.planner.selection import (
    BEST_FIT_BOUND,
    candidate_for,
    choose_host,
    commit,
    evaluate,
    new_placement_facts,
    uncommit,
)
from gridctl.planner.startup_paths import start_seconds, warm_seconds
from gridctl.planner.workspace import Workspace

REPACK_MATERIAL_GAIN = 25.0  # score points a free host must lose to be "materially worse"
REPACK_STAY_GAIN = REPACK_MATERIAL_GAIN / 2  # hysteresis while a repack is in progress
REPACK_HOSTS = 8  # occupied hosts examined per pass, best static score first
# Replacement searches one plan may spend on starting new repacks (keeping repacks in
# progress is never limited); further opportunities wait for a later plan.
REPACK_SEARCHES_PER_PLAN = 64
_REPACKED_CLASSES = frozenset({DemandClass.BASELINE, DemandClass.DIRECT})
_RELEASING = frozenset({ResidencyState.DRAINING, ResidencyState.UNLOADING, ResidencyState.FAILED})
_STARTUP_PARTS = frozenset({"existing_residency", "cached_weights", "cold_start"})
_RELEASE_CODES = frozenset(
    {
        RejectionCode.MEMORY_INCREMENTAL,
        RejectionCode.MEMORY_DESIRED,
        RejectionCode.MODEL_SLOTS,
        RejectionCode.COLOCATION_CEILING,
        RejectionCode.COLOCATION_EXCLUDE,
    }
)


def relocate_for_sole_host(ws: Workspace, model_id: str, demand_class: DemandClass) -> bool:
    """Repack the model's only eligible host; True when the move was staged."""
    hosts = ws.eligible[model_id]
    if len(hosts) != 1 or demand_class is DemandClass.INFERRED:
        return False
    host_id = hosts[0]
    shaped = candidate_for(ws, model_id, host_id)
    if isinstance(shaped, Rejection) or shaped.incumbent is not None:
        return False
    if DISK_ADMISSION.check(shaped, ws) is not None:
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
            kept = ws.remove_assignment(row.model_id, host_id)
            shaped.ledger.drop_existing(row.model_id, kept.memory_mb, True)
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


@dataclass(slots=True)
class _Repack:
    """A qualifying repack of one occupied host, its replacements already committed."""

    host_id: str
    shaped: Candidate
    gone: list[LiveResidency]
    moved: dict[str, Assignment]  # incumbent model -> its replacement
    net: float


def stage_proactive_repack(
    ws: Workspace, model_id: str, free: Candidate, demand_class: DemandClass
) -> bool:
    """Repack a materially better occupied host instead of using ``free``; True when staged.

    Repacks already in progress are kept first (at the lower, sticky threshold),
    then a new one may start.
    """
    # Both passes look only at hosts the search just rejected that hold live work
    # (``_released_in_rank_order``): when it rejected none, nothing can be released, so
    # neither pass can find a repack. On a cold fleet that is nearly every replica
    # (measured: ~1.0 M of 31.6 M instructions of a cold 64x32 plan).
    rejected = ws.dead.get(model_id)
    if not rejected or ws.occupied_hosts().isdisjoint(rejected):
        return False
    if demand_class not in _REPACKED_CLASSES:
        return False
    if ws.evictions_left() <= 0:
        return False
    # the hosts both passes may release, found once: a pass that stages nothing leaves
    # the model's rejected hosts as they were (its movers search with their own dead
    # marks), and the rest is static (about 1.0 M of a cold 256x64 plan and 0.6 M of a
    # mixed 64x32 one, measured)
    released = _released_in_rank_order(ws, model_id, rejected)
    if not released:
        return False  # nothing either pass could release
    for in_progress in (True, False):
        if not in_progress and ws.repack_searches >= REPACK_SEARCHES_PER_PLAN:
            break  # this plan's budget for starting repacks is spent
        found = _find_repack(ws, model_id, free, in_progress, released)
        if found is not None:
            _stage(ws, model_id, free, found)
            return True
    return False


def _find_repack(
    ws: Workspace, model_id: str, free: Candidate, in_progress: bool, released: list[str]
) -> _Repack | None:
    """A qualifying repack of one of ``released`` (``_released_in_rank_order``)."""
    threshold = REPACK_STAY_GAIN if in_progress else REPACK_MATERIAL_GAIN
    # Only hosts the search just rejected for memory, slots or colocation can be
    # released for the replica: a host it skipped could not beat the free host even
    # with its memory as it is, and releasing memory only lowers best fit.
    examined = 0
    for host_id in released:
        _, bound = ws.static_score(model_id, host_id)
        if bound + DYNAMIC_MAX < free.score + threshold:
            break  # ranked by static score: no later host can gain enough
        view = ws.views[host_id]
        if view.domain in ws.domains[model_id] and bound + BEST_FIT_BOUND < free.score + threshold:
            continue  # without a new failure domain it cannot gain enough
        pool = [row for row in view.live if _movable(ws, row, model_id, host_id, in_progress)]
        if not pool:
            continue
        examined += 1
        if examined > REPACK_HOSTS:
            break
        shaped = candidate_for(ws, model_id, host_id)
        if isinstance(shaped, Rejection) or shaped.incumbent is not None:
            continue
        shaped.relax_domains = free.relax_domains
        rejection = evaluate(ws, shaped)
        if rejection is None or rejection.code not in _RELEASE_CODES:
            continue  # it fits now (and scores lower), or releasing memory would not help
        if (
            FAILURE_DOMAIN.check(shaped, ws) is not None
            or DISK_ADMISSION.check(shaped, ws) is not None
        ):
            continue
        pool.sort(key=lambda row: _move_order(ws, row))
        found = _attempt(ws, model_id, shaped, pool, free, threshold, in_progress)
        if found is not None:
            return found
    return None


def _released_in_rank_order(
    ws: Workspace, model_id: str, rejected: dict[str, RejectionCode]
) -> list[str]:
    """The eligible hosts rejected for a releasable reason with live work to move, in
    ``ordered_hosts`` order (best static score, then host id) without ranking every
    eligible host (a host with nothing live has nothing to release: the search passes it
    by before anything it decides depends on it)."""
    eligible = ws.eligible_set[model_id]
    views = ws.views
    found = [
        h
        for h, code in rejected.items()
        if code in _RELEASE_CODES and h in eligible and views[h].live
    ]
    if len(found) < 2:
        return found
    memo = ws.static_scores(model_id)
    for host_id in found:
        if host_id not in memo:
            ws.static_sum(model_id, host_id)  # fills the memo
    return sorted(found, key=lambda h: (-memo[h][0][1], h))


def _movable(
    ws: Workspace, row: LiveResidency, model_id: str, host_id: str, in_progress: bool
) -> bool:
    """Managed, unpinned, configured work of no higher priority, past its minimum residency;
    while looking for repacks in progress, only work already releasing or already replaced."""
    movable = (
        row.removable
        and row.configured
        and row.model_id != model_id
        and row.priority <= ws.priority(model_id)
        and (host_id, row.model_id) not in ws.preemptions
        and host_id not in ws.profiles[row.model_id].pins
        and not protected(ws, row)
    )
    if not movable or not in_progress or row.residency.state in _RELEASING:
        return movable
    # a copy still desired here counts only if a live copy elsewhere can replace it
    desired = host_id in ws.assignments[row.model_id]
    return desired and _live_elsewhere(ws, row.model_id, host_id)


def _move_order(ws: Workspace, row: LiveResidency) -> tuple[int, int, int, float, str]:
    """Already releasing first, then idle, lower priority and cheaper to warm back."""
    releasing = row.residency.state in _RELEASING
    return (
        0 if releasing else 1,
        1 if busy(row) else 0,
        row.priority,
        warm_back_seconds(ws, row),
        row.model_id,
    )


def _attempt(
    ws: Workspace,
    model_id: str,
    shaped: Candidate,
    pool: list[LiveResidency],
    free: Candidate,
    threshold: float,
    in_progress: bool,
) -> _Repack | None:
    """Release incumbents on one host until the replica fits; keep it if the gain holds.

    The gain is checked before any replacement is searched; every incumbent still
    desired here then needs a replacement host, or the host is given up.
    """
    host_id = shaped.host_id
    ledger = shaped.ledger
    gone: list[LiveResidency] = []
    for row in pool:
        if len(gone) >= ws.evictions_left():
            return None
        gone.append(row)
        if _fits_without(ws, shaped, gone):
            break
    else:
        return None
    freed = sum(row.memory_mb for row in gone)
    # the new-placement score with ``freed`` MB more free on the host
    new_domain, free_after, capacity = new_placement_facts(ws, model_id, host_id, shaped.memory_mb)
    released = score_with_dynamic(
        ws.static_sum(model_id, host_id), new_domain, free_after + freed, capacity
    )
    gain = released - free.score
    if gain < threshold:
        return None
    # what the movers lose is at least their quality here minus their best anywhere
    movers = {row.model_id: row for row in gone if row.model_id in ledger.assigned}
    least_loss = sum(
        _steady(_as_new_parts(ws, mover, host_id)) - _best_steady(ws, mover) for mover in movers
    )
    if gain - least_loss < threshold:
        return None
    moved: dict[str, Assignment] = {}
    delay = 0.0
    loss = 0.0
    for row in movers.values():
        # still desired here: it moves first (make-before-break)
        choice = None
        spent = not in_progress and ws.repack_searches >= REPACK_SEARCHES_PER_PLAN
        if not spent and ws.no_replacement.get(row.model_id) != ws.releases:
            if not in_progress:
                ws.repack_searches += 1
            others = [h for h in ws.ordered_hosts(row.model_id) if h != host_id]
            dead = ws.dead.setdefault(row.model_id, {})
            choice = choose_host(ws, row.model_id, others, relax_domains=True, dead=dead).winner
            if choice is None:
                # nothing was released since: a later search would find none either
                ws.no_replacement[row.model_id] = ws.releases
        if choice is None:
            for assignment in moved.values():
                uncommit(ws, assignment.model_id, assignment.host_id)
            return None
        kept = ws.assignments[row.model_id][host_id]
        moved[row.model_id] = commit(
            ws, choice, kept.demand_class, f"moved off {host_id} for {model_id}"
        )
        delay = max(delay, _startup_seconds(ws, choice))
        replacement_parts, _ = ws.static_score(row.model_id, choice.host_id)
        loss += _steady(_as_new_parts(ws, row.model_id, host_id)) - _steady(replacement_parts)
    own = _new_startup_seconds(ws, model_id, host_id)
    penalty = cold_start_points(own + delay) - cold_start_points(own)
    net = gain - penalty - loss
    if net < threshold:
        for assignment in moved.values():
            uncommit(ws, assignment.model_id, assignment.host_id)
        return None
    return _Repack(host_id, shaped, gone, moved, round(net, 6))


def _stage(ws: Workspace, model_id: str, free: Candidate, found: _Repack) -> None:
    host_id = found.host_id
    ledger = found.shaped.ledger
    gain = f"{found.net:.1f} points over {free.host_id}"
    for row in found.gone:
        if row.model_id in ledger.assigned:
            kept = ws.remove_assignment(row.model_id, host_id)
            ledger.drop_existing(row.model_id, kept.memory_mb, True)  # removable: charged
        replacement = found.moved.get(row.model_id)
        then = f"; {row.model_id} moves to {replacement.host_id} first" if replacement else ""
        ws.preemptions[(host_id, row.model_id)] = Preemption(
            host_id=host_id,
            model_id=row.model_id,
            beneficiary=model_id,
            reason=f"proactive repack: {model_id} gains {gain} on {host_id}{then}",
        )
    ledger.reserve(model_id, found.shaped.memory_mb)
    ws.explain.choose(model_id, host_id, "proactive repack staged; placed after release")
    names = ", ".join(row.model_id for row in found.gone)
    ws.add_shortfall(
        model_id,
        UnsatisfiedCode.PREEMPTION_STAGED,
        f"proactive repack of {host_id} staged ({gain}): {names} released first",
        host_id=host_id,
    )


def _live_elsewhere(ws: Workspace, model_id: str, host_id: str) -> bool:
    """A live copy of the model on another host that this plan does not keep yet."""
    kept = ws.assignments[model_id]
    return any(h != host_id and h not in kept for h in ws.incumbents[model_id])


def _startup_seconds(ws: Workspace, candidate: Candidate) -> float:
    """Seconds until a chosen replacement serves: ready now, warming, or load plus warm."""
    incumbent = candidate.incumbent
    if incumbent is None:
        return _new_startup_seconds(ws, candidate.profile.name, candidate.host_id)
    if incumbent.residency.state is ResidencyState.READY:
        return 0.0
    # already warming: it does not pay the artifact-load phase again
    return warm_seconds(candidate.profile, candidate.view.learned.get(candidate.profile.name))


def _new_startup_seconds(ws: Workspace, model_id: str, host_id: str) -> float:
    profile = ws.profiles[model_id]
    view = ws.views[host_id]
    return start_seconds(profile, view.learned.get(model_id), view.has_exact_artifact(profile))


def _as_new_parts(ws: Workspace, model_id: str, host_id: str) -> Components:
    """Static parts of ``model_id`` on ``host_id`` as a new placement (ignoring its copy there)."""
    need = 0.0
    if ws.scarcity is not None:
        need = ws.scarcity.need(host_id, len(ws.eligible[model_id]))
    return static_components(
        ws.profiles[model_id],
        ws.views[host_id],
        None,
        ws.norms,
        ws.targets[model_id].performance_factor,
        need,
        ws.policy,
    )


def _best_steady(ws: Workspace, model_id: str) -> float:
    """The best steady-state quality the model has on any eligible host (memoised)."""
    found = ws.best_steady.get(model_id)
    if found is None:
        hosts = ws.ordered_hosts(model_id)
        found = max((_steady(ws.static_score(model_id, h)[0]) for h in hosts), default=0.0)
        ws.best_steady[model_id] = found
    return found


def _steady(parts: Components) -> float:
    """Steady-state quality: the static parts other than startup (existing, cached, cold)."""
    return sum(value for name, value in parts if name not in _STARTUP_PARTS)


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
