"""What the last tick published: one frozen view, swapped by a single reference.

Status, ownership, snapshots, apply and metrics read ``Controller.view``; a
reader holds whichever view was current when it looked, complete and
consistent, and never takes the controller's locks. A tick builds a new view
from its outcome and replaces the reference in one assignment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from gridctl.domain import FleetSnapshot, HostSnapshot, ModelProfile, Plan
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.reconcile import PlanGeneration, ReconcileResult


@dataclass(frozen=True)
class TickRecord:
    at: float
    duration_ms: float
    ok: bool
    error: str | None = None
    # wall time of each phase that ran: renew (the authority lease), gather (inputs from
    # the registry, store and demand book), plan (``compute``, maybe in a worker process)
    # and commit (persist and announce)
    phases: tuple[tuple[str, float], ...] = ()


class PhaseTimer:
    """Wall time per phase of one tick, each phase from the end of the one before."""

    def __init__(self, started: float) -> None:
        self._mark = started
        self.spent: tuple[tuple[str, float], ...] = ()

    def done(self, phase: str) -> None:
        now = time.monotonic()
        self.spent += ((phase, (now - self._mark) * 1000),)
        self._mark = now


PortfolioKey = tuple[float, tuple[HostSnapshot, ...], tuple[ModelProfile, ...], int]


@dataclass(frozen=True)
class PortfolioBundle:
    """One portfolio solve and the inputs it read: timestamp, node snapshots, model
    profiles and the telemetry revision (every request and evaluation advances it)."""

    key: PortfolioKey
    portfolio: PortfolioResult

    @property
    def telemetry_revision(self) -> int:
        return self.key[3]


@dataclass(frozen=True)
class TickView:
    """The last tick's results. ``generation`` is None until a leader's tick persisted a
    plan (a follower plans for status but issues nothing)."""

    plan: Plan | None = None
    result: ReconcileResult | None = None
    snapshot: FleetSnapshot | None = None
    portfolio: PortfolioResult | None = None
    generation: PlanGeneration | None = None
    correlation_sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    bundle: PortfolioBundle | None = None
    tick: TickRecord | None = None
    success_ms: float | None = None
    ticks: int = 0
