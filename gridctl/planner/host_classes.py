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

``class_search.choose_by_class`` runs exactly the search ``selection.choose_host`` runs
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

The signature is derived from the rules' declarations
(``placement_filters.CLASS_FACTS``): a rule that reads a new fact of a host
changes it, so hosts that differ in that fact never share a class or a cached
verdict.
"""

from __future__ import annotations

from bisect import insort

from gridctl.planner.candidates import FEASIBLE, Candidate, Verdict
from gridctl.planner.fleet_index import StaticScore
from gridctl.planner.placement_filters import (
    FIXED_FACTS,
    MOVING_FACTS,
    fact_reader,
    first_rejection,
)
from gridctl.planner.rejections import Rejection
from gridctl.planner.selection import Search, book_rejection, score_as_new
from gridctl.planner.workspace import Workspace

Signature = tuple[object, ...]

_NONE: frozenset[str] = frozenset()
_read_fixed = fact_reader(FIXED_FACTS)  # what the signature reads of a host's view
_read_moving = fact_reader(MOVING_FACTS)  # and of its ledger


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
            signature = self.signature(host_id)
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
        filters: tuple[object, ...],
    ) -> Verdict:
        """``visit(search, host_id, pruned)`` of a member of the class not special to the
        model (a new placement, past the class's pruning): the dynamic filters run only
        for a filter key (``filters``) not yet known to pass them, and the static part of
        the score is the class's."""
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
        # ``selection.score``, from the class's static parts
        score_as_new(ws, shaped, self._by_alike[model_id][self.alike[class_id]])
        score = shaped.score
        ws.explain.score(model_id, host_id, shaped.components, score)
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

    def signature(self, host_id: str) -> Signature:
        """Everything a search for a model not planned, reserved or resident on the host
        reads of it but its failure domain: its score shape and static class, and the
        facts the dynamic rules and the new-placement score declare (``CLASS_FACTS``)."""
        ws = self._ws
        ledger = ws.ledgers[host_id]
        fixed = self._fixed.get(host_id)
        if fixed is None:
            # a number for what the signature reads of the host's view (fixed for the
            # plan), so a re-read builds and hashes a short tuple
            fixed_ids = self._fixed_ids
            fixed = self._fixed[host_id] = fixed_ids.setdefault(
                (ws.score_id(host_id), ws.static.class_of[host_id], *_read_fixed(ws, ledger)),
                len(fixed_ids),
            )
        return (fixed, *_read_moving(ws, ledger))

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
            signature = self.signature(host_id)
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
