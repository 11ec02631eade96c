"""Hosts that placement cannot tell apart, searched as one.

A large fleet is mostly copies of a few machines: equal hardware, equal
static eligibility and score shape, equal free memory and equal planned
members. For a model with no incumbent, cache, failure or residency on them,
such hosts pass or fail every filter alike and score alike, so they differ
only in host id and failure domain. ``HostClasses`` groups hosts by
everything static scoring, eligibility, the dynamic filters and the dynamic
score read but the domain (the class ``signature``), keeps each class's
members in host-id order, overall and per domain, and re-reads only the hosts
whose ledger changed since the last search (the ledgers' shared journal), so
a placement rescores only the classes it touched.

``choose_by_class`` runs exactly the search ``selection.choose_host`` runs
over ``ws.ordered_hosts(model)``, but merges classes instead of hosts: the
search visits hosts best static score first, then host id, and a class is
dropped at its first member that is skipped (it cannot beat the best) or
feasible (later members, with equal scores and larger ids, cannot beat it),
because the best only ever improves. A model's used failure domains split a
class in two kinds of member, scored and filtered alike within each: those
in a domain the model does not use yet (searched as one stream) and, per used
domain, those in it (one stream each). Members that are rejected are booked one
by one, as the host-by-host search books them, so the choice, the rejection
codes, the dead hosts and the explanation book come out identical. Hosts
special to the model (an incumbent, cached weights, failures, a residency, a
staged preemption, a dead mark) are visited individually in their place.
"""

from __future__ import annotations

from bisect import insort
from operator import itemgetter

from gridctl.planner.fleet_index import StaticScore
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.scoring import (
    DYNAMIC_MAX,
    FAILURE_DOMAIN,
    Components,
    best_fit,
    round6,
    score_with_dynamic,
)
from gridctl.planner.selection import (
    BEST_FIT_BOUND,
    BREAK,
    FEASIBLE,
    REJECTED,
    Candidate,
    Choice,
    Search,
    Verdict,
    book_rejection,
    first_rejection,
    visit,
)
from gridctl.planner.workspace import Workspace

Signature = tuple[object, ...]

_NONE: frozenset[str] = frozenset()
_NEW_DOMAIN_PART: Components = (("failure_domain", FAILURE_DOMAIN),)


class HostClasses:
    """Hosts grouped by signature, members in host-id order, kept current from the journal."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        # static class (``StaticEligibility.class_of``) -> class id -> members in id order
        self.by_static: dict[int, dict[int, list[str]]] = {}
        self._ids: dict[Signature, int] = {}  # every signature seen, numbered
        self.alike: list[tuple[int, int]] = []  # class id -> (score shape id, static class)
        self._representative: dict[int, str] = {}
        self._class: dict[str, int] = {}
        # class id -> failure domain -> members in id order
        self.by_domain: dict[int, dict[str, list[str]]] = {}
        self._eligible: dict[str, tuple[int, ...]] = {}
        # per model: quick scores by (class, whether in a failure domain it does not use)
        self._quick: dict[str, dict[tuple[int, bool], float | None]] = {}
        # the rejection a new replica met on a member of a class, by everything the
        # dynamic filters read of the replica (its filter key, built in ``choose_by_class``):
        # models alike in it share it
        self.rejections: dict[tuple[object, ...], Rejection] = {}
        # the filter keys a new replica on a member passed every dynamic filter with
        self.passes: set[tuple[object, ...]] = set()
        self._by_alike: dict[str, dict[tuple[int, int], StaticScore]] = {}
        self._by_group: dict[tuple[object, ...], dict[tuple[int, int], StaticScore]] = {}
        # per model: hosts where it is reserved (special to its searches, as are the hosts
        # it is planned on, which ``ws.assignments`` lists)
        self.holders: dict[str, set[str]] = {}
        self._held: dict[str, frozenset[str]] = {}
        # per host: a number for what the signature reads of its view (fixed for the plan),
        # so a re-read builds and hashes a short tuple
        self._fixed: dict[str, int] = {}
        self._fixed_ids: dict[Signature, int] = {}
        # models whose presence on a host changes what colocation says to another model
        self._constraining = frozenset(
            name
            for name, profile in ws.profiles.items()
            if profile.max_colocated_models > 0 or name in ws.exclusions
        )
        ledgers = ws.ledgers
        views = ws.views
        class_of = ws.static.class_of
        domain_of = ws.domain_of
        ids = self._ids
        by_static = self.by_static
        by_domain = self.by_domain
        for host_id in ws.host_ids:
            ledger = ledgers[host_id]
            if ledger.reserved:
                self._hold(host_id)
            if views[host_id].admission is not None:
                continue  # it takes nothing new: never eligible for any model
            signature = self._read(host_id)
            class_id = ids.get(signature)
            static_class = class_of[host_id]
            if class_id is None:
                class_id = ids[signature] = len(ids)
                self.alike.append((ws.score_id(host_id), static_class))
                by_static.setdefault(static_class, {})[class_id] = [host_id]
                by_domain[class_id] = {domain_of[host_id]: [host_id]}
            else:  # host ids arrive in order
                by_static[static_class][class_id].append(host_id)
                by_domain[class_id].setdefault(domain_of[host_id], []).append(host_id)
            self._class[host_id] = class_id
            self._representative.setdefault(static_class, host_id)
        self._representatives = sorted(self._representative.items())
        ws.journal.clear()

    def count(self) -> int:
        """How many classes the admitted hosts fall into."""
        return sum(len(group) for group in self.by_static.values())

    def eligible_static(self, model_id: str) -> tuple[int, ...]:
        """The static classes (keys of ``by_static``) the model may be placed in."""
        found = self._eligible.get(model_id)
        if found is None:
            eligible = self._ws.eligible_set[model_id]
            found = self._eligible[model_id] = tuple(
                c for c, host_id in self._representatives if host_id in eligible
            )
        return found

    def alike_scores(self, model_id: str) -> dict[tuple[int, int], StaticScore]:
        """The model's static scores known so far, by (score shape id, static class): the
        members of every class with that pair score alike, for every model of the model's
        ``score_group`` (which shares this dict)."""
        found = self._by_alike.get(model_id)
        if found is None:
            group = self._ws.score_group(model_id)
            found = self._by_group.get(group)
            if found is None:
                found = self._by_group[group] = {}
            self._by_alike[model_id] = found
        return found

    def quick_scores(self, model_id: str) -> dict[tuple[int, bool], float | None]:
        """The model's quick scores so far, by (class id, new domain): the
        ``new_placement_score`` of any member of the class in a failure domain the model
        uses (new domain False) or not (the signature fixes everything else it reads)."""
        found = self._quick.get(model_id)
        if found is None:
            found = self._quick[model_id] = {}
        return found

    def visit_member(
        self,
        search: Search,
        host_id: str,
        class_id: int,
        new_domain: bool,
        filters: tuple[object, ...],
    ) -> Verdict:
        """``visit(search, host_id, pruned)`` of a member of the class not special to the
        model (a new placement, past the class's pruning) in a failure domain the model
        does not use yet (``new_domain``) or not: the dynamic filters run only for a
        filter key (``filters``) not yet known to pass them, and the score is the class's."""
        ws = self._ws
        model_id = search.model_id
        profile = ws.profiles[model_id]
        choice = ws.new_runtime(model_id, host_id)
        assert choice is not None  # (``filters``: a new runtime fits)
        runtime, memory = choice
        # (a member holds no cached weights of the model: those hosts are special)
        disk = profile.artifact.size_mb or 0
        view = ws.views[host_id]
        ledger = ws.ledgers[host_id]
        shaped = Candidate(
            profile, host_id, view, ledger, runtime, memory, None, disk, search.relax_domains
        )
        if filters not in self.passes:
            rejection = first_rejection(ws, shaped)
            if rejection is not None:
                return book_rejection(search, host_id, rejection)
            self.passes.add(filters)
        # ``selection.score``, from the class's static parts: the dynamic parts in order
        (static_parts, _), value = self._by_alike[model_id][self.alike[class_id]]
        capacity = ws.new_capacity[host_id]
        dynamic: Components = ()
        if new_domain:
            value += FAILURE_DOMAIN
            dynamic = _NEW_DOMAIN_PART
        if capacity > 0:
            fit = best_fit(ws.base_free[host_id] - ledger.new_mb - memory, capacity)
            value += fit
            dynamic += (("best_fit", fit),)
        score = shaped.score = round6(value)
        shaped.components = parts = static_parts + dynamic
        ws.explain.score(model_id, host_id, parts, score)
        best = search.best
        if best is None or score > best.score or (score == best.score and host_id < best.host_id):
            search.best = shaped
        return FEASIBLE

    def _hold(self, host_id: str) -> None:
        """Index which models are reserved on the host."""
        held = self._ws.ledgers[host_id].reserved
        before = self._held.get(host_id, _NONE)
        if held == before:
            return
        holders = self.holders
        for model_id in before - held:
            holders[model_id].discard(host_id)
        for model_id in held - before:
            found = holders.get(model_id)
            if found is None:
                holders[model_id] = {host_id}
            else:
                found.add(host_id)
        self._held[host_id] = frozenset(held)

    def _read(self, host_id: str) -> Signature:
        """Everything a search for a model not planned, reserved or resident on the host
        reads of it but its failure domain: which models are there matters only by their
        count and the ones that carry a colocation rule."""
        ledger = self._ws.ledgers[host_id]
        fixed = self._fixed.get(host_id)
        if fixed is None:
            # a number for what the signature reads of the host's view
            ws = self._ws
            view = ledger.view
            resources = view.host.resources
            fixed_ids = self._fixed_ids
            fixed = self._fixed[host_id] = fixed_ids.setdefault(
                (
                    ws.score_id(host_id),
                    ws.static.class_of[host_id],
                    view.new_capacity_mb,
                    view.raw_mb,
                    view.unmanaged_mb,
                    view.live_managed_mb,
                    resources.max_models,
                    resources.disk_free_mb,
                    ws.live_violations.get(host_id, ""),
                ),
                len(fixed_ids),
            )
        members = ledger.members()
        return (
            fixed,
            ledger.new_mb,
            ledger.desired_mb,
            ledger.disk_mb,
            len(members),
            frozenset(members & self._constraining) if members else _NONE,
        )

    def refresh(self) -> None:
        """Move every host whose ledger changed into the class its new state belongs to."""
        # the signature's class looked up here, not by a method per host, and a new class's
        # lists made as they are needed rather than by ``setdefault`` (which builds an
        # empty list or dict each call): about 0.05 M of a cold 64x32 plan (measured)
        ws = self._ws
        journal = ws.journal
        if not journal:
            return
        ledgers = ws.ledgers
        ids = self._ids
        for host_id in sorted(journal) if len(journal) > 1 else journal:
            if ledgers[host_id].reserved or host_id in self._held:
                self._hold(host_id)
            old = self._class.get(host_id)
            if old is None:
                continue
            signature = self._read(host_id)
            new = ids.get(signature)
            static_class = ws.static.class_of[host_id]
            if new is None:  # a state no host had: a new class
                new = ids[signature] = len(ids)
                self.alike.append((ws.score_id(host_id), static_class))
            elif new == old:
                continue
            group = self.by_static[static_class]
            members = group[old]
            members.remove(host_id)
            if not members:
                del group[old]
            self._class[host_id] = new
            moved = group.get(new)
            if moved is None:
                group[new] = [host_id]
            else:
                insort(moved, host_id)
            domain = ws.domain_of[host_id]
            by_domain = self.by_domain
            old_domains = by_domain[old]
            in_domain = old_domains[domain]
            in_domain.remove(host_id)
            if not in_domain:
                del old_domains[domain]
            new_domains = by_domain.get(new)
            if new_domains is None:
                by_domain[new] = {domain: [host_id]}
            else:
                inside = new_domains.get(domain)
                if inside is None:
                    new_domains[domain] = [host_id]
                else:
                    insort(inside, host_id)
        journal.clear()


# what the dynamic filters reject for (``selection.DYNAMIC_FILTERS``): the rejections
# ``HostClasses.rejections`` may share between models
DYNAMIC_CODES = frozenset(
    {
        RejectionCode.MODEL_SLOTS,
        RejectionCode.COLOCATION_EXCLUDE,
        RejectionCode.COLOCATION_CEILING,
        RejectionCode.FAILURE_DOMAIN,
        RejectionCode.DISK_UNKNOWN,
        RejectionCode.DISK_ADMISSION,
        RejectionCode.MEMORY_INCREMENTAL,
        RejectionCode.MEMORY_DESIRED,
    }
)

# a fleet with fewer than this many hosts per class is searched host by host: the
# class search pays per class and its shortcuts need classes with several members
MEMBERS_PER_CLASS = 3


def worth_classing(ws: Workspace) -> bool:
    """Whether the plan's hosts fall into few enough classes for the class search to pay
    (decided once, on the first search: both searches give the same plan)."""
    if ws.by_class is None:
        if _class_floor(ws) * MEMBERS_PER_CLASS > len(ws.host_ids):
            ws.by_class = False  # too many classes, whatever the ledgers say: none are built
        else:
            ws.classes = HostClasses(ws)
            ws.by_class = ws.classes.count() * MEMBERS_PER_CLASS <= len(ws.host_ids)
    return ws.by_class


def _class_floor(ws: Workspace) -> int:
    """A lower bound on ``HostClasses(ws).count()``: the admitted hosts' distinct leading
    parts of the class signature (score shape and static class)."""
    return len({(ws.score_id(h), c) for h, c in ws.static.class_of.items()})


def classes_of(ws: Workspace) -> HostClasses:
    """The plan's host classes, built on first use and current with every ledger."""
    if ws.classes is None:
        ws.classes = HostClasses(ws)
    else:
        ws.classes.refresh()
    return ws.classes


def _special_hosts(ws: Workspace, model_id: str, dead: dict[str, RejectionCode]) -> set[str]:
    """Hosts where the model itself makes a host unlike its class-mates."""
    found = set(ws.special_hosts(model_id))
    resident = ws.resident_hosts(model_id)
    if resident:
        found.update(resident)
    if dead:
        found.update(dead)
    if ws.preemptions:
        found.update(h for h, m in ws.preemptions if m == model_id)
    planned = ws.assignments[model_id]
    if planned:
        found.update(planned)
    if ws.classes is not None:
        held = ws.classes.holders.get(model_id)
        if held:
            found.update(held)
    return found


def _next_member(
    members: list[str],
    start: int,
    special: set[str],
    used: dict[str, int] | None = None,
    domain_of: dict[str, str] | None = None,
) -> int:
    """The position of the first member at or after ``start`` not special to the model
    (nor, given the model's ``used`` domains, in one of them)."""
    end = len(members)
    if used and domain_of is not None:
        while start < end and (members[start] in special or domain_of[members[start]] in used):
            start += 1
        return start
    while start < end and members[start] in special:
        start += 1
    return start


_Entry = tuple[float, str, int, list[str], int | None, str | None]
_UNSPLIT = -1  # the position of a queued class not yet split into its streams
_KEY = itemgetter(0)  # a queue entry's -static total
_HOST = itemgetter(1)  # and its host


def _streams(
    classes: HostClasses,
    class_id: int,
    members: list[str],
    special: set[str],
    used: dict[str, int],
    domain_of: dict[str, str],
) -> list[tuple[str, int, list[str], str | None]]:
    """A class's members as the model's search meets them: (first member, its position,
    the members, None) of those in a domain the model does not use yet, then, per used
    domain with members, (first member, position, its members, the domain); hosts special
    to the model left out."""
    streams: list[tuple[str, int, list[str], str | None]] = []
    at = _next_member(members, 0, special, used, domain_of)
    if at < len(members):
        streams.append((members[at], at, members, None))
    if used:
        by_domain = classes.by_domain[class_id]
        for domain in used:
            inside = by_domain.get(domain)
            if inside:
                at = _next_member(inside, 0, special)
                if at < len(inside):
                    streams.append((inside[at], at, inside, domain))
    return streams


def choose_by_class(
    ws: Workspace,
    model_id: str,
    relax_domains: bool = False,
    dead: dict[str, RejectionCode] | None = None,
) -> Choice:
    """``choose_host(ws, model_id, ws.ordered_hosts(model_id), ...)``, visiting classes.

    Once a best exists, a class whose new-placement score cannot beat it is
    dropped without a visit (the host-by-host search would skip its members
    without booking anything), and a class member after one that was rejected
    takes the same rejection without re-running the filters. Hosts dead for
    the model are not visited: a visit of one only adds its code to the
    search's codes, which matter only when nothing wins, and then every
    queued host would have been visited, so their codes are added at the end.
    """
    classes = classes_of(ws)
    ws.mark_searched(model_id)
    eligible = ws.eligible_set[model_id]
    static_score = ws.static_score
    dead_hosts: dict[str, RejectionCode] = {} if dead is None else dead
    special = _special_hosts(ws, model_id, dead_hosts)
    used = ws.domains[model_id]
    domain_of = ws.domain_of
    by_static = classes.by_static
    alike = classes.alike
    scores = classes.alike_scores(model_id)
    memo = ws.static_scores(model_id)
    # (-static total, host id, position in the stream's members, the stream's members,
    # class, the used domain the stream is in or None), or a lone host (.., [], None, None).
    # A class the model uses failure domains in is queued whole (position ``_UNSPLIT``, its
    # first member not special to the model) and split into its streams (``_streams``)
    # only when the search reaches it: the entries it becomes sort after it, and most
    # classes are never reached (the search stops first). Saves about 0.4 M of a cold
    # 64x32 plan's instructions (measured).
    queue: list[_Entry] = []
    for static_class in classes.eligible_static(model_id):
        for group, members in by_static[static_class].items():
            first = members[0]
            at = 0
            if first in special:
                at = _next_member(members, 1, special)
                if at == len(members):
                    continue
                first = members[at]
            shape = alike[group]
            score = scores.get(shape)
            if score is None:
                ws.static_sum(model_id, first)
                score = scores[shape] = memo[first]
            queue.append((-score[0][1], first, _UNSPLIT if used else at, members, group, None))
    for host_id in special:
        if host_id in eligible and host_id not in dead_hosts:
            queue.append((-static_score(model_id, host_id)[1], host_id, 0, [], None, None))
    # a sorted list read from ``top`` on rather than a heap: most searches stop after a
    # few entries, and a pop from a heap of these tuples costs several tuple comparisons
    # (measured: heap operations were about 0.7 M of a cold 64x32 plan's instructions).
    # Entries are unique in (key, host id), so two stable sorts, by host id then by key,
    # give the tuples' order: each compares strings or numbers directly, where a tuple
    # comparison tests its items for equality first (about 0.07 M of a cold 64x32 plan)
    queue.sort(key=_HOST)
    queue.sort(key=_KEY)
    top = 0
    search = Search(ws, model_id, relax_domains, dead)
    # the rejection a stream's first visit met, by (class, used domain or None)
    rejected: dict[tuple[int, str | None], Rejection] = {}
    quick_of = classes.quick_scores(model_id)  # (class, new domain) -> score
    base_free = ws.base_free
    ledgers = ws.ledgers
    capacity_of = ws.new_capacity
    footprints = ws.footprints(model_id)
    shape_of = ws.static.shape_of
    # Everything the dynamic filters read of a new replica on a member of a class in a
    # domain (None: one the model does not use yet), beside the class's signature: its
    # footprint, artifact size, colocation rules and whether its failure-domain minimum
    # is met (the filter key of ``HostClasses.rejections``). All but the class, the
    # domain and the footprint are fixed for the search, so they are read once here
    # (a method call per key cost about 0.1 M of a cold 64x32 plan, measured).
    profile = ws.profiles[model_id]
    domain_free = relax_domains or not ws.needs_new_domain(model_id)
    artifact_mb = profile.artifact.size_mb or 0
    colocated = profile.max_colocated_models
    excluded = ws.exclusions.get(model_id)
    while top < len(queue):
        key, host_id, at, members, class_id, domain = queue[top]
        best = search.best
        if class_id is None:
            verdict = visit(search, host_id)
        else:
            if at == _UNSPLIT:
                if best is not None and -key + DYNAMIC_MAX < best.score:
                    break  # no later host can win
                # ``host_id`` is the class's first member not special to the model: the
                # stream it starts is the least of the class's streams and takes this
                # entry's place, the others are queued after it (an insort and a pass of
                # this loop fewer per class split: about 0.2 M of a cold 64x32 plan)
                for first, start, stream, in_domain in _streams(
                    classes, class_id, members, special, used, domain_of
                ):
                    if first == host_id:
                        at, members, domain = start, stream, in_domain
                    else:
                        insort(queue, (key, first, start, stream, class_id, in_domain), top + 1)
            quick: float | None = None
            if best is not None:
                if -key + DYNAMIC_MAX < best.score:
                    break  # no later host can win
                if domain is not None and -key + BEST_FIT_BOUND < best.score:
                    top += 1  # in a used domain: no member can win (nor ``quick``)
                    continue
                kind = (class_id, domain is None)
                if kind in quick_of:
                    quick = quick_of[kind]
                else:
                    host_shape = shape_of[host_id]
                    if host_shape in footprints:  # ``new_footprint``, without the call
                        footprint = footprints[host_shape]
                    else:
                        footprint = ws.new_footprint(model_id, host_id)
                    if footprint is not None:  # (a class member holds no replica of it)
                        # ``new_placement_score`` of a member, inline (a method call per
                        # class pruned cost about 0.13 M of a cold 64x32 plan, measured)
                        quick = score_with_dynamic(
                            scores[alike[class_id]][1],
                            kind[1],
                            base_free[host_id] - ledgers[host_id].new_mb - footprint,
                            capacity_of[host_id],
                        )
                    quick_of[kind] = quick
                if quick is not None and (
                    quick < best.score or (quick == best.score and host_id > best.host_id)
                ):
                    top += 1  # nor can any later member of this stream
                    continue
            known = rejected.get((class_id, domain))
            filters: tuple[object, ...] | None = None
            if known is None:
                host_shape = shape_of[host_id]
                if host_shape in footprints:  # ``new_footprint``, without the call
                    footprint = footprints[host_shape]
                else:
                    footprint = ws.new_footprint(model_id, host_id)
                if footprint is not None:  # a new placement: its filter key
                    filters = (
                        class_id,
                        domain,
                        domain is None or domain_free,
                        footprint,
                        artifact_mb,
                        colocated,
                        excluded,
                    )
                    known = classes.rejections.get(filters)
                    if known is not None:
                        rejected[(class_id, domain)] = known
            if known is None:
                if host_id not in memo:  # a member scores as its class: spare the lookup
                    memo[host_id] = scores[alike[class_id]]
                # past the class's own pruning (``quick`` is exactly the score the member
                # would have): the host-by-host pruning would let it through too
                if filters is None:
                    verdict = visit(search, host_id, best is not None and quick is not None)
                else:
                    verdict = classes.visit_member(
                        search, host_id, class_id, domain is None, filters
                    )
                if verdict is REJECTED and search.rejection is not None:
                    rejected[(class_id, domain)] = search.rejection
                    if filters is not None and search.rejection.code in DYNAMIC_CODES:
                        classes.rejections[filters] = search.rejection
            else:
                verdict = book_rejection(search, host_id, known)
        if verdict is BREAK:
            break
        if class_id is not None and verdict is REJECTED:
            if domain is None:
                at = _next_member(members, at + 1, special, used, domain_of)
            else:
                at = _next_member(members, at + 1, special)
            top += 1
            if at < len(members):
                insort(queue, (key, members[at], at, members, class_id, domain), top)
            continue
        top += 1
    if search.best is None:
        # the dead hosts' codes (those that died in this search are already in)
        search.codes.update(code for h, code in dead_hosts.items() if h in eligible)
    return search.choice()
