"""The choice of one host for one more replica of one model, host by host.

Static eligibility is settled once per plan; the dynamic rules
(``placement_filters.DYNAMIC_FILTERS``) decide what the plan has already made
of a host. ``choose_host`` walks a model's eligible hosts best static score
first and stops as soon as no remaining host can beat the best found (every
dynamic score part is bounded), so large fleets are not rescanned for each
replica. Once a best exists, a host's exact score is computed before its
filters (for a new replica without even shaping a candidate, by
``new_placement_value``, the one new-placement score every search uses), and a
host that could not beat the best even if feasible is skipped unevaluated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gridctl.domain import Assignment, DemandClass
from gridctl.planner.candidates import (
    BREAK,
    DEAD,
    FEASIBLE,
    REJECTED,
    SKIPPED,
    Candidate,
    Choice,
    Verdict,
)
from gridctl.planner.fleet_index import StaticScore
from gridctl.planner.placement_filters import first_rejection
from gridctl.planner.rejections import MONOTONE_CODES, Rejection, RejectionCode
from gridctl.planner.runtimes import residency_runtime_label
from gridctl.planner.scoring import (
    BEST_FIT,
    DYNAMIC_MAX,
    dynamic_components,
    score_with_dynamic,
)
from gridctl.planner.workspace import Workspace

# the most best fit can add to a static total, with a margin for the 6-decimal rounding
# of the static total, the best-fit part and the score
BEST_FIT_BOUND = BEST_FIT + 1e-5
_ALREADY_ASSIGNED = RejectionCode.ALREADY_ASSIGNED  # (read per rejection: a module name)


def candidate_for(ws: Workspace, model_id: str, host_id: str) -> Candidate | Rejection:
    """Shape a candidate (runtime, footprint, incumbent, disk cost) or reject it outright."""
    profile = ws.profiles[model_id]
    view = ws.views[host_id]
    ledger = ws.ledgers[host_id]
    if model_id in ledger.assigned or model_id in ledger.reserved:
        return Rejection(_ALREADY_ASSIGNED, "a replica is already planned here")
    if (host_id, model_id) in ws.preemptions:
        return Rejection(RejectionCode.MODEL_RESIDENT, "its copy here is staged out")
    incumbent = ws.incumbents[model_id].get(host_id)  # ``ws.incumbent``, without the call
    if incumbent is not None:
        runtime = residency_runtime_label(profile, incumbent.residency, view.host)
        return Candidate(profile, host_id, view, ledger, runtime, incumbent.memory_mb, incumbent, 0)
    if model_id in view.by_model:  # ``view.residencies_of(model_id)``, without the call
        if ws.stale_resident(model_id, host_id):
            return Rejection(
                RejectionCode.STALE_ARTIFACT_IN_PLACE, "an old artifact revision is resident here"
            )
        return Rejection(RejectionCode.MODEL_RESIDENT, "a non-serving copy is still resident")
    choice = ws.new_runtime(model_id, host_id)
    if choice is None:  # pragma: no cover - static eligibility guarantees a runtime
        return Rejection(RejectionCode.RUNTIME, "no compatible runtime")
    runtime, memory = choice
    disk = 0 if view.has_exact_artifact(profile) else (profile.artifact.size_mb or 0)
    return Candidate(profile, host_id, view, ledger, runtime, memory, None, disk)


def evaluate(ws: Workspace, candidate: Candidate) -> Rejection | None:
    """Run the dynamic chain; on success fill in the named components and the score."""
    rejection = first_rejection(ws, candidate)
    if rejection is None:
        score(ws, candidate)
    return rejection


def score(ws: Workspace, candidate: Candidate) -> None:
    """The named components and score the candidate has if it passes every filter."""
    name = candidate.profile.name
    host_id = candidate.host_id
    found = ws.static_scores(name).get(host_id)
    if found is None:
        ws.static_sum(name, host_id)
        found = ws.static_scores(name)[host_id]
    if candidate.incumbent is None:
        score_as_new(ws, candidate, found)
        return
    (static_parts, _), value = found  # the parts, and the unrounded sum of them
    new_domain, free_after, capacity = _dynamic_facts(ws, candidate)
    candidate.components = static_parts + dynamic_components(new_domain, free_after, capacity)
    candidate.score = score_with_dynamic(value, new_domain, free_after, capacity)


def score_as_new(ws: Workspace, candidate: Candidate, static: StaticScore) -> None:
    """Name and score a new replica from its static score (``new_placement_value``, with
    the parts it sums)."""
    (static_parts, _), value = static
    new_domain, free_after, capacity = new_placement_facts(
        ws, candidate.profile.name, candidate.host_id, candidate.memory_mb
    )
    candidate.components = static_parts + dynamic_components(new_domain, free_after, capacity)
    candidate.score = score_with_dynamic(value, new_domain, free_after, capacity)


def score_value(ws: Workspace, candidate: Candidate) -> float:
    """The score ``score`` gives the candidate, without naming its components."""
    new_domain, free_after, capacity = _dynamic_facts(ws, candidate)
    static = ws.static_sum(candidate.profile.name, candidate.host_id)
    return score_with_dynamic(static, new_domain, free_after, capacity)


def _dynamic_facts(ws: Workspace, candidate: Candidate) -> tuple[bool, int, int]:
    """What the dynamic score parts read: (a new failure domain, MB free after, capacity)."""
    if candidate.incumbent is None:
        name, host_id = candidate.profile.name, candidate.host_id
        return new_placement_facts(ws, name, host_id, candidate.memory_mb)
    free_after = candidate.ledger.desired_free_mb - candidate.memory_mb
    new_domain = candidate.view.domain not in ws.domains[candidate.profile.name]
    return new_domain, free_after, candidate.view.raw_mb


def new_placement_facts(
    ws: Workspace, model_id: str, host_id: str, footprint: int
) -> tuple[bool, int, int]:
    """What the score of a new replica taking ``footprint`` reads of the host beside its
    static score: whether it opens a failure domain for the model, the MB free after it
    (of what the host offers new placement) and that capacity."""
    return (
        ws.domain_of[host_id] not in ws.domains[model_id],
        ws.base_free[host_id] - ws.ledgers[host_id].new_mb - footprint,
        ws.new_capacity[host_id],
    )


def new_placement_value(
    ws: Workspace, model_id: str, host_id: str, static_sum: float, footprint: int
) -> float:
    """The exact score of a new replica taking ``footprint`` here if it passes every filter,
    from its unrounded static sum: ``score_with_dynamic(static_sum, *new_placement_facts(
    ...))``, the one new-placement score every search uses (the facts read inline: the
    searches ask this of most hosts they prune, and a call more cost about 1,000
    instructions each, measured)."""
    return score_with_dynamic(
        static_sum,
        ws.domain_of[host_id] not in ws.domains[model_id],
        ws.base_free[host_id] - ws.ledgers[host_id].new_mb - footprint,
        ws.new_capacity[host_id],
    )


def new_placement_score(ws: Workspace, model_id: str, host_id: str) -> float | None:
    """``new_placement_value`` of a new replica, computed without shaping a candidate; None
    for a host holding or re-admitting the model."""
    ledger = ws.ledgers[host_id]
    if model_id in ledger.assigned or model_id in ledger.reserved:
        return None
    if host_id in ws.incumbents[model_id]:
        return None
    footprint = ws.new_footprint(model_id, host_id)
    if footprint is None:  # pragma: no cover - static eligibility guarantees a runtime
        return None
    return new_placement_value(ws, model_id, host_id, ws.static_sum(model_id, host_id), footprint)


@dataclass(slots=True)
class Search:
    """One search for the best host of one more replica of one model."""

    ws: Workspace
    model_id: str
    relax_domains: bool
    dead: dict[str, RejectionCode] | None
    best: Candidate | None = None
    codes: set[RejectionCode] = field(default_factory=set)
    rejection: Rejection | None = None  # what the last rejected host met

    def choice(self) -> Choice:
        return Choice(self.best, self.codes)


def visit(search: Search, host_id: str, pruned: bool = False) -> Verdict:
    """Consider one host; hosts must be visited best static score first, then host id.

    ``pruned``: the caller already ran the pruning against the best so far (the
    break and both skips) and the host survived it."""
    ws = search.ws
    model_id = search.model_id
    dead = search.dead
    best = search.best
    if dead is not None and host_id in dead:
        search.codes.add(dead[host_id])
        return DEAD
    if best is not None and not pruned:
        _, bound = ws.static_score(model_id, host_id)
        if bound + DYNAMIC_MAX < best.score:
            return BREAK  # hosts are ranked by static score: no later host can win
        if ws.domain_of[host_id] in ws.domains[model_id] and bound + BEST_FIT_BOUND < best.score:
            return SKIPPED  # without a new failure domain it cannot win
        quick = new_placement_score(ws, model_id, host_id)
        if quick is not None and (
            quick < best.score or (quick == best.score and host_id > best.host_id)
        ):
            return SKIPPED  # it cannot win even if feasible: a better host was found first
    shaped = candidate_for(ws, model_id, host_id)
    if isinstance(shaped, Rejection):
        rejection: Rejection | None = shaped
    elif best is None:
        shaped.relax_domains = search.relax_domains
        rejection = evaluate(ws, shaped)
    else:
        # the score is cheap and exact for a feasible host: one that cannot beat
        # the best so far is left unevaluated (a better host was found first); the
        # caller's pruning already compared a new placement's exact score
        if not (pruned and shaped.incumbent is None):
            value = score_value(ws, shaped)
            if value < best.score or (value == best.score and host_id > best.host_id):
                return SKIPPED
        shaped.relax_domains = search.relax_domains
        rejection = first_rejection(ws, shaped)
        if rejection is None:
            score(ws, shaped)  # named only once it passes
    if rejection is not None:
        return book_rejection(search, host_id, rejection)
    assert not isinstance(shaped, Rejection)
    ws.explain.score(model_id, host_id, shaped.components, shaped.score)
    if best is None or shaped.score > best.score:
        search.best = shaped
    elif shaped.score == best.score and host_id < best.host_id:
        search.best = shaped  # ties go to the smaller host id, never to input order
    return FEASIBLE


def book_rejection(search: Search, host_id: str, rejection: Rejection) -> Verdict:
    """Note a filter's rejection of one host: its code, explanation and dead mark."""
    search.rejection = rejection
    search.codes.add(rejection.code)
    if rejection.code is not _ALREADY_ASSIGNED:
        # a host holding a replica keeps the explanation that chose it
        search.ws.explain.reject(search.model_id, host_id, rejection)
    if search.dead is not None and rejection.code in MONOTONE_CODES:
        search.dead[host_id] = rejection.code
    return REJECTED


def choose_host(
    ws: Workspace,
    model_id: str,
    hosts: tuple[str, ...] | list[str],
    relax_domains: bool = False,
    dead: dict[str, RejectionCode] | None = None,
) -> Choice:
    """The best feasible host among ``hosts`` (ordered by static score, best first).

    Hosts rejected for a reason that cannot heal within this plan are added to
    ``dead`` so later searches for the same model skip them. Once a best
    exists, ``visit``'s pruning (the break and both skips) is run inline: most
    hosts of a large fleet are skipped, and a skip books nothing.
    """
    search = Search(ws, model_id, relax_domains, dead)
    memo = ws.static_scores(model_id)
    used = ws.domains[model_id]
    domain_of = ws.domain_of
    ledgers = ws.ledgers
    incumbents = ws.incumbents[model_id]
    new_footprint = ws.new_footprint
    footprints = ws.footprints(model_id)
    shape_of = ws.static.shape_of
    for host_id in hosts:
        best = search.best
        pruned = False
        if best is not None and (dead is None or host_id not in dead):
            pruned = True
            found = memo.get(host_id)
            if found is None:
                ws.static_sum(model_id, host_id)
                found = memo[host_id]
            bound = found[0][1]
            top = best.score
            if bound + DYNAMIC_MAX < top:
                break  # hosts are ranked by static score: no later host can win
            new_domain = domain_of[host_id] not in used
            if not new_domain and bound + BEST_FIT_BOUND < top:
                continue  # without a new failure domain it cannot win
            ledger = ledgers[host_id]
            if not (
                model_id in ledger.assigned or model_id in ledger.reserved or host_id in incumbents
            ):
                shape = shape_of[host_id]
                footprint = (
                    footprints[shape] if shape in footprints else new_footprint(model_id, host_id)
                )
                if footprint is not None:
                    quick = new_placement_value(ws, model_id, host_id, found[1], footprint)
                    if quick < top or (quick == top and host_id > best.host_id):
                        continue  # it cannot win even if feasible
        if visit(search, host_id, pruned) is BREAK:
            break
    return search.choice()


def choose_ranked(
    ws: Workspace,
    model_id: str,
    relax_domains: bool = False,
    dead: dict[str, RejectionCode] | None = None,
) -> Choice:
    """``choose_host(ws, model_id, ws.ordered_hosts(model_id), ...)``."""
    return choose_host(ws, model_id, ws.ordered_hosts(model_id), relax_domains, dead)


def commit(
    ws: Workspace, candidate: Candidate, demand_class: DemandClass, reason: str
) -> Assignment:
    """Book the chosen candidate on its host's ledger and record the assignment."""
    name = candidate.profile.name
    if candidate.incumbent is not None:
        candidate.ledger.keep_existing(name, candidate.memory_mb, candidate.charged)
    else:
        candidate.ledger.add_new(name, candidate.memory_mb, candidate.disk_mb)
    assignment = Assignment(
        model_id=name,
        host_id=candidate.host_id,
        runtime=candidate.runtime,
        memory_mb=candidate.memory_mb,
        reason=reason,
        demand_class=demand_class,
        priority=candidate.profile.priority,
        existing=candidate.incumbent is not None,
    )
    ws.record_assignment(assignment)
    return assignment


def uncommit(ws: Workspace, model_id: str, host_id: str) -> Assignment:
    """Undo an assignment made earlier in this plan (a new replica or a kept incumbent)."""
    assignment = ws.remove_assignment(model_id, host_id)
    ledger = ws.ledgers[host_id]
    if assignment.existing:
        incumbent = ws.incumbent(model_id, host_id)
        charged = incumbent is None or (incumbent.managed and not incumbent.residency.pinned)
        ledger.drop_existing(model_id, assignment.memory_mb, charged)
        return assignment
    profile = ws.profiles[model_id]
    view = ws.views[host_id]
    disk = 0 if view.has_exact_artifact(profile) else (profile.artifact.size_mb or 0)
    ledger.remove_new(model_id, assignment.memory_mb, disk)
    return assignment
