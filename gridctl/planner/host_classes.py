"""Hosts that placement cannot tell apart, searched as one.

A large fleet is mostly copies of a few machines: equal hardware, equal
static eligibility and score shape, equal free memory and equal planned
members. For a model with no incumbent, cache, failure or residency on them,
such hosts pass or fail every filter alike and score alike, so they differ
only in host id. ``HostClasses`` groups hosts by everything static scoring,
eligibility, the dynamic filters and the dynamic score read (the class
``signature``), keeps each class's members in host-id order, and re-reads
only the hosts whose ledger changed since the last search (the ledgers'
shared journal), so a placement rescores only the classes it touched.

``choose_by_class`` runs exactly the search ``selection.choose_host`` runs
over ``ws.ordered_hosts(model)``, but merges classes instead of hosts: the
search visits hosts best static score first, then host id, and a class is
dropped at its first member that is skipped (it cannot beat the best) or
feasible (later members, with equal scores and larger ids, cannot beat it),
because the best only ever improves. Members that are rejected are booked one
by one, as the host-by-host search books them, so the choice, the rejection
codes, the dead hosts and the explanation book come out identical. Hosts
special to the model (an incumbent, cached weights, failures, a residency, a
staged preemption, a dead mark) are visited individually in their place.
"""

from __future__ import annotations

import heapq
from bisect import insort
from collections.abc import Iterator

from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.scoring import DYNAMIC_MAX
from gridctl.planner.selection import (
    Choice,
    Search,
    Verdict,
    book_rejection,
    new_placement_score,
    visit,
)
from gridctl.planner.workspace import Workspace

Signature = tuple[object, ...]


class HostClasses:
    """Hosts grouped by signature, members in host-id order, kept current from the journal."""

    def __init__(self, ws: Workspace) -> None:
        self._ws = ws
        # static class (``StaticEligibility.class_of``) -> class id -> members in id order
        self.by_static: dict[int, dict[int, list[str]]] = {}
        self._ids: dict[Signature, int] = {}  # every signature seen, numbered
        self._alike: list[tuple[int, int]] = []  # class id -> (score shape id, static class)
        self._representative: dict[int, str] = {}
        self._class: dict[str, int] = {}
        self._domain: list[str] = []  # class id -> failure domain
        self._eligible: dict[str, tuple[int, ...]] = {}
        self._quick: dict[tuple[str, int, bool], float | None] = {}
        self._total: dict[tuple[str, tuple[int, int]], float] = {}
        for host_id in ws.host_ids:
            if ws.views[host_id].admission is not None:
                continue  # it takes nothing new: never eligible for any model
            class_id = self._id_of(host_id)
            self._class[host_id] = class_id
            static_class = ws.static.class_of[host_id]
            self._representative.setdefault(static_class, host_id)
            group = self.by_static.setdefault(static_class, {})
            group.setdefault(class_id, []).append(host_id)  # host ids arrive in order
        ws.journal.clear()

    def count(self) -> int:
        """How many classes the admitted hosts fall into."""
        return sum(len(group) for group in self.by_static.values())

    def eligible_groups(self, model_id: str) -> Iterator[tuple[int, list[str]]]:
        """Member lists of every class the model may be placed in (static eligibility)."""
        found = self._eligible.get(model_id)
        if found is None:
            eligible = self._ws.eligible_set[model_id]
            found = self._eligible[model_id] = tuple(
                c for c, host_id in sorted(self._representative.items()) if host_id in eligible
            )
        for static_class in found:
            yield from self.by_static[static_class].items()

    def static_total(self, model_id: str, class_id: int, host_id: str) -> float:
        """The rounded static total of any member of the class (all score alike)."""
        key = (model_id, self._alike[class_id])
        found = self._total.get(key)
        if found is None:
            found = self._total[key] = self._ws.static_score(model_id, host_id)[1]
        return found

    def quick(self, model_id: str, class_id: int, host_id: str) -> float | None:
        """``new_placement_score`` of any member of the class (memoised: the signature
        fixes everything it reads but the model's used failure domains)."""
        key = (model_id, class_id, self._domain[class_id] in self._ws.domains[model_id])
        if key in self._quick:
            return self._quick[key]
        found = self._quick[key] = new_placement_score(self._ws, model_id, host_id)
        return found

    def _id_of(self, host_id: str) -> int:
        signature = self._read(host_id)
        found = self._ids.get(signature)
        if found is None:
            found = self._ids[signature] = len(self._ids)
            self._alike.append((self._ws.score_id(host_id), self._ws.static.class_of[host_id]))
            self._domain.append(self._ws.views[host_id].domain)
        return found

    def _read(self, host_id: str) -> Signature:
        ws = self._ws
        view = ws.views[host_id]
        ledger = ws.ledgers[host_id]
        return (
            ws.score_id(host_id),
            ws.static.class_of[host_id],
            view.domain,
            view.new_capacity_mb,
            view.raw_mb,
            view.unmanaged_mb,
            view.live_managed_mb,
            view.live_models,
            view.host.resources.max_models,
            view.host.resources.disk_free_mb,
            ws.live_violations.get(host_id, ""),
            ledger.new_mb,
            ledger.desired_mb,
            ledger.disk_mb,
            frozenset(ledger.assigned),
            frozenset(ledger.new_models),
            frozenset(ledger.reserved),
            frozenset(ledger.desired_models),
        )

    def refresh(self) -> None:
        """Move every host whose ledger changed into the class its new state belongs to."""
        journal = self._ws.journal
        for host_id in sorted(journal):
            old = self._class.get(host_id)
            if old is None:
                continue
            new = self._id_of(host_id)
            if new == old:
                continue
            group = self.by_static[self._ws.static.class_of[host_id]]
            members = group[old]
            members.remove(host_id)
            if not members:
                del group[old]
            self._class[host_id] = new
            insort(group.setdefault(new, []), host_id)
        journal.clear()


# a fleet with fewer than this many hosts per class is searched host by host: the
# class search pays per class and its shortcuts need classes with several members
MEMBERS_PER_CLASS = 3


def worth_classing(ws: Workspace) -> bool:
    """Whether the plan's hosts fall into few enough classes for the class search to pay
    (decided once, on the first search: both searches give the same plan)."""
    if ws.by_class is None:
        ws.classes = HostClasses(ws)
        ws.by_class = ws.classes.count() * MEMBERS_PER_CLASS <= len(ws.host_ids)
    return ws.by_class


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
    found.update(ws.resident_hosts(model_id))
    found.update(dead)
    found.update(h for h, m in ws.preemptions if m == model_id)
    return found


def _members_except(members: list[str], special: set[str]) -> Iterator[str]:
    return (h for h in members if h not in special)


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
    takes the same rejection without re-running the filters.
    """
    classes = classes_of(ws)
    ws.mark_searched(model_id)
    eligible = ws.eligible_set[model_id]
    static_score = ws.static_score
    dead_hosts: dict[str, RejectionCode] = {} if dead is None else dead
    special = _special_hosts(ws, model_id, dead_hosts)
    # (-static total, host id, members still to visit, class) or a lone host (None, None)
    queue: list[tuple[float, str, Iterator[str] | None, int | None]] = []
    for group, members in classes.eligible_groups(model_id):
        others = _members_except(members, special) if special else iter(members)
        first = next(others, None)
        if first is not None:
            queue.append((-classes.static_total(model_id, group, first), first, others, group))
    for host_id in special:
        if host_id in eligible:
            queue.append((-static_score(model_id, host_id)[1], host_id, None, None))
    heapq.heapify(queue)
    search = Search(ws, model_id, relax_domains, dead)
    rejected: dict[int, Rejection] = {}  # the rejection a class's first visit met
    while queue:
        key, host_id, rest, class_id = queue[0]
        best = search.best
        if class_id is None:
            verdict = visit(search, host_id)
        else:
            if best is not None:
                if -key + DYNAMIC_MAX < best.score:
                    break  # no later host can win
                quick = classes.quick(model_id, class_id, host_id)
                if quick is not None and (
                    quick < best.score or (quick == best.score and host_id > best.view.host_id)
                ):
                    heapq.heappop(queue)  # nor can any later member of this class
                    continue
            known = rejected.get(class_id)
            if known is None:
                verdict = visit(search, host_id)
                if verdict is Verdict.REJECTED and search.rejection is not None:
                    rejected[class_id] = search.rejection
            else:
                verdict = book_rejection(search, host_id, known)
        if verdict is Verdict.BREAK:
            break
        if rest is not None and verdict is Verdict.REJECTED:
            following = next(rest, None)
            if following is not None:
                heapq.heapreplace(queue, (key, following, rest, class_id))
                continue
        heapq.heappop(queue)
    return search.choice()
