"""The class search: ``selection.choose_host`` over a model's ranked hosts, class by class.

``choose_by_class`` merges the classes of ``host_classes.HostClasses`` (hosts a
search cannot tell apart) instead of visiting hosts one by one, and gives the
same choice, rejection codes, dead hosts and explanation book as the
host-by-host search over ``ws.ordered_hosts(model)``. A verdict a new replica
met on a member is cached under its filter key: the class, the stream's domain
kind, the footprint and what the rules declare they read of the model
(``placement_filters.MODEL_FACTS``), so models alike in all of it share it.
"""

from __future__ import annotations

from bisect import insort
from operator import itemgetter

from gridctl.planner.candidates import BREAK, REJECTED, Choice
from gridctl.planner.host_classes import HostClasses
from gridctl.planner.placement_filters import DYNAMIC_CODES, model_facts
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.scoring import DYNAMIC_MAX
from gridctl.planner.selection import (
    BEST_FIT_BOUND,
    Search,
    book_rejection,
    new_placement_value,
    visit,
)
from gridctl.planner.workspace import Workspace


def _special_hosts(
    ws: Workspace, classes: HostClasses, model_id: str, dead: dict[str, RejectionCode]
) -> set[str]:
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
    held = classes.holders.get(model_id)
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
    classes: HostClasses,
    model_id: str,
    relax_domains: bool = False,
    dead: dict[str, RejectionCode] | None = None,
) -> Choice:
    """``choose_host(ws, model_id, ws.ordered_hosts(model_id), ...)``, visiting the classes
    of ``classes`` (current with every ledger).

    Once a best exists, a class whose new-placement score cannot beat it is
    dropped without a visit (the host-by-host search would skip its members
    without booking anything), and a class member after one that was rejected
    takes the same rejection without re-running the filters. Hosts dead for
    the model are not visited: a visit of one only adds its code to the
    search's codes, which matter only when nothing wins, and then every
    queued host would have been visited, so their codes are added at the end.
    """
    ws.mark_searched(model_id)
    eligible = ws.eligible_set[model_id]
    static_score = ws.static_score
    dead_hosts: dict[str, RejectionCode] = {} if dead is None else dead
    special = _special_hosts(ws, classes, model_id, dead_hosts)
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
    footprints = ws.footprints(model_id)
    shape_of = ws.static.shape_of
    # Everything the dynamic filters read of a new replica on a member of a class in a
    # domain (None: one the model does not use yet), beside the class's signature: its
    # footprint, whether its failure-domain minimum is met and what the rules declare
    # they read of the model (the filter key of ``HostClasses.rejections``). All but the
    # class, the domain and the footprint are fixed for the search, so they are read
    # once here (a method call per key cost about 0.1 M of a cold 64x32 plan, measured).
    domain_free = relax_domains or not ws.needs_new_domain(model_id)
    of_model = model_facts(ws, model_id)
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
                        static_sum = scores[alike[class_id]][1]
                        quick = new_placement_value(ws, model_id, host_id, static_sum, footprint)
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
                    filters = (class_id, domain, domain is None or domain_free, footprint, of_model)
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
                    verdict = classes.visit_member(search, host_id, class_id, filters)
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
