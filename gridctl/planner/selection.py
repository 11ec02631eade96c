"""Dynamic feasibility and the choice of one host for one more replica.

Static eligibility is settled once per plan; what remains depends on what the
plan has already put on a host: one replica per model per host, a stale
same-named residency, serving slots, the reciprocal colocation rules, the
failure-domain minimum, cumulative artifact disk admission and the two memory
ledgers. Each is a small filter over a ``Candidate``; ``DYNAMIC_FILTERS`` is the
chain. ``choose_host`` walks a model's eligible hosts best static score first
and stops as soon as no remaining host can beat the best found (every dynamic
score part is bounded), so large fleets are not rescanned for each replica.
Once a best exists, a host's exact score is computed before its filters (for a
new replica without even shaping a candidate), and a host that could not beat
the best even if feasible is skipped unevaluated.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from gridctl.domain import Assignment, DemandClass, ModelProfile
from gridctl.planner.host_views import HostView, LiveResidency
from gridctl.planner.ledgers import HostLedger
from gridctl.planner.rejections import MONOTONE_CODES, Rejection, RejectionCode
from gridctl.planner.runtimes import residency_runtime_label
from gridctl.planner.scoring import (
    BEST_FIT,
    DYNAMIC_MAX,
    FAILURE_DOMAIN,
    Components,
    dynamic_components,
    round6,
    score_with_dynamic,
)
from gridctl.planner.workspace import Workspace


@dataclass(slots=True)
class Candidate:
    """One host being considered for one more replica of one model."""

    profile: ModelProfile
    host_id: str  # ``view.host_id``, which the search compares often (a property call)
    view: HostView
    ledger: HostLedger
    runtime: str
    memory_mb: int
    incumbent: LiveResidency | None  # re-admitting a live residency: zero incremental cost
    disk_mb: int  # artifact bytes to reserve (0 when cached or already resident)
    relax_domains: bool = False
    components: Components = field(default=())
    score: float = 0.0

    @property
    def charged(self) -> bool:
        """Whether keeping or adding this replica adds to the desired ledger."""
        if self.incumbent is None:
            return True
        return self.incumbent.managed and not self.incumbent.residency.pinned


DynamicFilter = Callable[[Candidate, Workspace], Rejection | None]

# the most best fit can add to a static total, with a margin for the 6-decimal rounding
# of the static total, the best-fit part and the score
BEST_FIT_BOUND = BEST_FIT + 1e-5


def model_slots(c: Candidate, ws: Workspace) -> Rejection | None:
    limit = c.view.host.resources.max_models
    if limit <= 0:
        return None
    members = c.ledger.desired_models if c.incumbent else c.ledger.members()
    if c.profile.name not in members and len(members) + 1 > limit:
        return Rejection(RejectionCode.MODEL_SLOTS, f"all {limit} model slots taken")
    return None


def colocation(c: Candidate, ws: Workspace) -> Rejection | None:
    """Reciprocal ceilings and excludes against every live or planned peer."""
    name = c.profile.name
    if c.incumbent is None and c.host_id in ws.live_violations:
        detail = ws.live_violations[c.host_id]
        return Rejection(RejectionCode.COLOCATION_EXCLUDE, f"host must converge first: {detail}")
    members = c.ledger.desired_models if c.incumbent else c.ledger.members()
    excluded = ws.exclusions.get(name)
    if (
        not excluded
        and c.profile.max_colocated_models <= 0
        and members.isdisjoint(ws.ceiling_models)
    ):
        return None  # no rule of its own, and no peer with a ceiling
    peers = members - {name}
    if excluded:
        clash = sorted(peers & excluded)
        if clash:
            return Rejection(RejectionCode.COLOCATION_EXCLUDE, f"excluded beside {clash[0]}")
    count = len(peers) + 1
    if 0 < c.profile.max_colocated_models < count:
        return Rejection(
            RejectionCode.COLOCATION_CEILING,
            f"{count} models > own ceiling {c.profile.max_colocated_models}",
        )
    for peer in sorted(peers):
        other = ws.profiles.get(peer)
        if other is not None and 0 < other.max_colocated_models < count:
            return Rejection(
                RejectionCode.COLOCATION_CEILING,
                f"{peer} allows at most {other.max_colocated_models} models",
            )
    return None


def failure_domain(c: Candidate, ws: Workspace) -> Rejection | None:
    name = c.profile.name
    if c.relax_domains or not ws.needs_new_domain(name):
        return None
    if c.view.domain in ws.domains[name]:
        return Rejection(RejectionCode.FAILURE_DOMAIN, f"domain {c.view.domain} already used")
    return None


def disk_admission(c: Candidate, ws: Workspace) -> Rejection | None:
    if c.disk_mb <= 0:
        return None
    free = c.ledger.disk_free_mb()
    if free is None:
        return Rejection(RejectionCode.DISK_UNKNOWN, "no authenticated free-disk observation")
    if c.disk_mb > free:
        return Rejection(RejectionCode.DISK_ADMISSION, f"artifact {c.disk_mb} MB > {free} MB free")
    return None


def memory_incremental(c: Candidate, ws: Workspace) -> Rejection | None:
    if c.incumbent is not None:
        return None  # a zero-allocation transition may stay inside the headroom
    need = c.memory_mb + ws.policy.admission_headroom_mb
    free = c.ledger.incremental_free_mb
    if need > free:
        return Rejection(
            RejectionCode.MEMORY_INCREMENTAL, f"needs {need} MB with headroom, {free} MB free now"
        )
    return None


def memory_desired(c: Candidate, ws: Workspace) -> Rejection | None:
    if c.incumbent is not None and not c.charged:  # (a new replica is always charged)
        return None  # unmanaged or pinned memory is charged before anything else
    free = c.ledger.desired_free_mb
    if c.memory_mb > free:
        return Rejection(
            RejectionCode.MEMORY_DESIRED, f"desired footprint over by {c.memory_mb - free} MB"
        )
    return None


DYNAMIC_FILTERS: tuple[DynamicFilter, ...] = (
    model_slots,
    colocation,
    failure_domain,
    disk_admission,
    memory_incremental,
    memory_desired,
)


def passes_as_new(c: Candidate, ws: Workspace) -> bool:
    """Whether a new replica (no incumbent) surely passes every filter of
    ``DYNAMIC_FILTERS``, tested in one call: True only where each filter finds nothing;
    False where one may reject (the chain then says which, and why).

    Most new replicas pass, and the chain's six calls cost about 0.4 M of a cold 64x32
    plan's instructions (measured)."""
    ledger = c.ledger
    name = c.profile.name
    members = ledger.members()
    limit = c.view.host.resources.max_models
    if 0 < limit < len(members) + 1 and name not in members:
        return False  # ``model_slots``
    if (
        c.host_id in ws.live_violations
        or c.profile.max_colocated_models > 0
        or ws.exclusions.get(name)
        or not members.isdisjoint(ws.ceiling_models)
    ):
        return False  # ``colocation`` may reject
    if (
        not c.relax_domains
        and ws.domain_of[c.host_id] in ws.domains[name]
        and ws.needs_new_domain(name)
    ):
        return False  # ``failure_domain``
    if c.disk_mb > 0:
        free = ledger.disk_free_mb()
        if free is None or c.disk_mb > free:
            return False  # ``disk_admission``
    if c.memory_mb + ws.policy.admission_headroom_mb > ledger.incremental_free_mb:
        return False  # ``memory_incremental``
    return c.memory_mb <= ledger.desired_free_mb  # ``memory_desired``


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


def first_rejection(ws: Workspace, candidate: Candidate) -> Rejection | None:
    if candidate.incumbent is None and passes_as_new(candidate, ws):
        return None
    for check in DYNAMIC_FILTERS:
        rejection = check(candidate, ws)
        if rejection is not None:
            return rejection
    return None


def score(ws: Workspace, candidate: Candidate) -> None:
    """The named components and score the candidate has if it passes every filter."""
    name = candidate.profile.name
    host_id = candidate.host_id
    new_domain, free_after, capacity = _dynamic_facts(ws, candidate)
    found = ws.static_scores(name).get(host_id)
    if found is None:
        ws.static_sum(name, host_id)
        found = ws.static_scores(name)[host_id]
    (static_parts, _), value = found  # the parts, and the unrounded sum of them
    dynamic = dynamic_components(new_domain, free_after, capacity)
    candidate.components = static_parts + dynamic
    # ``score_value``: ``score_with_dynamic``'s sum, in its order, from the parts in hand
    for _, part in dynamic:
        value += part
    candidate.score = round6(value)


def score_value(ws: Workspace, candidate: Candidate) -> float:
    """The score ``score`` gives the candidate, without naming its components."""
    new_domain, free_after, capacity = _dynamic_facts(ws, candidate)
    static = ws.static_sum(candidate.profile.name, candidate.host_id)
    return score_with_dynamic(static, new_domain, free_after, capacity)


def _dynamic_facts(ws: Workspace, candidate: Candidate) -> tuple[bool, int, int]:
    """What the dynamic score parts read: (a new failure domain, MB free after, capacity)."""
    if candidate.incumbent is not None:
        free_after = candidate.ledger.desired_free_mb - candidate.memory_mb
        capacity = candidate.view.raw_mb
    else:
        free_after = candidate.ledger.incremental_free_mb - candidate.memory_mb
        capacity = candidate.view.new_capacity_mb
    return candidate.view.domain not in ws.domains[candidate.profile.name], free_after, capacity


def new_placement_score(ws: Workspace, model_id: str, host_id: str) -> float | None:
    """The exact score of a new replica here if it passes every filter, computed without
    shaping a candidate; None for a host holding or re-admitting the model."""
    ledger = ws.ledgers[host_id]
    if model_id in ledger.assigned or model_id in ledger.reserved:
        return None
    if host_id in ws.incumbents[model_id]:
        return None
    footprint = ws.new_footprint(model_id, host_id)
    if footprint is None:  # pragma: no cover - static eligibility guarantees a runtime
        return None
    return score_with_dynamic(
        ws.static_sum(model_id, host_id),
        ws.domain_of[host_id] not in ws.domains[model_id],
        ws.base_free[host_id] - ledger.new_mb - footprint,
        ws.new_capacity[host_id],
    )


@dataclass(slots=True)
class Choice:
    """The outcome of one search: the winner (if any) and every rejection code seen."""

    winner: Candidate | None
    codes: set[RejectionCode]


class Verdict(Enum):
    """What visiting one host in static-score order did to a search."""

    BREAK = "break"  # no later host can win: the search is over
    DEAD = "dead"  # rejected earlier in this plan for a reason that cannot heal
    SKIPPED = "skipped"  # it cannot beat the best so far, even if feasible
    REJECTED = "rejected"  # a filter rejected it (booked in the explanation)
    FEASIBLE = "feasible"  # it passed every filter (and is the best so far if it beat it)


# The verdicts as module names for the search loops, which meet one per host visited:
# on Python 3.11 reading a member through its Enum class runs ``EnumType.__getattr__``
# (about 900 instructions a read, measured), a module global a few dozen.
BREAK = Verdict.BREAK
DEAD = Verdict.DEAD
SKIPPED = Verdict.SKIPPED
REJECTED = Verdict.REJECTED
FEASIBLE = Verdict.FEASIBLE
_ALREADY_ASSIGNED = RejectionCode.ALREADY_ASSIGNED  # (read the same way, per rejection)


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
    capacity_of = ws.new_capacity
    base_free = ws.base_free
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
                    # ``new_placement_score``, term for term (``best_fit`` inlined)
                    value = found[1] + FAILURE_DOMAIN if new_domain else found[1]
                    capacity = capacity_of[host_id]
                    if capacity > 0:
                        free = base_free[host_id] - ledger.new_mb - footprint
                        tightness = 1.0 - (free if free > 0 else 0) / capacity
                        if not tightness > 0.0:
                            tightness = 0.0
                        elif tightness > 1.0:
                            tightness = 1.0
                        value += round6(BEST_FIT * tightness)
                    quick = round6(value)
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
