"""Where one more replica of a model goes: the seam between the rounds and the searches.

The placement rounds (``rounds``) ask a ``Placer`` for the best place of one
more replica of a model among all its eligible hosts. Today a replica lives on
one host, and ``SingleHostPlacer`` answers with the host-by-host search
(``selection.choose_ranked``) or, on a fleet whose hosts fall into few classes
of equivalent hosts, the class search (``class_search.choose_by_class``): both
give the same choice. A placer that puts a model across several hosts (a split
placement) implements the same protocol and runs the same rules,
``placement_filters.first_rejection``, on every stage host.

Pins, repairs and repacks search explicit host lists with
``selection.choose_host``: they place or move one replica on one host by
definition (a pinned host, or a replacement for a replica already placed).
"""

from __future__ import annotations

from typing import Protocol

from gridctl.planner.candidates import Choice
from gridctl.planner.class_search import choose_by_class
from gridctl.planner.host_classes import HostClasses
from gridctl.planner.rejections import RejectionCode
from gridctl.planner.selection import choose_ranked
from gridctl.planner.workspace import Workspace

# a fleet with fewer than this many hosts per class is searched host by host: the
# class search pays per class and its shortcuts need classes with several members
MEMBERS_PER_CLASS = 3


class Placer(Protocol):
    """Chooses where one more replica of a model goes in the plan being made."""

    def place(
        self,
        ws: Workspace,
        model_id: str,
        relax_domains: bool,
        dead: dict[str, RejectionCode],
    ) -> Choice:
        """The best feasible place among the model's eligible hosts, and every rejection
        code met; hosts rejected for a reason that cannot heal in this plan are added to
        ``dead``. ``relax_domains`` lifts the failure-domain minimum."""
        ...


class SingleHostPlacer:
    """One replica on one host: the host-by-host search, or the class search where the
    hosts fall into few classes (decided once, on the first search; ``by_class`` forces
    one: both give the same plan)."""

    def __init__(self, by_class: bool | None = None) -> None:
        self.by_class = by_class
        self.classes: HostClasses | None = None  # built by the first class search

    def place(
        self,
        ws: Workspace,
        model_id: str,
        relax_domains: bool,
        dead: dict[str, RejectionCode],
    ) -> Choice:
        if self._worth_classing(ws):
            classes = self.classes
            if classes is None:
                classes = self.classes = HostClasses(ws)
            else:
                classes.refresh()
            return choose_by_class(ws, classes, model_id, relax_domains, dead)
        return choose_ranked(ws, model_id, relax_domains, dead)

    def _worth_classing(self, ws: Workspace) -> bool:
        """Whether the plan's hosts fall into few enough classes for the class search to
        pay."""
        if self.by_class is None:
            if _class_floor(ws) * MEMBERS_PER_CLASS > len(ws.host_ids):
                self.by_class = False  # too many classes, whatever the ledgers say: none built
            else:
                self.classes = HostClasses(ws)
                self.by_class = self.classes.count() * MEMBERS_PER_CLASS <= len(ws.host_ids)
        return self.by_class


def _class_floor(ws: Workspace) -> int:
    """A lower bound on ``HostClasses(ws).count()``: the admitted hosts' distinct leading
    parts of the class signature (score shape and static class)."""
    return len({(ws.score_id(h), c) for h, c in ws.static.class_of.items()})
