"""The lab's controller: production's tick and delivery gate on a simulated clock.

Per tick this gathers what ``gridctl.controller.control.Controller`` gathers,
from the simulated fleet instead of a registry and store: simulated router
observations folded into the production learners (``observation_features``),
their picture and gated direct forecast (``learned_forecast``) combined the way
the controller combines them (``tick_demand``), the pending and finished work of
its action book, the reconciler's memory and the profiles of the last tick (for
retirement tombstones). Then it calls the same ``compute_tick`` in automatic
mode, with the strategy plugged in as the decision function, and delivers
through the same ``delivery_gate``: its READY residencies are the routes, each
leased from the host's last simulated heartbeat. Strategies change only what
is planned, never the physics, the arrivals or the delivery rule.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from gridctl.demand import DemandLearner, DemandPicture
from gridctl.demand.intake import RequestObservation, learned_forecast, observation_features
from gridctl.domain import (
    Action,
    ActionKind,
    DesiredState,
    FleetSnapshot,
    HostSnapshot,
    Mode,
    ModelDemand,
    ModelProfile,
    Plan,
    Receipt,
    ReceiptStatus,
    ResidencyState,
)
from gridctl.domain.fleet import planned_last_use
from gridctl.lab.actionbook import ActionBook
from gridctl.lab.strategies import (
    Strategy,
    greedy_decision,
    reactive_picture,
    reactive_policy,
    static_workloads,
)
from gridctl.planner import PortfolioResult
from gridctl.reconcile import (
    ControllerMemory,
    PendingAction,
    PlanGeneration,
    ReconcileResult,
    command_to_json,
    delivery_order,
)
from gridctl.tick import (
    Admit,
    Decide,
    Decision,
    DeliveryFacts,
    TickInputs,
    TickOutcome,
    compute_tick,
    decide_by_portfolio,
    delivery_gate,
    routes_from_hosts,
    tick_demand,
)
from gridctl.tick.learned import learned_rows, with_learned
from gridctl.tick.timings import (
    LearnedTiming,
    TimingKey,
    learn,
    startup_estimates,
    timing_key,
    valid_report,
)

CONTROLLER_ID = "lab-controller"
TERM = 1
EPOCH = "1ab"


@dataclass
class LabTick:
    """One lab tick: the production tick's outcome, and the safety audit of its actions."""

    outcome: TickOutcome
    unsafe: list[str] = field(default_factory=list)

    @property
    def plan(self) -> Plan:
        return self.outcome.plan

    @property
    def result(self) -> ReconcileResult:
        return self.outcome.result

    @property
    def snapshot(self) -> FleetSnapshot:
        return self.outcome.snapshot

    @property
    def portfolio(self) -> PortfolioResult | None:
        return self.outcome.portfolio

    @property
    def mapping(self) -> tuple[tuple[str, str | None], ...]:
        return self.outcome.mapping


def _no_cache_work(entry: PendingAction) -> bool:
    """Reactive control issues no predictive cache-only prefetch."""
    return not (entry.action.kind is ActionKind.LOAD and entry.action.memory_mb == 0)


class LabController:
    def __init__(
        self,
        desired: DesiredState,
        strategy: Strategy,
        mix: Mapping[str, float],
        *,
        epoch: str = "",
    ):
        self.strategy = strategy
        # the controller state epoch new action ids carry (``derive_action_id``); a lab
        # day has no state to start over, and the empty epoch gives the ids of none
        self.id_epoch = epoch
        self.learner = DemandLearner(desired.policy, desired.catalog)
        self.book = ActionBook()
        self.memory = ControllerMemory()
        self.sequence = 0
        self.generation: PlanGeneration | None = None
        self.mix = dict(mix)
        self.fixed: Decision | None = None
        self.last: TickOutcome | None = None
        self.previous: dict[str, ModelProfile] | None = None
        self.timings: dict[TimingKey, LearnedTiming] = {}  # learned as the store learns them
        self.session_keys: dict[str, str] = {}  # router session hash -> the learner's key
        self.last_used: dict[str, float] = {}  # the router's per-model last-use watermark
        self.commit(desired)

    def commit(self, desired: DesiredState) -> None:
        """A new desired state, as a commit the controller's watcher took."""
        self.desired = desired
        self.policy = desired.policy
        self.profiles = {p.name: p for p in desired.profiles}
        artifacts = {p.name: p.artifact.sha256 for p in desired.profiles}
        self.learner.retarget(desired.policy, desired.catalog, artifacts)

    # -- intake --------------------------------------------------------------------

    def acknowledge(self, receipt: Receipt, now: float) -> None:
        """One node receipt: judged by the action book; a success teaches its timing."""
        entry = self.book.acknowledge(receipt, now)
        if entry is None or entry.status is not ReceiptStatus.SUCCEEDED:
            return
        key = timing_key(
            entry.kind,
            entry.host_id,
            entry.model_id,
            entry.artifact_sha256,
            receipt.artifact_fetched,
        )
        if key is not None and valid_report(receipt.duration_seconds, self.policy):
            seconds = float(receipt.duration_seconds or 0.0)
            self.timings[key] = learn(self.timings.get(key), seconds, now, self.policy)

    def observe(self, observation: RequestObservation) -> None:
        """One simulated router observation, as the controller's demand book takes it."""
        self.learner.observe(observation_features(observation))
        self._used((observation,))

    def observe_all(self, observations: Sequence[RequestObservation]) -> None:
        """A minute of router observations, in order, as ``observe`` takes each one."""
        keys = self.session_keys
        self.learner.observe_all([observation_features(o, keys) for o in observations])
        self._used(observations)

    def _used(self, observations: Iterable[RequestObservation]) -> None:
        """The router's model-wide last-use watermark: every request a replica took
        (served or failed, on a named host; a refusal reached none) marks its model
        used, as the router's claim of a route does (``Registry.request_started``)."""
        marks = self.last_used
        for o in observations:
            model = o.served_model
            if (
                model is not None
                and o.host_id is not None
                and o.outcome != "rejected"
                and o.t > marks.get(model, 0.0)
            ):
                marks[model] = o.t

    def forecast(self, now: float) -> tuple[DemandPicture, tuple[ModelDemand, ...]]:
        """The learners' picture and the demand the planner gets, combined as the controller
        combines them (predictive inputs removed for reactive; the lab's engines queue
        nothing)."""
        picture, direct = learned_forecast(self.learner, now, self.policy)
        if self.strategy is Strategy.REACTIVE:
            picture = reactive_picture(picture)
        return picture, tick_demand(direct, picture, {}, self.profiles)

    # -- the strategies as decision functions --------------------------------------

    def _decide(self, minute_counts: Mapping[str, int], named_counts: Mapping[str, int]) -> Decide:
        if self.strategy is Strategy.SMART:
            return decide_by_portfolio
        if self.strategy is Strategy.REACTIVE:

            def reactive(
                desired: DesiredState, snapshot: FleetSnapshot, picture: DemandPicture | None
            ) -> Decision:
                lookless = replace(desired, policy=reactive_policy(desired.policy))
                return decide_by_portfolio(lookless, snapshot, picture)

            return reactive
        if self.strategy is Strategy.STATIC:
            return self._static

        def greedy(
            desired: DesiredState, snapshot: FleetSnapshot, picture: DemandPicture | None
        ) -> Decision:
            return greedy_decision(
                self.profiles, snapshot, self.policy, minute_counts, named_counts
            )

        return greedy

    def _static(
        self, desired: DesiredState, snapshot: FleetSnapshot, picture: DemandPicture | None
    ) -> Decision:
        """The population's average mix, planned once on the first tick's fleet."""
        if self.fixed is None:
            window = self.policy.demand_bucket_seconds * self.policy.demand_window_buckets / 60.0
            base = picture if picture is not None else self.learner.picture(snapshot.now)
            mixed = replace(
                base,
                models=(),
                workloads=static_workloads(self.mix, window),
                transitions=(),
                relations=(),
                outcomes=(),
            )
            self.fixed = decide_by_portfolio(desired, replace(snapshot, demand=()), mixed)
        return replace(self.fixed, portfolio=None)

    # -- the tick ------------------------------------------------------------------

    def tick(
        self,
        now: float,
        hosts: tuple[HostSnapshot, ...],
        minute_counts: Mapping[str, int],
        named_counts: Mapping[str, int],
    ) -> LabTick:
        picture, forecast = self.forecast(now)
        startup = startup_estimates(self.timings, self.profiles, now, self.policy)
        hosts = self._with_last_use(hosts)
        observed = FleetSnapshot(now=now, hosts=hosts, demand=forecast)
        inputs = TickInputs(
            now=now,
            desired=self.desired,
            observed=with_learned(observed, learned_rows(self.profiles, startup, {})),
            mode=Mode.AUTOMATIC,
            memory=self.memory,
            previous_profiles=self.previous,
            pending=self.book.pending_list(),
            history=self.book.history_list(),
            picture=picture,
            startup=startup,
            epoch=self.id_epoch,
        )
        admit: Admit | None = _no_cache_work if self.strategy is Strategy.REACTIVE else None
        outcome = compute_tick(inputs, self._decide(minute_counts, named_counts), admit)
        if self.strategy is Strategy.STATIC and self.last is None:
            outcome = replace(outcome, portfolio=self.fixed.portfolio if self.fixed else None)
        for model in outcome.retired:  # as the controller clears a retired model's demand
            self.learner.direct.pop(model, None)
        self.book.apply_tick(outcome.result.enqueue, outcome.result.cancellations, now)
        self.memory = replace(outcome.result.memory, grace=None)
        self.previous = dict(self.profiles)
        self.sequence += 1
        self.generation = PlanGeneration(
            EPOCH, self.sequence, outcome.plan.input_digest[:16] or "0"
        )
        self.last = outcome
        unsafe = last_replica_removals(outcome.result.executable, outcome.plan, hosts)
        return LabTick(outcome, unsafe)

    def _with_last_use(self, hosts: tuple[HostSnapshot, ...]) -> tuple[HostSnapshot, ...]:
        """The hosts as the controller's registry plans them: each residency's last use
        raised to its model's watermark (``planned_last_use``)."""
        marks = self.last_used
        if not marks:
            return hosts
        return tuple(
            replace(
                h,
                residencies=tuple(
                    replace(r, last_used_at=planned_last_use(r.last_used_at, marks[r.model_id]))
                    if r.model_id in marks
                    else r
                    for r in h.residencies
                ),
            )
            if any(r.model_id in marks for r in h.residencies)
            else h
            for h in hosts
        )

    # -- delivery ------------------------------------------------------------------

    def facts(self, now: float, hosts: Mapping[str, HostSnapshot]) -> DeliveryFacts:
        """The gate's facts from the simulated fleet: READY residencies are the routes."""
        return DeliveryFacts(
            now=now,
            mode=Mode.AUTOMATIC,
            issuing=self.generation is not None,
            plan=self.last.plan if self.last else None,
            min_route_lease_seconds=self.policy.destructive_min_route_lease_seconds,
            routes=routes_from_hosts(hosts.values(), now, self.policy.route_lease_seconds),
            hosts=hosts,
            profiles=self.profiles,
        )

    def deliverable(
        self, now: float, hosts: Mapping[str, HostSnapshot], host_id: str | None = None
    ) -> list[tuple[Action, dict[str, object]]]:
        """Executable pending commands (of ``host_id``, default every host) the delivery
        gate lets through and that were not delivered before, newly marked delivered."""
        facts = self.facts(now, hosts)
        out: list[tuple[Action, dict[str, object]]] = []
        for held in delivery_order(self.book.pending_list()):
            if held.delivered or (host_id is not None and held.action.host_id != host_id):
                continue
            if not delivery_gate(held, facts).deliver:
                continue
            command = command_to_json(
                held.action,
                plan_generation=str(self.generation),
                controller_term=TERM,
                controller_id=CONTROLLER_ID,
                controller_lease_expires_at=now + self.policy.controller_lease_seconds,
            )
            out.append((held.action, command))
        self.book.mark_delivered([a.action_id for a, _ in out], now)
        return out


def _ready_hosts(model_id: str, hosts: tuple[HostSnapshot, ...]) -> set[str]:
    return {
        h.host_id
        for h in hosts
        for r in h.residencies
        if r.model_id == model_id and r.state is ResidencyState.READY
    }


def last_replica_removals(
    actions: tuple[Action, ...], plan: Plan, hosts: tuple[HostSnapshot, ...]
) -> list[str]:
    """The safety audit of a tick's output (not a delivery rule): executable drains that
    would take a wanted model's last ready replica. An explicit higher-priority
    preemption the plan names is the spec's exception."""
    found: list[str] = []
    preempted = {(p.model_id, p.host_id) for p in plan.preemptions}
    for action in actions:
        if action.kind is not ActionKind.DRAIN or (action.model_id, action.host_id) in preempted:
            continue
        if dict(plan.targets).get(action.model_id, 0) <= 0:
            continue
        ready = _ready_hosts(action.model_id, hosts)
        if ready and not (ready - {action.host_id}):
            found.append(f"drain of the last ready {action.model_id} on {action.host_id}")
    return found
