"""Simulated nodes: the node side of the wire, minus processes.

A ``SimNode`` admits each command through the production authority fence
(``admit_command``), then runs accepted commands one after another like the
node daemon does: LOAD fetches weights (instant on an exact cache hit,
otherwise size over the host's transfer speed, refused when the modelled disk
is full), WARM refuses a start that no longer fits memory and is READY one
tick later at the earliest, DRAIN stops admissions, UNLOAD releases memory and
keeps the weights, EVICT deletes an unused cache entry. Receipts go back with
the next heartbeat. An outage loses every process (weights stay on disk) and
stops heartbeats until recovery.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from gridctl.domain import (
    Action,
    ActionKind,
    CachedArtifact,
    HostSnapshot,
    HostState,
    ModelProfile,
    Receipt,
    ReceiptStatus,
    Residency,
    ResidencyState,
)
from gridctl.lab.fleets import LabHost
from gridctl.reconcile import FencedCommand, NodeFenceState, admit_command

THROTTLE_DERATE = 0.6
ACTIVITY_MB = 4096  # memory an active laptop owner's own applications take


@dataclass
class SimResidency:
    model_id: str
    memory_mb: int
    state: ResidencyState
    sha: str | None
    runtime: str | None
    since: float
    last_used_at: float | None = None


@dataclass
class CacheEntry:
    sha: str | None
    size_mb: int
    cached_at: float
    prefetched: bool = False
    used: bool = False


@dataclass
class Running:
    action: Action
    started: float
    finish_at: float
    fetched: bool = False


@dataclass
class NodeEvents:
    """What happened on one node during one advance (for scoring and the timeline)."""

    ready: list[tuple[str, float]] = field(default_factory=list)  # (model, at)
    removed: list[tuple[str, float]] = field(default_factory=list)
    loads: list[tuple[str, bool, bool, float]] = field(
        default_factory=list
    )  # model, hit, prefetch, s
    evicted_mb: int = 0
    refused: list[tuple[str, str]] = field(default_factory=list)  # (action kind/model, reason)


class SimNode:
    def __init__(self, host: LabHost, profiles: dict[str, ModelProfile], now: float) -> None:
        self.host = host
        self.profiles = profiles
        self.fence = NodeFenceState(host_id=host.host_id)
        self.residencies: dict[str, SimResidency] = {}
        self.cache: dict[str, CacheEntry] = {
            c.model_id: CacheEntry(c.artifact_sha256, self._size(c.model_id), now - 86400.0)
            for c in host.spec.cached
        }
        self.disk_free_mb = host.spec.resources.disk_free_mb or 0
        self.queue: list[tuple[Action, float]] = []
        self.running: Running | None = None
        self.busy_until = now
        self.receipts: list[Receipt] = []
        self.up = True
        self.throttled = False  # thermal
        self.active = False  # the owner is using the laptop: local apps take memory
        self.on_battery = False  # unplugged: paused, no new work
        self.last_heartbeat: float | None = None

    @property
    def host_id(self) -> str:
        return self.host.host_id

    def _size(self, model_id: str) -> int:
        profile = self.profiles.get(model_id)
        return (profile.artifact.size_mb or 0) if profile else 0

    # -- physics -------------------------------------------------------------------

    def external_mb(self) -> int:
        return self.host.spec.resources.external_mb + (ACTIVITY_MB if self.active else 0)

    def state(self) -> HostState:
        if self.on_battery:
            return HostState.PAUSED
        return HostState.THROTTLED if self.throttled or self.active else HostState.ACCEPTING

    def capacity_mb(self) -> int:
        res = self.host.spec.resources
        derate = THROTTLE_DERATE if self.throttled else 1.0
        return max(0, int(res.capacity_mb * derate) - res.reserved_mb - self.external_mb())

    def used_mb(self) -> int:
        return sum(r.memory_mb for r in self.residencies.values())

    def derate(self) -> float:
        return THROTTLE_DERATE if self.throttled else 1.0

    # -- commands ------------------------------------------------------------------

    def deliver(self, command: dict[str, object], action: Action, ttl: float, now: float) -> bool:
        """Admit one wire command through the authority fence; queue it when accepted."""
        if not self.up:
            return False
        admission = admit_command(self.fence, FencedCommand.from_wire(command), ttl)
        if not admission.accepted:
            reason = admission.reason.value if admission.reason else "rejected"
            self.receipts.append(Receipt(action.action_id, ReceiptStatus.REJECTED, reason))
            return True
        self.fence = admission.state
        self.queue.append((action, now))
        return True

    def advance(self, now: float, tick_seconds: float) -> NodeEvents:
        """Run queued commands whose turn has come; finish the ones due by ``now``."""
        events = NodeEvents()
        if not self.up:
            return events
        while True:
            if self.running is not None:
                if self.running.finish_at > now:
                    break
                self._finish(self.running, events)
                self.running = None
            if not self.queue:
                break
            action, delivered_at = self.queue.pop(0)
            start = max(self.busy_until, delivered_at)
            self.running = self._start(action, start, tick_seconds, events)
            if self.running is not None:
                self.busy_until = self.running.finish_at
        return events

    def _fail(self, action: Action, reason: str, events: NodeEvents) -> None:
        self.receipts.append(Receipt(action.action_id, ReceiptStatus.FAILED, reason))
        events.refused.append((f"{action.kind.value} {action.model_id}", reason))

    def _start(
        self, action: Action, start: float, tick: float, events: NodeEvents
    ) -> Running | None:
        model = action.model_id
        kind = action.kind
        profile = self.profiles.get(model)
        if kind is ActionKind.LOAD:
            entry = self.cache.get(model)
            if entry is not None and entry.sha == action.artifact_sha256:
                return Running(action, start, start)
            size = self._size(model)
            if size > self.disk_free_mb:
                self._fail(action, "disk_full", events)
                return None
            self.disk_free_mb -= size  # reserved while the transfer runs
            if action.memory_mb > 0 and model not in self.residencies:  # prefetch: no row
                self.residencies[model] = SimResidency(
                    model,
                    action.memory_mb,
                    ResidencyState.LOADING,
                    action.artifact_sha256,
                    action.runtime,
                    start,
                )
            seconds = size / max(self.host.transfer_mb_per_second, 1.0)
            return Running(action, start, start + seconds, fetched=True)
        if kind is ActionKind.WARM:
            entry = self.cache.get(model)
            if entry is None or entry.sha != action.artifact_sha256:
                self._fail(action, "artifact_not_cached", events)
                return None
            current = self.residencies.get(model)
            if current is not None and current.state is ResidencyState.READY:
                return Running(action, start, start)
            others = self.used_mb() - (current.memory_mb if current else 0)
            if others + action.memory_mb > self.capacity_mb():
                self._fail(action, "insufficient_memory", events)
                self.residencies.pop(model, None)
                return None
            self.residencies[model] = SimResidency(
                model,
                action.memory_mb,
                ResidencyState.WARMING,
                action.artifact_sha256,
                action.runtime,
                start,
            )
            warm = profile.warm_seconds if profile else 10.0
            return Running(action, start, start + max(warm, tick))  # one-tick startup delay
        return Running(action, start, start)

    def _finish(self, run: Running, events: NodeEvents) -> None:
        action, at = run.action, run.finish_at
        model = action.model_id
        kind = action.kind
        if kind is ActionKind.LOAD:
            hit = not run.fetched
            if run.fetched:
                self.cache[model] = CacheEntry(
                    action.artifact_sha256, self._size(model), at, prefetched=action.memory_mb == 0
                )
            row = self.residencies.get(model)
            if row is not None and row.state is ResidencyState.LOADING:
                del self.residencies[model]  # weights on disk: CACHED, no memory
            seconds = self._size(model) / max(self.host.transfer_mb_per_second, 1.0)
            events.loads.append((model, hit, action.memory_mb == 0, seconds))
        elif kind is ActionKind.WARM:
            row = self.residencies.get(model)
            if row is not None and row.state is ResidencyState.WARMING:
                row.state, row.since = ResidencyState.READY, at
                events.ready.append((model, at))
                cache = self.cache.get(model)
                if cache is not None:
                    cache.used = True
        elif kind is ActionKind.DRAIN:
            row = self.residencies.get(model)
            if row is not None and row.state is ResidencyState.READY:
                row.state = ResidencyState.DRAINING
        elif kind is ActionKind.UNLOAD:
            if self.residencies.pop(model, None) is not None:
                events.removed.append((model, at))
        elif kind is ActionKind.EVICT:
            entry = self.cache.get(model)
            if entry is not None and model not in self.residencies:
                del self.cache[model]
                self.disk_free_mb += entry.size_mb
                events.evicted_mb += entry.size_mb
        self.receipts.append(
            Receipt(
                action.action_id,
                ReceiptStatus.SUCCEEDED,
                "done",
                duration_seconds=max(0.0, at - run.started),
                artifact_fetched=run.fetched,
                observed_at=at,
            )
        )

    # -- physical events -----------------------------------------------------------

    def go_down(self, events: NodeEvents, at: float) -> None:
        """An outage: every process is lost, in-flight work with it; disk survives."""
        for model in sorted(self.residencies):
            events.removed.append((model, at))
        self.residencies.clear()
        self.queue.clear()
        self.running = None
        self.up = False

    def come_up(self, now: float) -> None:
        self.up = True
        self.busy_until = now

    # -- heartbeat -----------------------------------------------------------------

    def heartbeat(self, now: float) -> list[Receipt]:
        """Report: the receipts gathered since the last heartbeat (none while down)."""
        if not self.up:
            return []
        self.last_heartbeat = now
        out, self.receipts = self.receipts, []
        return out

    def snapshot(self) -> HostSnapshot:
        res = self.host.spec.resources
        resources = replace(
            res,
            thermal_derate=THROTTLE_DERATE if self.throttled else 1.0,
            external_mb=self.external_mb(),
            disk_free_mb=self.disk_free_mb,
        )
        rows = tuple(
            Residency(
                model_id=r.model_id,
                memory_mb=r.memory_mb,
                state=r.state,
                artifact_sha256=r.sha,
                runtime=r.runtime,
                loaded_at=r.since,
                last_used_at=r.last_used_at,
            )
            for _, r in sorted(self.residencies.items())
        )
        cached = tuple(CachedArtifact(m, e.sha) for m, e in sorted(self.cache.items()))
        return HostSnapshot(
            host_id=self.host_id,
            resources=resources,
            state=self.state(),
            last_heartbeat=self.last_heartbeat,
            residencies=rows,
            cached=cached,
            kind=self.host.kind,
        )
