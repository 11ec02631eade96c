"""What a placement search considers and what it returns, shared by every search module.

A ``Candidate`` is one host being considered for one more replica of one model;
a ``Choice`` is a search's outcome; a ``Verdict`` is what visiting one host did
to a search. The filters (``placement_filters``), the host-by-host search
(``selection``), the class search (``host_classes``) and the placers
(``placers``) all read these; they live apart from the ``Workspace`` and from
any search so that no two of those modules need to import each other both ways.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from gridctl.domain import ModelProfile
from gridctl.planner.host_views import HostView, LiveResidency
from gridctl.planner.ledgers import HostLedger
from gridctl.planner.rejections import RejectionCode
from gridctl.planner.scoring import Components


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
