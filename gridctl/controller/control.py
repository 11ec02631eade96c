"""The controller: intake of heartbeats and acknowledgements, the tick, command delivery.

Everything with a decision in it is delegated to the pure core: the planner
decides placement, the reconciler decides actions. This module keeps the
state between ticks (pending actions, history, the reconciler's memory),
applies acknowledgements, and hands executable commands to the node they are
for, fenced with the authority term and plan generation.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from gridctl.controller.authority import Grant
from gridctl.controller.demandbook import DemandBook, portfolio_inputs, with_correlation
from gridctl.controller.desired import DesiredProvider
from gridctl.controller.learned import learned_rows, with_learned
from gridctl.controller.registry import Registry
from gridctl.controller.store import ControllerStore
from gridctl.controller.stores import Lease
from gridctl.controller.ticking import TickInputs, TickOutcome, compute_tick
from gridctl.controller.timings import TimingKind, estimate
from gridctl.demand.direct import with_queued_work
from gridctl.demand.rows import RowKey
from gridctl.domain import (
    Action,
    ActionKind,
    ControllerPolicy,
    DesiredState,
    FleetSnapshot,
    HostSnapshot,
    Mode,
    ModelProfile,
    Plan,
    Receipt,
    ReceiptStatus,
)
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.reconcile import (
    PendingAction,
    PlanGeneration,
    ReconcileResult,
    StartupEstimate,
    command_to_json,
    delivery_order,
)
from gridctl.reconcile.caching import eviction_problem
from gridctl.reconcile.records import RestartGrace

log = logging.getLogger(__name__)
MAX_HISTORY = 2000
MAX_EVENTS = 500
STATUS_SECONDS = 1.0  # the longest a cached status document is served
APPLIED_PLAN_KEY = "applied_plan"  # store override: a saved plan applied in recommend mode
CLOCK_STEP_TOLERANCE_SECONDS = 5.0  # smaller differences are ordinary skew between writers


@dataclass
class ModeOverride:
    mode: Mode
    reason: str
    set_at: float
    source: str = "operator"


@dataclass
class Authority:
    """Who may issue executable commands: kept current from the authority lease."""

    controller_id: str
    term: int = 0
    holds: bool = False
    lease_expires_at: float | None = None


@dataclass
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


class Controller:
    """One controller process's brain; thread-safe. HTTP lives in ``app.py``.

    The store holds everything that must survive a restart (pending and finished
    actions, the reconciler's memory, the mode override, plan generations,
    learned timings, demand watermarks); the rest is rebuilt from heartbeats.
    """

    def __init__(
        self,
        *,
        desired: DesiredProvider,
        registry: Registry,
        store: ControllerStore,
        clock: Callable[[], float] = time.time,
        lease: Lease | None = None,
        controller_id: str | None = None,
        warnings: list[str] | None = None,
        demand: DemandBook | None = None,
    ) -> None:
        self.desired = desired
        self.registry = registry
        self.store = store
        self.clock = clock
        self.lease = lease
        self.authority = Authority(
            controller_id=lease.controller_id if lease else controller_id or secrets.token_hex(8)
        )
        self.warnings: list[str] = list(warnings or [])
        self.demand = demand or DemandBook()
        self.started_at = clock()
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._renew_lock = threading.Lock()
        self._tick_done = threading.Condition(self._lock)
        self.wake = threading.Event()
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        # "success_safety": the safety revision the last successful tick planned from
        self.revisions = {"dirty": 0, "processed": 0, "success": 0, "safety": 0}
        self.revisions["success_safety"] = -1
        # the latest revision that changed something a tick reads; later revisions that
        # changed nothing are covered by the tick that covered it (see ``note_input``)
        self._semantic = 0
        self._retry = False  # the last tick failed: every input asks for another one
        self.counts = {"ticks": 0, "events": 0}  # what status_revision follows
        self._acked: set[str] = set()  # hosts whose next heartbeat is news to the reconciler
        # an unchanged heartbeat is covered by a tick planned at most this long before it
        # (the tick loop's period); older plans are re-made, as time moves their inputs
        self.cover_seconds = 2.0
        self._planned_at: float | None = None  # ``now`` of the last tick's inputs
        # what turns a tick's inputs into its decision: in this thread by default, in a
        # worker process when the service runs one (``tickworker.ProcessTicks``)
        self.compute: Callable[[TickInputs], TickOutcome] = compute_tick
        # called (from any thread) whenever the processed revision advances
        self.revision_listeners: list[Callable[[], None]] = []
        self._mode: tuple[Mode, str | None] | None = None  # effective mode, refreshed by ticks
        self.last_plan: Plan | None = None
        self.last_portfolio: PortfolioResult | None = None
        self.last_correlation_sources: dict[str, tuple[str, ...]] = {}
        self._portfolio_bundle: PortfolioBundle | None = None
        self.last_result: ReconcileResult | None = None
        self.last_snapshot: FleetSnapshot | None = None
        self.last_generation: PlanGeneration | None = None
        self.last_tick: TickRecord | None = None
        self.last_success_ms: float | None = None
        self.delivery_safety_error: str | None = None
        # markers a suppressed poll could not remove: {action_id: why} (shown in status)
        self.uncertain_markers: dict[str, str] = {}
        # called after every tick with its record (metrics); must not raise into the loop
        self.tick_observers: list[Callable[[TickRecord], None]] = []
        self._previous_profiles: dict[str, ModelProfile] | None = None
        # restored commands get the bounded membership-recovery grace (in memory only)
        self._grace: RestartGrace | None = (
            RestartGrace(restarted_at=self.started_at) if store.pending() else None
        )
        # the latest time this controller has seen or recorded (None: read from the store)
        self._clock_high: float | None = None
        # hosts with pending actions (a superset between ticks: acks only remove some), so
        # a poll of any other host is answered without reading the store
        self._pending_hosts = frozenset(p.action.host_id for p in store.pending())
        # outcome evidence survives a restart; the tick persists what changed
        self._persisted_evidence = store.evidence()
        self.demand.restore_evidence(self._persisted_evidence)
        # so do the demand series and affinity sequences, within their windows
        self._persisted_demand: dict[RowKey, str] = {}
        self._persisted_demand_revision: int | None = None
        self._restore_demand()
        self.registry.restore_watermarks(
            {m: used for m, (used, _peak) in store.watermarks().items() if used is not None}
        )
        self.renew_authority()

    # -- small helpers -------------------------------------------------------------

    def event(self, event: str, **fields: Any) -> None:
        row = {"at": self.clock(), "event": event, "host_id": None, "model_id": None}
        row.update(fields)
        with self._lock:
            self.events.append(row)
            self.counts["events"] += 1

    def mark_dirty(self, *, safety: bool = False) -> int:
        return self.note_input(semantic=True, safety=safety)

    def note_demand(self) -> int:
        """A router observation: demand the next tick plans, which wakes the tick loop but
        holds back no command poll. A poll is answered from the last successful tick (as
        for an unchanged heartbeat); the tick it woke plans the new demand, and its
        commands go out on the polls after it. A burst of requests therefore never makes
        the whole fleet's polls wait for a tick."""
        with self._lock:
            self.revisions["dirty"] += 1
            revision = self.revisions["dirty"]
            self._cover_unchanged()
        self.wake.set()
        self._announce()
        return revision

    def note_input(self, *, semantic: bool, safety: bool = False) -> int:
        """Advance the causal revision for one input and return it.

        A ``semantic`` input (one that changes something a tick reads) dirties the plan
        and wakes the tick loop; an input that changes nothing is covered at once by
        the tick that covered the last semantic change, so a fleet of unchanged
        heartbeats neither runs ticks back to back nor waits for one.
        """
        with self._lock:
            self.revisions["dirty"] += 1
            if safety:
                self.revisions["safety"] += 1
            revision = self.revisions["dirty"]
            # after a failed tick every input asks for another one (an unchanged input
            # while a tick is pending is covered when that tick ends: it must not ask
            # for one more, or a busy fleet would keep ticks running back to back)
            semantic = semantic or safety or self._retry
            if semantic:
                self._semantic = revision
            else:
                self._cover_unchanged()
        if semantic:
            self.wake.set()
        else:
            self._announce()
        return revision

    def _cover_unchanged(self) -> None:
        """Under the lock: revisions after the last semantic one are as processed (and as
        successful) as it is."""
        latest = self.revisions["dirty"]
        if self._semantic <= self.revisions["processed"]:
            self.revisions["processed"] = latest
        if self._semantic <= self.revisions["success"]:
            self.revisions["success"] = latest
        self._tick_done.notify_all()

    def _announce(self) -> None:
        for listener in list(self.revision_listeners):
            try:
                listener()
            except Exception:  # a listener must never break intake or the tick
                log.exception("revision listener failed")

    def status_revision(self) -> tuple[object, ...]:
        """What the status document depends on: the last semantic input, the safety and
        telemetry revisions, the last tick, the latest event, and the clock's second
        (a status is never more than a second old)."""
        with self._lock:
            return (
                int(self.clock() // STATUS_SECONDS),
                self.demand.revision,
                self._semantic,
                self.revisions["safety"],
                self.counts["ticks"],
                self.counts["events"],
                len(self.uncertain_markers),
                self.delivery_safety_error,
            )

    def tick_covered(self, revision: int) -> bool | None:
        """Without waiting: None while no tick has processed ``revision``, else whether a
        successful one covered it (``wait_for_tick``'s answer)."""
        with self._lock:
            if self.revisions["processed"] < revision:
                return None
            return self.revisions["success"] >= revision

    def current_desired(self) -> DesiredState | None:
        return self.desired.current

    def policy(self) -> ControllerPolicy:
        current = self.desired.current
        return current.policy if current else ControllerPolicy()

    def all_warnings(self) -> list[str]:
        found = list(self.store.warnings) + self.warnings
        if self.lease is not None:
            found += self.lease.warnings
        return found

    def renew_authority(self) -> None:
        """Renew or take the single-writer lease (without a state dir there is none)."""
        if self.lease is None:
            return
        with self._renew_lock:
            grant = self.lease.acquire()
            with self._lock:
                if grant is None:
                    if self.authority.holds:
                        self.event("authority_lost", message=self._lost_reason())
                    self.authority.holds = False
                    self.authority.lease_expires_at = None
                    return
                if not self.authority.holds or grant.term != self.authority.term:
                    self.event("authority_acquired", message=f"term {grant.term}")
                    if self._took_over(grant):
                        self._continue_from_store()
                self.authority.holds = True
                self.authority.term = grant.term
                self.authority.lease_expires_at = grant.expires_at
        self.store.note_term(grant.term)

    def _continue_from_store(self) -> None:
        """Taking over from another controller is a restart for what it left: restored
        commands get the bounded membership-recovery grace, and its outcome evidence
        (persisted each tick) replaces this process's copy of the same keys, as do its
        demand buckets and affinity sequences."""
        if self.store.pending():
            self._grace = RestartGrace(restarted_at=self.clock())
        persisted = self.store.evidence()
        self.demand.restore_evidence(persisted)
        self._persisted_evidence = persisted
        self._restore_demand(over=True)

    def _took_over(self, grant: Grant) -> bool:
        previous = grant.previous
        return previous is not None and previous.controller_id not in (
            "",
            self.authority.controller_id,
        )

    def _lost_reason(self) -> str:
        failed = self.lease.last_error if self.lease is not None else None
        return f"lease renewal failed: {failed}" if failed else "another controller holds the lease"

    def holds_authority(self) -> bool:
        """Authority right now: the last renewal succeeded and the grant has not run out
        (by the lease's own clocks, read at this instant, not at the last tick)."""
        if not self.authority.holds:
            return False
        return self.lease is None or self.lease.current() is not None

    def is_follower(self) -> bool:
        """A lease exists and another controller (or nobody reachable) holds it: this
        process plans for status but never enqueues, delivers or persists decisions."""
        return self.lease is not None and not self.holds_authority()

    def leader_url(self) -> str | None:
        """Where the controller holding authority serves, when this one does not."""
        if self.lease is None or self.holds_authority():
            return None
        return self.lease.leader_address()

    def override(self) -> ModeOverride | None:
        mode = self.store.mode_override()
        if mode is None:
            return None
        info = self.store.overrides()
        detail = info.get("mode") or {}
        reason = info.get("mode_reason") or {}
        return ModeOverride(
            mode=mode,
            reason=str(reason.get("reason", "")) if isinstance(reason, dict) else "",
            set_at=float(reason.get("set_at", 0.0)) if isinstance(reason, dict) else 0.0,
            source=str(detail.get("source", "operator")) if isinstance(detail, dict) else "",
        )

    def cached_mode(self) -> tuple[Mode, str | None]:
        """``effective_mode()`` as of the last tick or mode change, with authority read now:
        what a heartbeat answer says, without a store read on the event loop."""
        cached = self._mode
        if cached is None:
            return self.effective_mode()
        mode, refused = cached
        if mode is Mode.AUTOMATIC and not self.holds_authority():
            return Mode.RECOMMEND, "automatic refused: another controller holds authority"
        return mode, refused

    def effective_mode(self, policy_mode: Mode | None = None) -> tuple[Mode, str | None]:
        """The mode in force (for git's ``policy_mode``, default the revision in force)
        and, when automatic was asked for but refused, why."""
        mode, refused = self.store.effective_mode(policy_mode or self.policy().mode)
        if policy_mode is None:
            self._mode = (mode, refused)
        if mode is Mode.AUTOMATIC and not self.holds_authority():
            if self.lease is not None and self.lease.last_error:
                return Mode.RECOMMEND, f"automatic refused: {self._lost_reason()}"
            return Mode.RECOMMEND, "automatic refused: another controller holds authority"
        return mode, refused

    # -- operator actions ----------------------------------------------------------

    def set_override(self, mode: Mode | None, reason: str = "") -> None:
        """Set (or clear, with None) the operator's mode; raises PermanentError when the
        store cannot honour automatic."""
        with self._lock:
            before, _ = self.effective_mode()
            self.store.set_mode_override(mode)
            if mode is None:
                self.event("mode_override_cleared", message=reason)
            else:
                self.store.set_override("mode_reason", {"reason": reason, "set_at": self.clock()})
                self.event("mode_override_set", message=f"{mode.value}: {reason}".strip(": "))
            after, _ = self.effective_mode()
            if before is Mode.AUTOMATIC and after is not Mode.AUTOMATIC:
                self.event("automatic_left", message="pending commands are cancelled")
        self.mark_dirty(safety=True)

    # -- intake --------------------------------------------------------------------

    def register(self, host_id: str, payload: Any) -> None:
        now = self.clock()
        self.registry.register(host_id, payload, now)
        self.event("host_registered", host_id=host_id)
        self.mark_dirty(safety=True)

    def heartbeat(self, host_id: str, payload: Any) -> int:
        """Apply a heartbeat; returns its causal revision."""
        now = self.clock()
        before = self.registry.host(host_id)
        record = self.registry.heartbeat(host_id, payload, now)
        changed = before is None or (
            before.state != record.state or before.residencies != record.residencies
        )
        acks = payload.get("acknowledgements", []) or []
        for ack in acks:
            self._apply_ack(ack, host_id)
        planned_at = self._planned_at
        stale = (
            before is None
            or now - before.last_heartbeat > self.policy().heartbeat_stale_seconds / 2
            or planned_at is None
            or abs(now - planned_at) > self.cover_seconds  # a clock step too
        )
        with self._lock:
            # the heartbeat after an acknowledgement is the observation that confirms it
            after_ack = host_id in self._acked
            if acks:
                self._acked.add(host_id)
            else:
                self._acked.discard(host_id)
        semantic = (
            changed
            or bool(acks)
            or after_ack
            or stale
            or self.registry.plans_differently(before, record, now)
        )
        return self.note_input(semantic=semantic, safety=changed)

    def _apply_ack(self, ack: dict[str, Any], host_id: str) -> None:
        duration = ack.get("duration_seconds")
        receipt = Receipt(
            action_id=str(ack["action_id"]),
            status=ReceiptStatus(ack["status"]),
            message=str(ack.get("message", ""))[:4096],
            duration_seconds=float(duration) if isinstance(duration, (int, float)) else None,
            artifact_fetched=bool(ack.get("artifact_fetched", False)),
            observed_at=self.clock(),  # controller receipt time fences observations
        )
        result = self.store.record_acknowledgement(receipt, self.policy(), host_id=host_id)
        if result is None or not result.decision.changed or result.entry is None:
            return
        entry = result.entry
        late = result.decision.outcome.value == "completed_late"
        self.event(
            f"{entry.kind.value}_{entry.status.value}",
            host_id=entry.host_id,
            model_id=entry.model_id,
            action_id=entry.action_id,
            message=("late: " if late else "") + receipt.message,
            duration_seconds=receipt.duration_seconds,
        )

    # -- the tick ------------------------------------------------------------------

    def tick(self) -> TickRecord:
        """Plan and reconcile once. Serialised; safe to call from any thread."""
        with self._tick_lock:
            started = time.monotonic()
            with self._lock:
                dirty = self.revisions["dirty"]
                safety = self.revisions["safety"]
            phases = PhaseTimer(started)
            try:
                self.renew_authority()
                phases.done("renew")
                self._tick_once(phases)
            except Exception as exc:  # a failed tick must not kill the loop
                log.exception("tick failed")
                record = TickRecord(
                    self.clock(),
                    (time.monotonic() - started) * 1000,
                    False,
                    f"{type(exc).__name__}: {exc}",
                    phases.spent,
                )
            else:
                record = TickRecord(
                    self.clock(), (time.monotonic() - started) * 1000, True, None, phases.spent
                )
            with self._lock:
                self.last_tick = record
                self.counts["ticks"] += 1
                self.revisions["processed"] = max(self.revisions["processed"], dirty)
                self._retry = not record.ok
                if record.ok:
                    self.revisions["success"] = max(self.revisions["success"], dirty)
                    self.revisions["success_safety"] = safety
                    self.last_success_ms = record.duration_ms
                self._cover_unchanged()
            self._announce()
            for observer in list(self.tick_observers):
                try:
                    observer(record)
                except Exception:  # an observer must never break the tick loop
                    log.exception("tick observer failed")
            return record

    def _startup_estimates(
        self, profiles: dict[str, ModelProfile], now: float, policy: ControllerPolicy
    ) -> dict[tuple[str, str], StartupEstimate]:
        """Learned load (cold fetch) and warm times per (host, model), priors otherwise."""
        learned = self.store.timings()
        result: dict[tuple[str, str], StartupEstimate] = {}
        for (host, model, artifact, kind), timing in learned.items():
            profile = profiles.get(model)
            if profile is None or artifact != (profile.artifact.sha256 or ""):
                continue  # a new checksum starts from the configured priors
            current = result.get(
                (host, model), StartupEstimate(profile.load_seconds, profile.warm_seconds)
            )
            if kind == TimingKind.TRANSFER.value:
                current = StartupEstimate(
                    estimate(profile.load_seconds, timing, now, policy), current.warm_seconds
                )
            elif kind == TimingKind.WARM.value:
                current = StartupEstimate(
                    current.load_seconds, estimate(profile.warm_seconds, timing, now, policy)
                )
            result[(host, model)] = current
        return result

    def gather(self, desired: DesiredState, now: float, *, preview: bool) -> TickInputs:
        """Everything a tick holding ``desired`` reads at ``now``.

        The real tick (``preview=False``) first points the demand book at ``desired``;
        a dry run (``preview=True``) reads the book through a copy, so gathering the
        inputs of a candidate desired state changes nothing.
        """
        profiles = {p.name: p for p in desired.profiles}
        mode, _ = self.effective_mode(desired.policy.mode)
        if preview:
            picture, direct = self.demand.preview(now, desired)
        else:
            self.demand.configure(profiles)
            self.demand.configure_learning(desired.policy, desired.catalog, desired.profiles)
            # learners copied under their lock, then planned on that copy: direct demand
            # from the book, correlated (inferred-only) and workload demand from the picture
            picture = self.demand.picture(now)
            direct = self.demand.forecast(now, desired.policy)
        forecast = with_queued_work(
            with_correlation(direct, picture, profiles), self.registry.queued_work(now), profiles
        )
        with self._lock:
            previous = self._previous_profiles
            grace = self._grace
        startup = self._startup_estimates(profiles, now, desired.policy)
        learned = learned_rows(profiles, startup, self.registry.speed_evidence())
        return TickInputs(
            now=now,
            desired=desired,
            observed=with_learned(self.registry.snapshot(now, forecast), learned),
            mode=mode,
            memory=replace(self.store.memory(), grace=grace),
            previous_profiles=previous,
            pending=self.store.pending(),
            history=self.store.history(limit=MAX_HISTORY),
            picture=picture,
            startup=startup,
            approved=self.approved_actions(desired, mode),
        )

    def dry_run(self, candidate: DesiredState | None = None) -> tuple[TickInputs, TickOutcome]:
        """What the next tick would do holding ``candidate`` (default: the revision in
        force) — the tick's own function on the tick's own inputs, persisting nothing."""
        with self._tick_lock:
            desired = candidate or self.desired.current
            if desired is None:
                raise RuntimeError("no valid desired state yet")
            inputs = self.gather(desired, self.clock(), preview=True)
            return inputs, self.compute(inputs)

    def approved_actions(self, desired: DesiredState, mode: Mode) -> frozenset[str]:
        """The action ids of the saved plan applied in recommend mode for ``desired``."""
        if mode is not Mode.RECOMMEND:
            return frozenset()
        applied = self.store.overrides().get(APPLIED_PLAN_KEY)
        if not isinstance(applied, dict) or applied.get("revision") != desired.revision:
            return frozenset()
        return frozenset(str(i) for i in applied.get("action_ids") or [])

    def _tick_once(self, phases: PhaseTimer) -> None:
        desired = self.desired.current
        if desired is None:
            raise RuntimeError("no valid desired state yet")
        self.effective_mode()  # refreshes the mode heartbeat answers carry
        now = self.clock()
        if not self.is_follower():
            self._rebase_after_clock_step(now)
        inputs = self.gather(desired, now, preview=False)
        phases.done("gather")
        outcome = self.compute(inputs)
        phases.done("plan")
        self._commit(inputs, outcome)
        phases.done("commit")
        self._planned_at = inputs.now  # a failed tick covers nothing

    def _rebase_after_clock_step(self, now: float) -> None:
        """History recorded in the future means the wall clock stepped back (an NTP
        correction, a restored VM): those times move to ``now`` once, durably, so
        cooldowns and fences are not stretched by the size of the step."""
        if self._clock_high is None:
            self._clock_high = self.store.latest_finish() or now
        if now + CLOCK_STEP_TOLERANCE_SECONDS < self._clock_high:
            moved = self.store.rebase_future(now)
            self.event(
                "clock_stepped_back",
                message=f"{self._clock_high - now:.0f}s: {moved} recorded time(s) moved to now",
            )
            self._clock_high = now
        self._clock_high = max(self._clock_high, now)

    def _commit(self, inputs: TickInputs, outcome: TickOutcome) -> None:
        """Persist and announce what ``compute_tick`` decided."""
        desired, now = inputs.desired, inputs.now
        if self.is_follower():
            with self._lock:  # a follower shows what it would do, and writes nothing
                self._previous_profiles = {p.name: p for p in desired.profiles}
                self.last_plan, self.last_result = outcome.plan, outcome.result
                self.last_snapshot, self.last_portfolio = outcome.snapshot, outcome.portfolio
            return
        for model in outcome.retired:
            self.demand.clear(model)
            self.store.clear_demand(model)
            self.event(
                "profile_retired",
                model_id=model,
                message="tombstone: drain and unload every managed copy",
            )
        plan, result, snapshot = outcome.plan, outcome.result, outcome.snapshot
        self._persist_evidence()
        self._persist_demand()
        generation = self.store.next_plan_generation(plan.input_digest)
        held = {p.action_id: p for p in inputs.pending}
        self.store.apply_tick(
            result.enqueue,
            result.cancellations,
            replace(result.memory, grace=None),
            plan_generation=generation,
        )
        self._pending_hosts = frozenset(p.action.host_id for p in self.store.pending())
        if (
            inputs.approved
            and not (
                {a.action_id for a in result.actions} | {p.action_id for p in self.store.pending()}
            )
            & inputs.approved
        ):
            self.store.set_override(APPLIED_PLAN_KEY, None)  # every applied action finished
            self.event("applied_plan_done", message=f"{len(inputs.approved)} action(s)")
        for model, used in self.registry.last_used_watermarks().items():
            self.store.set_watermark(model, used)
        picture = inputs.picture
        with self._lock:
            self._previous_profiles = {p.name: p for p in desired.profiles}
            self._grace = result.memory.grace
            for cancellation in result.cancellations:
                cancelled = held.get(cancellation.action_id)
                if cancelled is not None:
                    self.event(
                        "cancelled",
                        action_id=cancelled.action_id,
                        host_id=cancelled.action.host_id,
                        model_id=cancelled.action.model_id,
                        message=cancellation.reason.value,
                    )
            for entry in result.enqueue:
                action = entry.action
                self.event(
                    "issued",
                    action_id=action.action_id,
                    host_id=action.host_id,
                    model_id=action.model_id,
                    message=f"{action.kind.value}: {action.reason}",
                )
            self.last_generation = generation
            self.last_plan, self.last_result, self.last_snapshot = plan, result, snapshot
            self.last_portfolio = outcome.portfolio
            self.last_correlation_sources = dict(picture.correlation_sources if picture else ())
            self._portfolio_bundle = PortfolioBundle(
                (now, snapshot.hosts, tuple(desired.profiles), picture.revision if picture else 0),
                outcome.portfolio,
            )

    def _restore_demand(self, *, over: bool = False) -> None:
        """Demand rows from the store: at start, or laid ``over`` this process's own
        learning when it takes over from another controller."""
        rows = self.store.demand_rows()
        restored = self.demand.restore_demand(rows, self.policy(), self.clock(), over=over)
        self._persisted_demand_revision = None
        # every stored row, valid or not: the next write removes what was not restored
        self._persisted_demand = {(k, n, s): str(b) for k, n, s, b in rows}
        for refusal in restored.refused:
            log.warning("%s", refusal)
        if restored.refused:
            self.warnings.append(
                f"{len(restored.refused)} persisted demand row(s) refused and dropped "
                f"({restored.restored} restored, {restored.expired} past their window): "
                f"{restored.refused[0]}"
            )

    def _persist_demand(self) -> None:
        """Write the demand rows that changed since the last write; drop the ones gone."""
        found = self.demand.demand_rows(unless_revision=self._persisted_demand_revision)
        if found is None:
            return
        revision, rows = found
        before = self._persisted_demand
        changed = {key: body for key, body in rows.items() if before.get(key) != body}
        gone = [key for key in before if key not in rows]
        if changed or gone:
            self.store.write_demand(changed, gone)
        self._persisted_demand = rows
        self._persisted_demand_revision = revision

    def _persist_evidence(self) -> None:
        """Write the outcome evidence keys whose counters changed since the last write."""
        for key, body in self.demand.evidence_bodies().items():
            if self._persisted_evidence.get(key) != body:
                self.store.put_evidence(key[0], key[1], key[2] or None, body)
                self._persisted_evidence[key] = body

    def status_portfolio(self) -> tuple[PortfolioBundle | None, bool]:
        """The portfolio bundle a read-only status query shows, and whether it was reused.

        The last bundle is reused only when timestamp, node snapshots, model profiles
        and the telemetry revision are all identical; otherwise the portfolio is solved
        afresh on the current inputs (read-only: the plan and commands stay the tick's).
        """
        desired = self.current_desired()
        if desired is None:
            return None, False
        now = self.clock()
        picture = self.demand.picture(now)
        hosts = self.registry.snapshot(now).hosts
        key: PortfolioKey = (now, hosts, tuple(desired.profiles), picture.revision)
        with self._lock:
            bundle = self._portfolio_bundle
        if bundle is not None and bundle.key == key:
            return bundle, True
        configured = [p.name for p in desired.profiles]
        forecast = with_correlation(self.demand.forecast(now, desired.policy), picture, configured)
        snapshot = FleetSnapshot(now=now, hosts=hosts, demand=forecast)
        bundle = PortfolioBundle(key, plan_portfolio(portfolio_inputs(desired, snapshot, picture)))
        with self._lock:
            self._portfolio_bundle = bundle
        return bundle, False

    def wait_for_tick(self, revision: int, timeout: float) -> bool:
        """Block until a tick has processed ``revision`` (or ``timeout`` passes); True
        only when a *successful* tick covered it (a failed tick plans nothing new)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.revisions["processed"] < revision:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._tick_done.wait(left)
            return self.revisions["success"] >= revision

    def safety_current(self) -> bool:
        """Whether the last successful tick planned from the current safety revision."""
        with self._lock:
            return self.revisions["success_safety"] == self.revisions["safety"]

    # -- delivery ------------------------------------------------------------------

    def may_have_commands(self, host_id: str) -> bool:
        """False only when no action is pending for ``host_id`` (as of the last tick, which
        is the only thing that enqueues): its poll then has nothing to deliver."""
        return host_id in self._pending_hosts

    def commands_for(self, host_id: str, *, ticked: bool = True) -> list[dict[str, Any]]:
        """Executable commands for ``host_id``, durably marked delivered before returning.

        ``ticked`` says whether a successful tick covered the poll's causal revision;
        without one nothing new is delivered. A drain or unload additionally needs the
        last successful tick's safety revision to equal the current one, and is
        revalidated after its marker is written (``_revalidate_destructive``).
        """
        if not ticked:
            return []
        now = self.clock()
        mode, _ = self.effective_mode()
        desired = self.desired.current
        approved = self.approved_actions(desired, mode) if desired else frozenset()
        automatic_or_applied = mode is Mode.AUTOMATIC or approved
        if not automatic_or_applied or self.last_generation is None or self.is_follower():
            return []
        policy = self.policy()
        delivered: list[dict[str, Any]] = []
        newly: list[PendingAction] = []
        with self._lock:
            mine = [p for p in self.store.pending() if p.action.host_id == host_id]
            for held in delivery_order(mine):
                action = held.action
                if not action.executable:
                    continue
                if mode is not Mode.AUTOMATIC and held.action_id not in approved:
                    continue  # recommend mode runs an applied plan's actions and nothing else
                if action.not_before is not None and action.not_before > now:
                    continue
                if action.kind.destructive and not held.delivered:
                    problem = self._destructive_problem(action.model_id, host_id, now, policy)
                    if problem is None and not self.safety_current():
                        problem = (
                            f"{action.kind.value} of {action.model_id} on {host_id} held back: "
                            "destructive safety changed since the last successful tick"
                        )
                    if problem:
                        self.delivery_safety_error = problem
                        continue
                if action.kind is ActionKind.EVICT and not held.delivered:
                    problem = self._eviction_problem(action, now)
                    if problem:
                        self.event(
                            "eviction_withheld",
                            action_id=held.action_id,
                            host_id=host_id,
                            model_id=action.model_id,
                            message=problem,
                        )
                        continue
                if not held.delivered:
                    newly.append(held)
                command = command_to_json(
                    action,
                    plan_generation=str(self.last_generation),
                    controller_term=self.authority.term,
                    controller_id=self.authority.controller_id,
                    controller_lease_expires_at=self.authority.lease_expires_at,
                )
                delivered.append(self._with_artifact_source(command))
            if newly:
                # the delivery marker is durable before the response leaves
                self.store.mark_delivered([p.action_id for p in newly], now)
                withdrawn = self._revalidate_destructive(host_id, newly, policy)
                if withdrawn:
                    delivered = [c for c in delivered if c["action_id"] not in withdrawn]
                    newly = [p for p in newly if p.action_id not in withdrawn]
                for held in newly:
                    self.event(
                        "delivered",
                        action_id=held.action_id,
                        host_id=host_id,
                        model_id=held.action.model_id,
                        message=held.action.kind.value,
                    )
        return delivered

    def _revalidate_destructive(
        self, host_id: str, newly: list[PendingAction], policy: ControllerPolicy
    ) -> set[str]:
        """The final proof, after the markers are durable and under the selection lock:
        every newly delivered drain/unload is checked again against the registry as it
        is now (a replacement may have lost its route or its lease margin while the
        marker was written) and against the current safety revision. A batch that no
        longer holds keeps its actions pending: their markers are removed durably and
        they leave the response. Returns the withdrawn action ids."""
        batch = [p for p in newly if p.action.kind.destructive]
        if not batch:
            return set()
        now = self.clock()
        problems = [
            self._destructive_problem(p.action.model_id, host_id, now, policy) for p in batch
        ]
        if not self.safety_current():
            problems.append("destructive safety changed while the delivery marker was written")
        found = [p for p in problems if p]
        if not found:
            return set()
        withdrawn = {p.action_id for p in batch}
        self.delivery_safety_error = found[0]
        try:
            self.store.clear_delivered(sorted(withdrawn))
        except Exception as exc:  # the marker stays: conservatively "maybe delivered"
            log.exception("could not remove delivery markers of a suppressed poll")
            for action_id in withdrawn:
                self.uncertain_markers[action_id] = (
                    f"delivery marker kept after a suppressed poll: {type(exc).__name__}: {exc}"
                )
        else:
            for action_id in withdrawn:
                self.uncertain_markers.pop(action_id, None)
        for held in batch:
            self.event(
                "delivery_withdrawn",
                action_id=held.action_id,
                host_id=host_id,
                model_id=held.action.model_id,
                message=found[0],
            )
        return withdrawn

    def _with_artifact_source(self, command: dict[str, Any]) -> dict[str, Any]:
        """Add the profile's operator-authorised source when the digest is the same."""
        desired = self.desired.current
        profile = desired.profile(command["model_id"]) if desired else None
        if profile is not None and profile.chat_template and command.get("kind") == "warm":
            command["chat_template"] = profile.chat_template
        if profile is not None and command.get("kind") == "warm":
            command["endpoints"] = list(profile.endpoints)
        if profile is None or profile.artifact.source is None:
            return command
        if profile.artifact.sha256 != command.get("artifact_sha256"):
            return command
        command["artifact_source"] = profile.artifact.source
        command["artifact_size_mb"] = profile.artifact.size_mb
        if command.get("kind") == "load" and profile.artifact.sha256:
            mirrors = self.registry.artifact_mirrors(
                profile.artifact.sha256, exclude=command["node_id"], now=self.clock()
            )
            command["artifact_mirrors"] = mirrors[: self.policy().artifact_fanout]
        return command

    def _eviction_problem(self, action: Action, now: float) -> str | None:
        """A queued eviction revalidated against the host's latest heartbeat."""
        desired = self.desired.current
        profiles = {p.name: p for p in desired.profiles} if desired else {}
        host = self.registry.host_snapshot(action.host_id, now)
        return eviction_problem(action.model_id, action.artifact_sha256, host, profiles)

    def _destructive_problem(
        self, model_id: str, host_id: str, now: float, policy: ControllerPolicy
    ) -> str | None:
        """Why a drain/unload of ``model_id`` on ``host_id`` must wait, or None."""
        plan = self.last_plan
        target = dict(plan.targets).get(model_id, 0) if plan else 0
        if target <= 0:
            return None
        if plan and any(p.model_id == model_id and p.host_id == host_id for p in plan.preemptions):
            return None  # an explicit preemption: the victim drains first (invariant 3)
        serving = self.registry.routable(model_id, now)
        if not any(route.host_id == host_id for route in serving):
            return None  # not a serving replica: removing it takes no capacity away
        margin = policy.destructive_min_route_lease_seconds
        live = [
            route
            for route in self.registry.routable(model_id, now)
            if route.host_id != host_id
            and self.registry.route_lease_left(model_id, route.host_id, now) > margin
        ]
        if len(live) >= target:
            return None
        return (
            f"drain of {model_id} on {host_id} held back: {len(live)} replacement route(s) with "
            f"more than {margin:g}s of lease left, {target} required"
        )

    def heartbeat_response(self, host_id: str, commands: list[dict[str, Any]]) -> dict[str, Any]:
        mode, _ = self.cached_mode()
        ttl = None
        if self.holds_authority() and self.authority.lease_expires_at is not None:
            ttl = max(0.0, self.authority.lease_expires_at - self.clock())
        allocator: dict[str, Any] = {
            "mode": mode.value,
            "controller_lease_ttl_seconds": ttl,
            "commands": commands,
        }
        leader = self.leader_url()
        if leader is not None:
            allocator["leader_url"] = leader  # a follower points the node at authority
        return {
            "ttl_seconds": self.policy().command_ttl_seconds,
            "model_last_used_at": self.registry.last_used_watermarks(),
            "allocator": allocator,
        }
