"""The controller: intake of heartbeats and acknowledgements, gathering, the tick, its commit.

Everything with a decision in it is the pure tick (``gridctl.tick``): the
planner decides placement, the reconciler decides actions, the delivery gate
decides what leaves. This class does the I/O around it: it takes reports in,
gathers a tick's inputs from the store, registry and demand book, calls the
tick, persists what it decided and publishes the result as one frozen view
(``tickview.TickView``). The revision counter, authority and mode, delivery and
learning persistence each live in their own module.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from gridctl.controller.appliedplans import (
    APPLIED_PLAN_KEY,
    applied_plan,
    approved_ids,
    ended_after_tick,
)
from gridctl.controller.clockstep import ClockWatch
from gridctl.controller.delivering import Delivery
from gridctl.controller.demandbook import DemandBook
from gridctl.controller.desired import DesiredProvider
from gridctl.controller.eventlog import EventLog
from gridctl.controller.learning import LearningStore
from gridctl.controller.registry import HostRecord, Registry
from gridctl.controller.revisions import Revisions
from gridctl.controller.steering import Steering
from gridctl.controller.store import ControllerStore
from gridctl.controller.stores import Lease
from gridctl.controller.tickview import PhaseTimer, PortfolioBundle, TickRecord, TickView
from gridctl.domain import ControllerPolicy, DesiredState, Mode, Receipt, ReceiptStatus
from gridctl.reconcile.records import RestartGrace
from gridctl.tick import TickInputs, TickOutcome, compute_tick, tick_demand
from gridctl.tick.learned import learned_rows, with_learned
from gridctl.tick.timings import startup_estimates

log = logging.getLogger(__name__)
MAX_HISTORY = 2000

__all__ = ["APPLIED_PLAN_KEY", "Controller"]


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
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.desired, self.registry, self.store, self.clock = desired, registry, store, clock
        self.warnings: list[str] = list(warnings or [])
        self.demand = demand or DemandBook()
        self.started_at = clock()
        self.events = EventLog(clock)
        self.event = self.events  # record one event: ``event("issued", host_id=...)``
        self.revisions = Revisions()
        self.wake, self.revision_listeners = self.revisions.wake, self.revisions.listeners
        self.steering = Steering(
            store,
            lease,
            lease.controller_id if lease else controller_id or secrets.token_hex(8),
            self.event,
            self._continue_from_store,
        )
        self.lease, self.authority = lease, self.steering.authority
        self.events.context = self._log_context
        self.delivery = Delivery(self)
        self.learning = LearningStore(self.demand, store)
        self.view = TickView()  # replaced whole by each tick: readers never lock
        self.status_bundle: PortfolioBundle | None = None  # status's own portfolio solve
        self.tick_lock = threading.Lock()  # held while a tick runs; hold it to keep ticks out
        self._acked: set[str] = set()  # hosts whose next heartbeat is news to the reconciler
        self._acked_lock = threading.Lock()
        # an unchanged heartbeat is covered by a tick planned at most this long before it
        # (the tick loop's period); older plans are re-made, as time moves their inputs
        self.cover_seconds = 2.0
        self._planned_at: float | None = None  # ``now`` of the last tick's inputs
        # what turns a tick's inputs into its decision: in this thread by default, in a
        # worker process when the service runs one (``tickworker.ProcessTicks``)
        self.compute: Callable[[TickInputs], TickOutcome] = compute_tick
        # called after every tick with its record (metrics); must not raise into the loop
        self.tick_observers: list[Callable[[TickRecord], None]] = []
        self._previous_profiles: dict[str, Any] | None = None
        # restored commands get the bounded membership-recovery grace (in memory only)
        self._grace = RestartGrace(restarted_at=self.started_at) if store.pending() else None
        self.clock_watch = ClockWatch(
            store,
            self.event,
            rebase=self.registry.rebase_future,
            monotonic=monotonic,
            forward=self.registry.forward_heartbeats,
        )
        # hosts with pending actions (a superset between ticks: acks only remove some), so
        # a poll of any other host is answered without reading the store
        self._pending_hosts = frozenset(p.action.host_id for p in store.pending())
        # outcome evidence, demand series and affinity sequences survive a restart
        self.warnings += self.learning.restore(self.policy(), self.clock())
        self.registry.restore_watermarks(
            {m: used for m, (used, _peak) in store.watermarks().items() if used is not None}
        )
        self.steering.renew()

    # -- revisions, events, settings -------------------------------------------------

    def mark_dirty(self, *, safety: bool = False) -> int:
        return self.note_input(semantic=True, safety=safety)

    def note_demand(self) -> int:
        """A router observation: demand the next tick plans, which wakes the tick loop but
        holds back no command poll (a poll is answered from the last successful tick; the
        tick it woke plans the new demand), so a burst of requests never makes the whole
        fleet's polls wait for a tick."""
        revision = self.revisions.note_demand()
        self.wake.set()
        self.revisions.announce()
        return revision

    def note_input(self, *, semantic: bool, safety: bool = False) -> int:
        """Advance the causal revision for one input and return it; a ``semantic`` input
        (one that changes something a tick reads) wakes the tick loop (``Revisions``)."""
        revision, semantic = self.revisions.note_input(semantic=semantic, safety=safety)
        if semantic:
            self.wake.set()
        else:
            self.revisions.announce()
        return revision

    def current_desired(self) -> DesiredState | None:
        return self.desired.current

    def policy(self) -> ControllerPolicy:
        current = self.desired.current
        return current.policy if current else ControllerPolicy()

    def all_warnings(self) -> list[str]:
        return list(self.store.warnings) + self.warnings + self.steering.warnings()

    # -- authority and mode (``steering``) -------------------------------------------

    def _continue_from_store(self) -> None:
        """Taking over from another controller is a restart for what it left: restored
        commands get the bounded membership-recovery grace, and its learning (persisted
        each tick) replaces this process's copy of the same keys."""
        if self.store.pending():
            self._grace = RestartGrace(restarted_at=self.clock())
        self.warnings += self.learning.restore(self.policy(), self.clock(), over=True)

    def effective_mode(self, policy_mode: Mode | None = None) -> tuple[Mode, str | None]:
        """The mode in force (for git's ``policy_mode``, default the revision in force)."""
        return self.steering.effective_mode(
            policy_mode or self.policy().mode, remember=policy_mode is None
        )

    def set_override(self, mode: Mode | None, reason: str = "") -> None:
        """Set (or clear, with None) the operator's mode (``Steering.set_override``)."""
        self.steering.set_override(mode, reason, self.policy().mode, self.clock())
        self.mark_dirty(safety=True)

    def approved_actions(self, desired: DesiredState, mode: Mode) -> frozenset[str]:
        """The action ids of the saved plan applied in recommend mode for ``desired``."""
        return approved_ids(applied_plan(self.store.overrides()), desired.revision, mode)

    # -- intake ----------------------------------------------------------------------

    def register(self, host_id: str, payload: Any) -> None:
        self.registry.register(host_id, payload, self.clock())
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
        receipts = self._take_receipts(host_id, payload)
        semantic = (
            changed
            or receipts
            or self._stale(before, now)
            or self.registry.plans_differently(before, record, now)
        )
        return self.note_input(semantic=semantic, safety=changed)

    def renew_lease(self, host_id: str, payload: Any) -> tuple[int, bool]:
        """Apply a lease renewal; returns its causal revision and whether the controller
        holds the inventory it names (False: the answer asks for the full inventory).

        Only liveness, load and receipts are news here: the host's facts are the ones
        its last full inventory gave, so nothing is validated or rebuilt for them."""
        now = self.clock()
        before = self.registry.host(host_id)
        record = self.registry.renew(host_id, payload, now)
        receipts = self._take_receipts(host_id, payload)
        if record is None:
            return self.note_input(semantic=receipts), False
        semantic = (
            receipts
            or self._stale(before, now)
            or self.registry.plans_differently(before, record, now)
        )
        return self.note_input(semantic=semantic), True

    def _take_receipts(self, host_id: str, payload: Any) -> bool:
        """Apply a heartbeat's acknowledgements; whether it or the one before carried any
        (the heartbeat after an acknowledgement is the observation that confirms it)."""
        acks = payload.get("acknowledgements", []) or []
        for ack in acks:
            self._apply_ack(ack, host_id)
        with self._acked_lock:
            after_ack = host_id in self._acked
            (self._acked.add if acks else self._acked.discard)(host_id)
        return bool(acks) or after_ack

    def _stale(self, before: HostRecord | None, now: float) -> bool:
        """Whether the last plan may not cover a heartbeat at ``now`` that repeats
        ``before``: a host unheard of for a while, no plan yet, or an old one."""
        planned_at = self._planned_at
        return (
            before is None
            or now - before.last_heartbeat > self.policy().heartbeat_stale_seconds / 2
            or planned_at is None
            or abs(now - planned_at) > self.cover_seconds  # a clock step too
        )

    def _log_context(self) -> dict[str, object]:
        """The plan generation and authority term a log line about an action carries."""
        return {"plan_generation": self.view.generation, "term": self.steering.authority.term}

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

    # -- gather and tick -------------------------------------------------------------

    def gather(self, desired: DesiredState, now: float, *, preview: bool) -> TickInputs:
        """Everything a tick holding ``desired`` reads at ``now``. The real tick points the
        demand book at ``desired`` first; a dry run (``preview``) reads it through a copy,
        so gathering a candidate desired state's inputs changes nothing."""
        profiles = {p.name: p for p in desired.profiles}
        mode, _ = self.effective_mode(desired.policy.mode)
        if preview:
            picture, direct = self.demand.preview(now, desired)
        else:
            self.demand.configure(profiles)
            self.demand.configure_learning(desired.policy, desired.catalog, desired.profiles)
            picture = self.demand.picture(now)
            direct = self.demand.forecast(now, desired.policy)
        forecast = tick_demand(direct, picture, self.registry.queued_work(now), profiles)
        startup = startup_estimates(self.store.timings(), profiles, now, desired.policy)
        learned = learned_rows(profiles, startup, self.registry.speed_evidence())
        return TickInputs(
            now=now,
            desired=desired,
            observed=with_learned(self.registry.snapshot(now, forecast), learned),
            mode=mode,
            memory=replace(self.store.memory(), grace=self._grace),
            previous_profiles=self._previous_profiles,
            pending=self.store.pending(),
            history=self.store.history(limit=MAX_HISTORY),
            picture=picture,
            startup=startup,
            approved=self.approved_actions(desired, mode),
            epoch=self.store.epoch,
        )

    def dry_run(self, candidate: DesiredState | None = None) -> tuple[TickInputs, TickOutcome]:
        """What the next tick would do holding ``candidate`` (default: the revision in
        force) — the tick's own function on the tick's own inputs, persisting nothing."""
        with self.tick_lock:
            desired = candidate or self.desired.current
            if desired is None:
                raise RuntimeError("no valid desired state yet")
            inputs = self.gather(desired, self.clock(), preview=True)
            return inputs, self.compute(inputs)

    def tick(self) -> TickRecord:
        """Plan and reconcile once. Serialised; safe to call from any thread."""
        with self.tick_lock:
            started = time.monotonic()
            dirty, safety = self.revisions.started()
            phases = PhaseTimer(started)
            error: str | None = None
            try:
                self.steering.renew()
                phases.done("renew")
                self._tick_once(phases)
            except Exception as exc:  # a failed tick must not kill the loop
                log.exception("tick failed")
                error = f"{type(exc).__name__}: {exc}"
            spent = (time.monotonic() - started) * 1000
            record = TickRecord(self.clock(), spent, error is None, error, phases.spent)
            view = self.view
            self.view = replace(
                view,
                tick=record,
                ticks=view.ticks + 1,
                success_ms=spent if record.ok else view.success_ms,
            )
            self.revisions.finished(dirty, safety, record.ok)
            self.revisions.announce()
            for observer in list(self.tick_observers):
                try:
                    observer(record)
                except Exception:  # an observer must never break the tick loop
                    log.exception("tick observer failed")
            return record

    def _tick_once(self, phases: PhaseTimer) -> None:
        desired = self.desired.current
        if desired is None:
            raise RuntimeError("no valid desired state yet")
        self.effective_mode()  # refreshes the mode heartbeat answers carry
        now = self.clock()
        if not self.steering.is_follower():
            self.clock_watch.check(now)
        inputs = self.gather(desired, now, preview=False)
        phases.done("gather")
        outcome = self.compute(inputs)
        phases.done("plan")
        self._commit(inputs, outcome)
        phases.done("commit")
        self._planned_at = inputs.now  # a failed tick covers nothing

    def _commit(self, inputs: TickInputs, outcome: TickOutcome) -> None:
        """Persist and announce what the tick decided, then publish it as the view."""
        desired, now, picture = inputs.desired, inputs.now, inputs.picture
        published = replace(
            self.view,
            plan=outcome.plan,
            result=outcome.result,
            snapshot=outcome.snapshot,
            portfolio=outcome.portfolio,
        )
        if self.steering.is_follower():  # a follower shows what it would do, and writes nothing
            self._previous_profiles = {p.name: p for p in desired.profiles}
            self.view = published
            return
        for model in outcome.retired:
            self.demand.clear(model)
            self.store.clear_demand(model)
            self.event("profile_retired", model_id=model, message="tombstone: drain and unload")
        result = outcome.result
        self.learning.persist()
        generation = self.store.next_plan_generation(outcome.plan.input_digest)
        held = {p.action_id: p for p in inputs.pending}
        memory = replace(result.memory, grace=None)
        self.store.apply_tick(
            result.enqueue, result.cancellations, memory, plan_generation=generation
        )
        pending = self.store.pending()
        self._pending_hosts = frozenset(p.action.host_id for p in pending)
        ended = ended_after_tick(
            applied_plan(self.store.overrides()),
            desired.revision,
            inputs.mode,
            inputs.approved,
            [a.action_id for a in (*result.actions, *result.deferred)]
            + [p.action_id for p in pending],
            [h.action_id for h in inputs.history],
        )
        if ended is not None:  # executed, superseded or approving nothing: forget it durably
            self.store.set_override(APPLIED_PLAN_KEY, None)
            self.event("applied_plan_done", message=ended)
        for model, used in self.registry.last_used_watermarks().items():
            self.store.set_watermark(model, used)
        self._previous_profiles = {p.name: p for p in desired.profiles}
        self._grace = result.memory.grace
        self.events.tick(result, held, plan_generation=generation)
        bundle = None
        if outcome.portfolio is not None:
            hosts, profiles = outcome.snapshot.hosts, tuple(desired.profiles)
            key = (now, hosts, profiles, picture.revision if picture else 0)
            bundle = PortfolioBundle(key, outcome.portfolio)
        self.view = replace(
            published,
            generation=generation,
            correlation_sources=dict(picture.correlation_sources if picture else ()),
            bundle=bundle,
        )

    # -- delivery (``delivering``) ---------------------------------------------------

    def may_have_commands(self, host_id: str) -> bool:
        """False only when no action is pending for ``host_id`` (as of the last tick, which
        is the only thing that enqueues): its poll then has nothing to deliver."""
        return host_id in self._pending_hosts

    def commands_for(self, host_id: str, *, ticked: bool = True) -> list[dict[str, Any]]:
        return self.delivery.commands_for(host_id, ticked=ticked)
