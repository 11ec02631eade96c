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
from dataclasses import dataclass, field, replace
from typing import Any

from gridctl.controller.demandbook import DemandBook
from gridctl.controller.desired import DesiredProvider
from gridctl.controller.registry import Registry
from gridctl.domain import (
    ControllerPolicy,
    DesiredState,
    FleetSnapshot,
    Mode,
    ModelProfile,
    Plan,
    ReceiptStatus,
)
from gridctl.planner import plan_placement
from gridctl.reconcile import (
    ControllerMemory,
    HistoryEntry,
    PendingAction,
    PlanGeneration,
    ReconcileResult,
    command_to_json,
    delivery_order,
    judge_acknowledgement,
    newly_retired,
    reconcile,
    retire_profiles,
)
from gridctl.reconcile.records import RestartGrace

log = logging.getLogger(__name__)
MAX_HISTORY = 2000
MAX_EVENTS = 500


@dataclass
class ModeOverride:
    mode: Mode
    reason: str
    set_at: float
    source: str = "operator"


@dataclass
class Authority:
    """Who may issue executable commands: filled in by the authority lease."""

    controller_id: str
    term: int = 0
    holds: bool = True
    lease_expires_at: float | None = None


@dataclass
class TickRecord:
    at: float
    duration_ms: float
    ok: bool
    error: str | None = None


@dataclass
class ControllerState:
    """What the controller carries between ticks (persisted by the store)."""

    pending: dict[str, PendingAction] = field(default_factory=dict)
    history: deque[HistoryEntry] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    memory: ControllerMemory = field(default_factory=ControllerMemory)
    override: ModeOverride | None = None
    epoch: str = field(default_factory=lambda: secrets.token_hex(8))
    sequence: int = 0
    queue_seq: int = 0
    watermarks: dict[str, float] = field(default_factory=dict)


class Controller:
    """One controller process's brain; thread-safe. HTTP lives in ``app.py``."""

    def __init__(
        self,
        *,
        desired: DesiredProvider,
        registry: Registry,
        clock: Callable[[], float] = time.time,
        authority: Authority | None = None,
        state: ControllerState | None = None,
        durable: bool = False,
        persist: Callable[[ControllerState], None] | None = None,
        warnings: list[str] | None = None,
        demand: DemandBook | None = None,
    ) -> None:
        self.desired = desired
        self.registry = registry
        self.clock = clock
        self.authority = authority or Authority(controller_id=secrets.token_hex(8))
        self.state = state or ControllerState()
        self.durable = durable
        self._persist_hook = persist
        self.warnings: list[str] = list(warnings or [])
        self.demand = demand or DemandBook()
        self.started_at = clock()
        self._lock = threading.RLock()
        self._tick_lock = threading.Lock()
        self._tick_done = threading.Condition(self._lock)
        self.wake = threading.Event()
        self.events: deque[dict[str, Any]] = deque(maxlen=MAX_EVENTS)
        self.revisions = {"dirty": 0, "processed": 0, "success": 0, "safety": 0}
        self.last_plan: Plan | None = None
        self.last_result: ReconcileResult | None = None
        self.last_snapshot: FleetSnapshot | None = None
        self.last_generation: PlanGeneration | None = None
        self.last_tick: TickRecord | None = None
        self.last_success_ms: float | None = None
        self.delivery_safety_error: str | None = None
        self._previous_profiles: dict[str, ModelProfile] | None = None
        if state is not None and (state.pending or state.history):
            # restored commands get the bounded membership-recovery grace
            self.state.memory = replace(
                self.state.memory, grace=RestartGrace(restarted_at=self.started_at)
            )
        self.registry.restore_watermarks(self.state.watermarks)

    # -- small helpers -------------------------------------------------------------

    def event(self, event: str, **fields: Any) -> None:
        row = {"at": self.clock(), "event": event, "host_id": None, "model_id": None}
        row.update(fields)
        with self._lock:
            self.events.append(row)

    def _persist(self) -> None:
        if self._persist_hook is None:
            return
        with self._lock:
            self.state.watermarks = self.registry.last_used_watermarks()
            self._persist_hook(self.state)

    def mark_dirty(self, *, safety: bool = False) -> int:
        with self._lock:
            self.revisions["dirty"] += 1
            if safety:
                self.revisions["safety"] += 1
            revision = self.revisions["dirty"]
        self.wake.set()
        return revision

    def current_desired(self) -> DesiredState | None:
        return self.desired.current

    def policy(self) -> ControllerPolicy:
        current = self.desired.current
        return current.policy if current else ControllerPolicy()

    def effective_mode(self) -> tuple[Mode, str | None]:
        """The mode in force and, when automatic was asked for but refused, why."""
        wanted = self.state.override.mode if self.state.override else self.policy().mode
        if wanted is Mode.AUTOMATIC:
            if not self.durable:
                return Mode.RECOMMEND, "automatic refused: no durable state path"
            if not self.authority.holds:
                return Mode.RECOMMEND, "automatic refused: another controller holds authority"
        return wanted, None

    # -- operator actions ----------------------------------------------------------

    def set_override(self, mode: Mode | None, reason: str = "") -> None:
        with self._lock:
            before, _ = self.effective_mode()
            if mode is None:
                self.state.override = None
                self.event("mode_override_cleared", message=reason)
            else:
                self.state.override = ModeOverride(mode, reason, self.clock())
                self.event("mode_override_set", message=f"{mode.value}: {reason}".strip(": "))
            after, _ = self.effective_mode()
            if before is Mode.AUTOMATIC and after is not Mode.AUTOMATIC:
                self.event("automatic_left", message="pending commands are cancelled")
            self._persist()
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
        with self._lock:
            for ack in payload.get("acknowledgements", []) or []:
                self._apply_ack(ack, now)
        return self.mark_dirty(safety=changed)

    def _apply_ack(self, ack: dict[str, Any], now: float) -> None:
        action_id = str(ack["action_id"])
        incoming = ReceiptStatus(ack["status"])
        held = self.state.pending.get(action_id)
        if held is not None:
            decision = judge_acknowledgement(held.status, incoming, acknowledged=False)
            if not decision.changed or decision.status is None:
                return
            if decision.status.terminal:
                del self.state.pending[action_id]
                self._finish(held, decision.status, now, acknowledged=True, ack=ack)
            else:
                self.state.pending[action_id] = replace(held, status=decision.status)
            return
        for index, entry in enumerate(self.state.history):
            if entry.action_id != action_id:
                continue
            decision = judge_acknowledgement(
                entry.status, incoming, acknowledged=entry.acknowledged
            )
            if decision.changed and decision.status is not None:
                self.state.history[index] = replace(
                    entry, status=decision.status, acknowledged=True, observed_at=now
                )
                self.event(
                    "late_acknowledgement",
                    action_id=action_id,
                    host_id=entry.host_id,
                    model_id=entry.model_id,
                    message=decision.status.value,
                )
            return

    def _finish(
        self,
        pending: PendingAction,
        status: ReceiptStatus,
        now: float,
        *,
        acknowledged: bool,
        ack: dict[str, Any] | None = None,
    ) -> None:
        action = pending.action
        self.state.history.append(
            HistoryEntry(
                action_id=action.action_id,
                kind=action.kind,
                host_id=action.host_id,
                model_id=action.model_id,
                artifact_sha256=action.artifact_sha256,
                attempt=action.attempt,
                status=status,
                finished_at=now,
                observed_at=now if acknowledged else None,
                acknowledged=acknowledged,
            )
        )
        duration = ack.get("duration_seconds") if ack else None
        self.event(
            f"{action.kind.value}_{status.value}",
            host_id=action.host_id,
            model_id=action.model_id,
            action_id=action.action_id,
            message=str(ack.get("message", "")) if ack else "",
            duration_seconds=duration if isinstance(duration, (int, float)) else None,
        )

    # -- the tick ------------------------------------------------------------------

    def tick(self) -> TickRecord:
        """Plan and reconcile once. Serialised; safe to call from any thread."""
        with self._tick_lock:
            started = time.monotonic()
            with self._lock:
                dirty = self.revisions["dirty"]
            try:
                self._tick_once()
            except Exception as exc:  # a failed tick must not kill the loop
                log.exception("tick failed")
                record = TickRecord(
                    self.clock(),
                    (time.monotonic() - started) * 1000,
                    False,
                    f"{type(exc).__name__}: {exc}",
                )
            else:
                record = TickRecord(self.clock(), (time.monotonic() - started) * 1000, True)
            with self._lock:
                self.last_tick = record
                self.revisions["processed"] = max(self.revisions["processed"], dirty)
                if record.ok:
                    self.revisions["success"] = max(self.revisions["success"], dirty)
                    self.last_success_ms = record.duration_ms
                self._tick_done.notify_all()
            return record

    def _tick_once(self) -> None:
        now = self.clock()
        desired = self.desired.current
        if desired is None:
            raise RuntimeError("no valid desired state yet")
        profiles = {p.name: p for p in desired.profiles}
        mode, _ = self.effective_mode()
        with self._lock:
            memory = self.state.memory
            if self._previous_profiles is not None:
                tombstones = retire_profiles(
                    memory.tombstones, self._previous_profiles, profiles, now
                )
                for model in newly_retired(memory.tombstones, tombstones):
                    self.demand.clear(model)
                    self.event(
                        "profile_retired",
                        model_id=model,
                        message="tombstone: drain and unload every managed copy",
                    )
                memory = replace(memory, tombstones=tombstones)
            self._previous_profiles = profiles
            pending = tuple(self.state.pending.values())
            history = tuple(self.state.history)
        self.demand.configure(profiles)
        snapshot = self.registry.snapshot(now, self.demand.forecast(now, desired.policy))
        plan = plan_placement(desired.profiles, snapshot, desired.policy)
        result = reconcile(
            plan, snapshot, profiles, desired.policy, mode, pending, history, now, memory=memory
        )
        with self._lock:
            self._apply_result(result, now)
            self.state.sequence += 1
            digest = plan.input_digest.split(":")[-1]
            self.last_generation = PlanGeneration(self.state.epoch, self.state.sequence, digest)
            self.last_plan, self.last_result, self.last_snapshot = plan, result, snapshot
            self._persist()

    def _apply_result(self, result: ReconcileResult, now: float) -> None:
        for cancellation in result.cancellations:
            held = self.state.pending.pop(cancellation.action_id, None)
            if held is None:
                continue
            self._finish(held, ReceiptStatus.CANCELLED, now, acknowledged=False)
            self.event(
                "cancelled",
                action_id=held.action_id,
                host_id=held.action.host_id,
                model_id=held.action.model_id,
                message=cancellation.reason.value,
            )
        for entry in result.enqueue:
            self.state.queue_seq += 1
            self.state.pending[entry.action_id] = replace(entry, queued=self.state.queue_seq)
            action = entry.action
            self.event(
                "issued",
                action_id=action.action_id,
                host_id=action.host_id,
                model_id=action.model_id,
                message=f"{action.kind.value}: {action.reason}",
            )
        self.state.memory = result.memory

    def wait_for_tick(self, revision: int, timeout: float) -> bool:
        """Block until a tick has processed ``revision`` (or ``timeout`` passes)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.revisions["processed"] < revision:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._tick_done.wait(left)
            return True

    # -- delivery ------------------------------------------------------------------

    def commands_for(self, host_id: str) -> list[dict[str, Any]]:
        """Executable commands for ``host_id``, durably marked delivered before returning."""
        now = self.clock()
        mode, _ = self.effective_mode()
        if mode is not Mode.AUTOMATIC or self.last_generation is None:
            return []
        policy = self.policy()
        delivered: list[dict[str, Any]] = []
        with self._lock:
            mine = [p for p in self.state.pending.values() if p.action.host_id == host_id]
            for held in delivery_order(mine):
                action = held.action
                if not action.executable:
                    continue
                if action.not_before is not None and action.not_before > now:
                    continue
                if action.kind.destructive and not held.delivered:
                    problem = self._destructive_problem(action.model_id, host_id, now, policy)
                    if problem:
                        self.delivery_safety_error = problem
                        continue
                if not held.delivered:
                    self.state.pending[action.action_id] = replace(
                        held, delivered=True, delivered_at=now
                    )
                    self.event(
                        "delivered",
                        action_id=action.action_id,
                        host_id=host_id,
                        model_id=action.model_id,
                        message=action.kind.value,
                    )
                command = command_to_json(
                    action,
                    plan_generation=str(self.last_generation),
                    controller_term=self.authority.term,
                    controller_id=self.authority.controller_id,
                    controller_lease_expires_at=self.authority.lease_expires_at,
                )
                delivered.append(self._with_artifact_source(command))
            if delivered:
                self._persist()  # the delivery marker is durable before the response
        return delivered

    def _with_artifact_source(self, command: dict[str, Any]) -> dict[str, Any]:
        """Add the profile's operator-authorised source when the digest is the same."""
        desired = self.desired.current
        profile = desired.profile(command["model_id"]) if desired else None
        if profile is None or profile.artifact.source is None:
            return command
        if profile.artifact.sha256 != command.get("artifact_sha256"):
            return command
        command["artifact_source"] = profile.artifact.source
        command["artifact_size_mb"] = profile.artifact.size_mb
        return command

    def _destructive_problem(
        self, model_id: str, host_id: str, now: float, policy: ControllerPolicy
    ) -> str | None:
        """Why a drain/unload of ``model_id`` on ``host_id`` must wait, or None."""
        plan = self.last_plan
        target = dict(plan.targets).get(model_id, 0) if plan else 0
        if target <= 0:
            return None
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
        mode, _ = self.effective_mode()
        ttl = None
        if self.authority.lease_expires_at is not None:
            ttl = max(0.0, self.authority.lease_expires_at - self.clock())
        return {
            "ttl_seconds": self.policy().command_ttl_seconds,
            "model_last_used_at": self.registry.last_used_watermarks(),
            "allocator": {
                "mode": mode.value,
                "controller_lease_ttl_seconds": ttl,
                "commands": commands,
            },
        }
