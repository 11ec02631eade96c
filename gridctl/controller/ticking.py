"""What one tick would do, computed from its inputs alone: the tick and the dry run share it.

``compute_tick`` is the controller's decision for one instant — retirement
tombstones for removed profiles, pending work overlaid on the observation, the
portfolio plan, and the reconciler's actions for the mode in force — with no
I/O: the controller gathers ``TickInputs`` (from its store, registry and demand
book), calls this, then persists and issues what came out. A server-side dry
run gathers the same inputs for a candidate desired state and stops after this
call, so ``gridctl plan --against URL`` shows exactly what the next tick would
enqueue. The offline ``--against SNAPSHOT.json`` path calls it with an empty
memory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gridctl.controller.demandbook import portfolio_inputs
from gridctl.controller.overlays import with_pending_work
from gridctl.demand import DemandPicture
from gridctl.domain import DesiredState, FleetSnapshot, Mode, ModelDemand, ModelProfile, Plan
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.reconcile import (
    PendingAction,
    ReconcileResult,
    StartupEstimate,
    newly_retired,
    reconcile,
    retire_profiles,
)
from gridctl.reconcile.records import ControllerMemory, HistoryEntry


@dataclass(frozen=True)
class TickInputs:
    """Everything one tick reads. ``observed`` carries the demand forecast already;
    ``previous_profiles`` is what the last tick held (None before the first tick)."""

    now: float
    desired: DesiredState
    observed: FleetSnapshot
    mode: Mode
    memory: ControllerMemory = field(default_factory=ControllerMemory)
    previous_profiles: Mapping[str, ModelProfile] | None = None
    pending: tuple[PendingAction, ...] = ()
    history: tuple[HistoryEntry, ...] = ()
    picture: DemandPicture | None = None
    startup: Mapping[tuple[str, str], StartupEstimate] = field(default_factory=dict)
    approved: frozenset[str] = frozenset()


@dataclass(frozen=True)
class TickOutcome:
    """What the tick decided. ``retired`` are the models whose profile this tick removed
    (their managed copies drain and unload); ``snapshot`` is what was planned on."""

    plan: Plan
    result: ReconcileResult
    snapshot: FleetSnapshot
    portfolio: PortfolioResult
    retired: tuple[str, ...]
    tombstoned: tuple[str, ...]

    @property
    def enqueued_ids(self) -> tuple[str, ...]:
        return tuple(p.action_id for p in self.result.enqueue)


def compute_tick(inputs: TickInputs) -> TickOutcome:
    """Plan and reconcile once on ``inputs``; deterministic, no side effects."""
    desired, now = inputs.desired, inputs.now
    profiles = {p.name: p for p in desired.profiles}
    memory = inputs.memory
    retired: tuple[str, ...] = ()
    if inputs.previous_profiles is not None:
        tombstones = retire_profiles(
            memory.tombstones, dict(inputs.previous_profiles), profiles, now
        )
        retired = tuple(sorted(newly_retired(memory.tombstones, tombstones)))
        memory = replace(memory, tombstones=tombstones)
    snapshot = with_pending_work(inputs.observed, inputs.pending, now)
    # with no active unbound workload this is exactly plan_placement(snapshot)
    portfolio = plan_portfolio(portfolio_inputs(desired, snapshot, inputs.picture))
    plan, snapshot = portfolio.plan, replace(snapshot, demand=portfolio.demand)
    result = reconcile(
        plan,
        snapshot,
        profiles,
        desired.policy,
        inputs.mode,
        inputs.pending,
        inputs.history,
        now,
        memory=memory,
        startup=inputs.startup,
        approved=inputs.approved,
    )
    tombstoned = tuple(sorted(t.model_id for t in memory.tombstones))
    return TickOutcome(plan, result, snapshot, portfolio, retired, tombstoned)


def planned_snapshot(inputs: TickInputs, demand: tuple[ModelDemand, ...]) -> FleetSnapshot:
    """The snapshot ``compute_tick`` planned on, rebuilt from its inputs and the demand the
    portfolio settled on (a tick computed elsewhere sends back only the decision)."""
    return replace(with_pending_work(inputs.observed, inputs.pending, inputs.now), demand=demand)


__all__ = ["TickInputs", "TickOutcome", "compute_tick", "planned_snapshot"]
