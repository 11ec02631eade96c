"""The local host-protection rules: sensor readings in, one of six host states out.

Pure and deterministic (time is an argument). Each sensor condition has a
trigger threshold and a separate, looser recovery threshold. A condition turns
on only after ``debounce_samples`` consecutive triggering samples (a one-sample
spike does nothing) and off only after as many consecutive recovered samples.
The host state is the strictest active condition, and it may loosen only once
``recovery_cooldown_seconds`` have passed since the conditions last demanded
it, so a flapping sensor cannot flap the host. Missing sensors are unknown, not zero:
policy either ignores them or conservatively throttles.

Entering a state that admits no new work while requests are still running
reports ``draining`` for up to ``drain_grace_seconds`` first. A local override
outranks the controller and local safety can only make it stricter
(``combine``). ``dedicated`` hosts ignore user activity and battery.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gridctl.domain.states import HostState

SEVERITY: dict[HostState, int] = {
    HostState.ACCEPTING: 0,
    HostState.THROTTLED: 1,
    HostState.DRAINING: 2,
    HostState.PAUSED: 3,
    HostState.UNHEALTHY: 4,
    HostState.QUARANTINED: 5,
}


def stricter(a: HostState, b: HostState) -> HostState:
    return a if SEVERITY[a] >= SEVERITY[b] else b


def combine(override: HostState | None, protected: HostState) -> HostState:
    """A local override outranks the controller; confirmed local safety only tightens it."""
    return protected if override is None else stricter(override, protected)


@dataclass(frozen=True)
class Readings:
    """One sample of the machine; ``None`` means the sensor is unknown here."""

    idle_seconds: float | None = None  # time since the last user input
    battery_percent: float | None = None
    on_ac_power: bool | None = None
    temperature_c: float | None = None  # hottest sensor
    cpu_percent: float | None = None
    memory_percent: float | None = None  # used share of system memory
    load_per_cpu: float | None = None  # 1-minute load average over logical CPUs
    gpu_memory_percent: float | None = None
    controller_silent_seconds: float | None = None  # since the last successful heartbeat
    disk_free_mb: int | None = None  # the artifact volume (also reported for disk admission)
    state_disk_free_mb: int | None = None  # the volume of the node's state store
    network_link_up: bool | None = None  # some non-loopback interface is up
    network_route_up: bool | None = None  # a route reaches the controller (or a default one)

    def merged(self, values: Mapping[str, Any]) -> Readings:
        known = {f.name for f in dataclasses.fields(self)}
        return dataclasses.replace(self, **{k: v for k, v in values.items() if k in known})


@dataclass(frozen=True)
class ProtectionPolicy:
    """Thresholds from the node's ``NodePolicy`` (schemas/node-policy.schema.json)."""

    dedicated: bool = False
    sample_seconds: float = 2.0
    debounce_samples: int = 3
    recovery_cooldown_seconds: float = 60.0
    drain_grace_seconds: float = 120.0
    unknown_sensors: str = "ignore"  # ignore | throttle
    throttle_fraction: float = 0.5
    concurrency_multiplier: float = 0.5
    user_active_below_idle_seconds: float = 60.0
    user_recovered_above_idle_seconds: float = 300.0
    user_active_state: str = "paused"
    battery_throttle_below_percent: float | None = 50.0
    battery_pause_below_percent: float | None = 20.0
    battery_recover_above_percent: float = 60.0
    temperature_throttle_above_c: float | None = 85.0
    temperature_unhealthy_above_c: float | None = 95.0
    temperature_recover_below_c: float = 75.0
    cpu_throttle_above_percent: float | None = None
    cpu_recover_below_percent: float = 80.0
    memory_throttle_above_percent: float | None = 92.0
    memory_pause_above_percent: float | None = 97.0
    memory_recover_below_percent: float = 85.0
    load_throttle_above_per_cpu: float | None = None
    load_recover_below_per_cpu: float = 1.0
    gpu_memory_throttle_above_percent: float | None = 95.0
    gpu_memory_recover_below_percent: float = 85.0
    controller_silent_after_seconds: float | None = 30.0
    controller_silent_state: str = "throttled"
    disk_throttle_below_free_mb: float | None = 2048.0
    disk_unhealthy_below_free_mb: float | None = 256.0
    disk_recover_above_free_mb: float = 4096.0
    # None: the daemon decides (needed unless the controller is on this machine's loopback)
    network_required: bool | None = None
    network_lost_state: str = "unhealthy"

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any]) -> ProtectionPolicy:
        names = {f.name: f for f in dataclasses.fields(cls)}
        values = {k: v for k, v in spec.items() if k in names}
        return cls(**values)


@dataclass(frozen=True)
class Condition:
    """One protective rule: when it fires, when it has recovered, what state it demands."""

    name: str
    state: HostState
    fires: Callable[[Readings], bool | None]  # None: the sensor is unknown
    recovered: Callable[[Readings], bool | None]


def _above(value: float | None, limit: float | None) -> bool | None:
    if limit is None or value is None:
        return None if limit is not None else False
    return value > limit


def _below(value: float | None, limit: float | None) -> bool | None:
    if limit is None or value is None:
        return None if limit is not None else False
    return value < limit


def _on_battery(r: Readings) -> bool | None:
    if r.on_ac_power is None and r.battery_percent is None:
        return None
    return r.on_ac_power is False


def conditions(policy: ProtectionPolicy) -> list[Condition]:
    p = policy
    rules = [
        Condition(
            "temperature_critical",
            HostState.UNHEALTHY,
            lambda r: _above(r.temperature_c, p.temperature_unhealthy_above_c),
            lambda r: _below(r.temperature_c, p.temperature_recover_below_c),
        ),
        Condition(
            "temperature_high",
            HostState.THROTTLED,
            lambda r: _above(r.temperature_c, p.temperature_throttle_above_c),
            lambda r: _below(r.temperature_c, p.temperature_recover_below_c),
        ),
        Condition(
            "memory_critical",
            HostState.PAUSED,
            lambda r: _above(r.memory_percent, p.memory_pause_above_percent),
            lambda r: _below(r.memory_percent, p.memory_recover_below_percent),
        ),
        Condition(
            "memory_pressure",
            HostState.THROTTLED,
            lambda r: _above(r.memory_percent, p.memory_throttle_above_percent),
            lambda r: _below(r.memory_percent, p.memory_recover_below_percent),
        ),
        Condition(
            "cpu_pressure",
            HostState.THROTTLED,
            lambda r: _above(r.cpu_percent, p.cpu_throttle_above_percent),
            lambda r: _below(r.cpu_percent, p.cpu_recover_below_percent),
        ),
        Condition(
            "load_pressure",
            HostState.THROTTLED,
            lambda r: _above(r.load_per_cpu, p.load_throttle_above_per_cpu),
            lambda r: _below(r.load_per_cpu, p.load_recover_below_per_cpu),
        ),
        Condition(
            "gpu_memory_pressure",
            HostState.THROTTLED,
            lambda r: _above(r.gpu_memory_percent, p.gpu_memory_throttle_above_percent),
            lambda r: _below(r.gpu_memory_percent, p.gpu_memory_recover_below_percent),
        ),
        Condition(
            "controller_unreachable",
            HostState(p.controller_silent_state),
            lambda r: _above(r.controller_silent_seconds, p.controller_silent_after_seconds),
            lambda r: _below(r.controller_silent_seconds, p.controller_silent_after_seconds),
        ),
    ]
    rules += disk_and_network_conditions(p)
    if not p.dedicated:
        rules += [
            Condition(
                "user_active",
                HostState(p.user_active_state),
                lambda r: _below(r.idle_seconds, p.user_active_below_idle_seconds),
                lambda r: _above(r.idle_seconds, p.user_recovered_above_idle_seconds),
            ),
            Condition(
                "battery_critical",
                HostState.PAUSED,
                lambda r: _battery_low(r, p.battery_pause_below_percent),
                lambda r: _battery_ok(r, p.battery_recover_above_percent),
            ),
            Condition(
                "battery_low",
                HostState.THROTTLED,
                lambda r: _battery_low(r, p.battery_throttle_below_percent),
                lambda r: _battery_ok(r, p.battery_recover_above_percent),
            ),
        ]
    return rules


def _disk_under(r: Readings, limit: float | None, *, or_at: bool = False) -> bool | None:
    """Either volume under ``limit`` is True; otherwise an unknown volume is unknown."""
    if limit is None:
        return False
    values = (r.disk_free_mb, r.state_disk_free_mb)
    if any(v is not None and (v <= limit if or_at else v < limit) for v in values):
        return True
    return None if None in values else False


def _negated(value: bool | None) -> bool | None:
    return None if value is None else not value


def disk_and_network_conditions(p: ProtectionPolicy) -> list[Condition]:
    """Disk pressure on the artifact and state volumes; losing the network (when the
    controller is not on this machine) is the spec's connectivity failure."""
    rules = [
        Condition(
            "disk_critical",
            HostState.UNHEALTHY,
            lambda r: _disk_under(r, p.disk_unhealthy_below_free_mb),
            lambda r: _negated(_disk_under(r, p.disk_recover_above_free_mb, or_at=True)),
        ),
        Condition(
            "disk_low",
            HostState.THROTTLED,
            lambda r: _disk_under(r, p.disk_throttle_below_free_mb),
            lambda r: _negated(_disk_under(r, p.disk_recover_above_free_mb, or_at=True)),
        ),
    ]
    if p.network_required:
        rules += [
            Condition(
                "network_link_down",
                HostState(p.network_lost_state),
                lambda r: _negated(r.network_link_up),
                lambda r: r.network_link_up,
            ),
            Condition(
                "network_route_lost",
                HostState(p.network_lost_state),
                lambda r: _negated(r.network_route_up),
                lambda r: r.network_route_up,
            ),
        ]
    return rules


def _battery_low(r: Readings, limit: float | None) -> bool | None:
    if limit is None:
        return False
    on_battery = _on_battery(r)
    if on_battery is None or r.battery_percent is None:
        return None
    return on_battery and r.battery_percent < limit


def _battery_ok(r: Readings, limit: float) -> bool | None:
    on_battery = _on_battery(r)
    if on_battery is None:
        return None
    return not on_battery or (r.battery_percent is not None and r.battery_percent > limit)


@dataclass
class ConditionTrack:
    active: bool = False
    firing: int = 0  # consecutive samples over the trigger threshold
    recovering: int = 0  # consecutive samples past the recovery threshold


@dataclass(frozen=True)
class Decision:
    """The protection loop's verdict for one sample."""

    state: HostState  # what the host reports (before overrides)
    target: HostState  # the strictest active condition
    reasons: tuple[str, ...]
    unknown: tuple[str, ...]
    concurrency_multiplier: float
    since: float  # when ``state`` was entered

    def describe(self) -> dict[str, object]:
        return {
            "state": self.state.value,
            "target": self.target.value,
            "reasons": list(self.reasons),
            "unknown_sensors": list(self.unknown),
            "concurrency_multiplier": self.concurrency_multiplier,
            "since": self.since,
        }


@dataclass
class ProtectionMachine:
    """Debounce, recovery thresholds and cooldown over a stream of samples."""

    policy: ProtectionPolicy = field(default_factory=ProtectionPolicy)
    state: HostState = HostState.ACCEPTING
    since: float = 0.0
    held_at: float | None = None  # last time the conditions demanded the current state
    grace_started: float | None = None
    tracks: dict[str, ConditionTrack] = field(default_factory=dict)

    def step(self, readings: Readings, now: float, *, busy: bool = False) -> Decision:
        unknown: list[str] = []
        active: list[Condition] = []
        need = max(1, self.policy.debounce_samples)
        for rule in conditions(self.policy):
            track = self.tracks.setdefault(rule.name, ConditionTrack())
            fires = rule.fires(readings)
            if fires is None:
                unknown.append(rule.name)
                track.firing = 0  # an unknown sample neither confirms nor clears
            elif fires:
                track.firing += 1
                track.recovering = 0
                if track.firing >= need:
                    track.active = True
            else:
                track.firing = 0
                if track.active and rule.recovered(readings):
                    track.recovering += 1
                    if track.recovering >= need:
                        track.active, track.recovering = False, 0
                else:
                    track.recovering = 0
            if track.active:
                active.append(rule)
        target = HostState.ACCEPTING
        for rule in active:
            target = stricter(target, rule.state)
        reasons = [r.name for r in active]
        if unknown and self.policy.unknown_sensors == "throttle":
            target = stricter(target, HostState.THROTTLED)
            reasons.append("unknown_sensors")
        self._move(target, now, busy)
        return Decision(
            state=self.state,
            target=target,
            reasons=tuple(sorted(reasons)),
            unknown=tuple(sorted(unknown)),
            concurrency_multiplier=multiplier(self.state, self.policy),
            since=self.since,
        )

    def _move(self, target: HostState, now: float, busy: bool) -> None:
        wanted = target
        if target not in (HostState.ACCEPTING, HostState.THROTTLED, HostState.DRAINING):
            # no new work: let running requests finish first, within the grace
            if self.grace_started is None and SEVERITY[target] > SEVERITY[self.state]:
                self.grace_started = now
            in_grace = (
                self.grace_started is not None
                and now - self.grace_started < self.policy.drain_grace_seconds
            )
            if busy and in_grace and self.state is not target:
                wanted = HostState.DRAINING
        else:
            self.grace_started = None
        if SEVERITY[wanted] >= SEVERITY[self.state]:
            self._enter(wanted, now)
            self.held_at = now
        elif self.held_at is None or now - self.held_at >= self.policy.recovery_cooldown_seconds:
            self._enter(wanted, now)

    def _enter(self, state: HostState, now: float) -> None:
        if state is not self.state:
            self.state, self.since = state, now


def multiplier(state: HostState, policy: ProtectionPolicy) -> float:
    """The share of each engine's slots the router may fill on this host."""
    if state is HostState.ACCEPTING:
        return 1.0
    if state is HostState.THROTTLED:
        return policy.concurrency_multiplier
    return 0.0
