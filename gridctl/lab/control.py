"""The lab's controller: the production tick on a simulated clock.

Per tick this runs what ``gridctl.controller.control.Controller`` runs, through
the same pure entry points: simulated router observations folded into the
production learners (``observation_features``), the learners' picture and
their gated direct forecast (``learned_forecast``) with correlation merged
in, pending work overlaid on the fleet snapshot, the portfolio (which calls
the placement planner), and the reconciler in automatic mode; then delivery
of executable commands, fenced with a term and plan generation, holding back
a destructive command while too few other ready replicas remain (the
controller's delivery check). Strategies change only
what is planned, never the physics or the arrivals.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from gridctl.demand import DemandLearner, DemandPicture
from gridctl.demand.direct import with_correlation
from gridctl.demand.intake import RequestObservation, learned_forecast, observation_features
from gridctl.domain import (
    Action,
    ActionKind,
    DesiredState,
    FleetSnapshot,
    HostSnapshot,
    Mode,
    ModelDemand,
    Plan,
    ResidencyState,
)
from gridctl.lab.actionbook import ActionBook
from gridctl.lab.strategies import (
    Decision,
    Strategy,
    greedy_decision,
    reactive_picture,
    reactive_policy,
    static_workloads,
)
from gridctl.planner import PortfolioResult, plan_portfolio
from gridctl.planner.portfolio_inputs import portfolio_inputs
from gridctl.reconcile import (
    ControllerMemory,
    PlanGeneration,
    ReconcileResult,
    command_to_json,
    delivery_order,
    reconcile,
)
from gridctl.reconcile.overlays import with_pending_work

CONTROLLER_ID = "lab-controller"
TERM = 1
EPOCH = "1ab"


@dataclass
class TickOutcome:
    decision: Decision
    result: ReconcileResult
    portfolio: PortfolioResult | None
    snapshot: FleetSnapshot  # what the plan was reconciled against (pending work overlaid)
    unsafe: list[str] = field(default_factory=list)


class LabController:
    def __init__(self, desired: DesiredState, strategy: Strategy, mix: Mapping[str, float]):
        self.desired = desired
        self.strategy = strategy
        self.policy = desired.policy
        self.profiles = {p.name: p for p in desired.profiles}
        self.learner = DemandLearner(desired.policy, desired.catalog)
        self.learner.configure({p.name: p.artifact.sha256 for p in desired.profiles})
        self.book = ActionBook()
        self.memory = ControllerMemory()
        self.sequence = 0
        self.generation: PlanGeneration | None = None
        self.mix = dict(mix)
        self.fixed: Decision | None = None
        self.last: Decision | None = None

    # -- intake --------------------------------------------------------------------

    def observe(self, observation: RequestObservation) -> None:
        """One simulated router observation, as the controller's demand book takes it."""
        self.learner.observe(observation_features(observation))

    def forecast(self, now: float) -> tuple[DemandPicture, tuple[ModelDemand, ...]]:
        """The learners' picture and the demand the planner gets: their gated direct
        forecast with correlation merged in (predictive inputs removed for reactive)."""
        picture, direct = learned_forecast(self.learner, now, self.policy)
        if self.strategy is Strategy.REACTIVE:
            picture = reactive_picture(picture)
        return picture, with_correlation(direct, picture, self.profiles)

    # -- the tick ------------------------------------------------------------------

    def _smart(
        self, now: float, hosts: tuple[HostSnapshot, ...]
    ) -> tuple[Decision, PortfolioResult]:
        desired = self.desired
        picture, forecast = self.forecast(now)
        if self.strategy is Strategy.REACTIVE:
            desired = replace(desired, policy=reactive_policy(desired.policy))
        snapshot = with_pending_work(
            FleetSnapshot(now=now, hosts=hosts, demand=forecast), self.book.pending_list(), now
        )
        portfolio = plan_portfolio(portfolio_inputs(desired, snapshot, picture))
        return Decision(portfolio.plan, portfolio.demand, portfolio.mapping), portfolio

    def _static(
        self, now: float, hosts: tuple[HostSnapshot, ...]
    ) -> tuple[Decision, PortfolioResult | None]:
        if self.fixed is not None:
            return self.fixed, None
        window = self.policy.demand_bucket_seconds * self.policy.demand_window_buckets / 60.0
        picture = self.learner.picture(now)
        picture = replace(
            picture,
            models=(),
            workloads=static_workloads(self.mix, window),
            transitions=(),
            relations=(),
            outcomes=(),
        )
        snapshot = FleetSnapshot(now=now, hosts=hosts, demand=())
        portfolio = plan_portfolio(portfolio_inputs(self.desired, snapshot, picture))
        self.fixed = Decision(portfolio.plan, portfolio.demand, portfolio.mapping)
        return self.fixed, portfolio

    def tick(
        self,
        now: float,
        hosts: tuple[HostSnapshot, ...],
        minute_counts: Mapping[str, int],
        named_counts: Mapping[str, int],
    ) -> TickOutcome:
        portfolio: PortfolioResult | None = None
        if self.strategy in (Strategy.SMART, Strategy.REACTIVE):
            decision, portfolio = self._smart(now, hosts)
        elif self.strategy is Strategy.STATIC:
            decision, portfolio = self._static(now, hosts)
        else:
            snapshot = with_pending_work(
                FleetSnapshot(now=now, hosts=hosts), self.book.pending_list(), now
            )
            decision = greedy_decision(
                self.profiles, snapshot, self.policy, minute_counts, named_counts
            )
        snapshot = with_pending_work(
            FleetSnapshot(now=now, hosts=hosts, demand=decision.demand),
            self.book.pending_list(),
            now,
        )
        result = reconcile(
            decision.plan,
            snapshot,
            self.profiles,
            self.policy,
            Mode.AUTOMATIC,
            self.book.pending_list(),
            self.book.history_list(),
            now,
            memory=self.memory,
        )
        enqueue = result.enqueue
        if self.strategy is Strategy.REACTIVE:  # no predictive cache work
            enqueue = tuple(
                e
                for e in enqueue
                if not (e.action.kind is ActionKind.LOAD and e.action.memory_mb == 0)
            )
        self.book.apply_tick(enqueue, result.cancellations, now)
        self.memory = result.memory
        self.sequence += 1
        self.generation = PlanGeneration(
            EPOCH, self.sequence, decision.plan.input_digest[:16] or "0"
        )
        self.last = decision
        unsafe = last_replica_removals(result.executable, decision.plan, hosts)
        return TickOutcome(decision, result, portfolio, snapshot, unsafe)

    # -- delivery ------------------------------------------------------------------

    def deliverable(
        self, now: float, hosts: Mapping[str, HostSnapshot]
    ) -> list[tuple[Action, dict[str, object]]]:
        """Executable pending commands, newly marked delivered, as wire commands."""
        if self.generation is None:
            return []
        plan = self.last.plan if self.last else None
        out: list[tuple[Action, dict[str, object]]] = []
        for held in delivery_order(self.book.pending_list()):
            action = held.action
            if held.delivered or not action.executable:
                continue
            if action.not_before is not None and action.not_before > now:
                continue
            if action.kind.destructive and plan is not None and _holds_last(action, plan, hosts):
                continue
            command = command_to_json(
                action,
                plan_generation=str(self.generation),
                controller_term=TERM,
                controller_id=CONTROLLER_ID,
                controller_lease_expires_at=now + self.policy.controller_lease_seconds,
            )
            out.append((action, command))
        self.book.mark_delivered([a.action_id for a, _ in out], now)
        return out


def _ready_hosts(
    model_id: str, hosts: Mapping[str, HostSnapshot] | tuple[HostSnapshot, ...]
) -> set[str]:
    values = hosts.values() if isinstance(hosts, Mapping) else hosts
    return {
        h.host_id
        for h in values
        for r in h.residencies
        if r.model_id == model_id and r.state is ResidencyState.READY
    }


def _holds_last(action: Action, plan: Plan, hosts: Mapping[str, HostSnapshot]) -> bool:
    """The controller's delivery check: a serving replica is not removed while fewer
    other ready replicas remain than the plan's target, unless the plan names it an
    explicit preemption victim (the victim drains first, invariant 3)."""
    target = dict(plan.targets).get(action.model_id, 0)
    if target <= 0 or action.kind is ActionKind.EVICT or _preempted(action, plan):
        return False
    ready = _ready_hosts(action.model_id, hosts)
    if action.host_id not in ready:
        return False
    return len(ready - {action.host_id}) < target


def _preempted(action: Action, plan: Plan) -> bool:
    return any(
        p.model_id == action.model_id and p.host_id == action.host_id for p in plan.preemptions
    )


def last_replica_removals(
    actions: tuple[Action, ...], plan: Plan, hosts: tuple[HostSnapshot, ...]
) -> list[str]:
    """Safety: executable drains that would take a wanted model's last ready replica
    (an explicit higher-priority preemption the plan names is the spec's exception)."""
    found: list[str] = []
    for action in actions:
        if action.kind is not ActionKind.DRAIN or _preempted(action, plan):
            continue
        if dict(plan.targets).get(action.model_id, 0) <= 0:
            continue
        ready = _ready_hosts(action.model_id, hosts)
        if ready and not (ready - {action.host_id}):
            found.append(f"drain of the last ready {action.model_id} on {action.host_id}")
    return found


def demand_of(decision: Decision) -> dict[str, ModelDemand]:
    return {d.model_id: d for d in decision.demand}
