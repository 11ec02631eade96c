"""What one tick would do, computed from its inputs alone: the controller, the dry run and the
lab share it.

``compute_tick`` is the controller's decision for one instant — retirement
tombstones for removed profiles, pending work overlaid on the observation, the
decision (the portfolio plan by default), and the reconciler's actions for the
mode in force — with no I/O: the controller gathers ``TickInputs`` (from its
store, registry and demand book), calls this, then persists and issues what
came out. A server-side dry run gathers the same inputs for a candidate desired
state and stops after this call, so ``gridctl plan --against URL`` shows exactly
what the next tick would enqueue. The scenario lab gathers the same inputs from
its simulated fleet and plugs its comparison strategies in as ``decide``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from gridctl.domain import DesiredState, FleetSnapshot, Mode, ModelDemand, ModelProfile, Plan
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_inputs import portfolio_inputs
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.reconcile import (
    PendingAction,
    ReconcileResult,
    StartupEstimate,
    newly_retired,
    reconcile,
    retire_profiles,
)
from gridctl.reconcile.overlays import with_pending_work
from gridctl.reconcile.records import ControllerMemory, HistoryEntry

if TYPE_CHECKING:  # the demand learners are imported by the process that learns (a controller)
    from gridctl.demand import DemandPicture


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
    epoch: str = ""  # the controller state's, part of every new action id


@dataclass(frozen=True)
class Decision:
    """What a decision function chose for one tick: the plan, the demand it planned with,
    the unbound routing map, and the portfolio solve when one ran."""

    plan: Plan
    demand: tuple[ModelDemand, ...]
    mapping: tuple[tuple[str, str | None], ...]
    portfolio: PortfolioResult | None = None


# desired state, the observation with pending work overlaid, the learners' picture
Decide = Callable[[DesiredState, FleetSnapshot, "DemandPicture | None"], Decision]
# which enqueued actions a tick keeps (a comparison strategy may refuse some kinds of work)
Admit = Callable[[PendingAction], bool]


def decide_by_portfolio(
    desired: DesiredState, snapshot: FleetSnapshot, picture: DemandPicture | None
) -> Decision:
    """Production's decision: the portfolio (which calls the placement planner)."""
    portfolio = plan_portfolio(portfolio_inputs(desired, snapshot, picture))
    return Decision(portfolio.plan, portfolio.demand, portfolio.mapping, portfolio)


@dataclass(frozen=True)
class TickOutcome:
    """What the tick decided. ``retired`` are the models whose profile this tick removed
    (their managed copies drain and unload); ``snapshot`` is what was planned on."""

    plan: Plan
    result: ReconcileResult
    snapshot: FleetSnapshot
    portfolio: PortfolioResult | None
    retired: tuple[str, ...]
    tombstoned: tuple[str, ...]
    mapping: tuple[tuple[str, str | None], ...] = ()

    @property
    def enqueued_ids(self) -> tuple[str, ...]:
        return tuple(p.action_id for p in self.result.enqueue)


def compute_tick(
    inputs: TickInputs, decide: Decide = decide_by_portfolio, admit: Admit | None = None
) -> TickOutcome:
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
    # with no active unbound workload the portfolio is exactly plan_placement(snapshot)
    decision = decide(desired, snapshot, inputs.picture)
    plan, snapshot = decision.plan, replace(snapshot, demand=decision.demand)
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
        epoch=inputs.epoch,
    )
    if admit is not None:
        result = replace(result, enqueue=tuple(e for e in result.enqueue if admit(e)))
    tombstoned = tuple(sorted(t.model_id for t in memory.tombstones))
    return TickOutcome(
        plan, result, snapshot, decision.portfolio, retired, tombstoned, decision.mapping
    )


def tick_demand(
    direct: Iterable[ModelDemand],
    picture: DemandPicture,
    queued: Mapping[str, int],
    profiles: Mapping[str, ModelProfile],
) -> tuple[ModelDemand, ...]:
    """The demand a tick plans with: the learners' gated direct forecast, correlation
    from their picture merged in, and the work queued in the engines themselves."""
    from gridctl.demand.direct import with_correlation, with_queued_work

    return with_queued_work(with_correlation(tuple(direct), picture, profiles), queued, profiles)


def planned_snapshot(inputs: TickInputs, demand: tuple[ModelDemand, ...]) -> FleetSnapshot:
    """The snapshot ``compute_tick`` planned on, rebuilt from its inputs and the demand the
    decision settled on (a tick computed elsewhere sends back only the decision)."""
    return replace(with_pending_work(inputs.observed, inputs.pending, inputs.now), demand=demand)


__all__ = [
    "Admit",
    "Decide",
    "Decision",
    "TickInputs",
    "TickOutcome",
    "compute_tick",
    "decide_by_portfolio",
    "planned_snapshot",
    "tick_demand",
]
