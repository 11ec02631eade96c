"""Host-protection transitions from sensor sequences: one table, one row per behaviour."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gridctl.domain.states import HostState
from gridctl.node.protection import (
    ProtectionMachine,
    ProtectionPolicy,
    Readings,
    combine,
    multiplier,
)

A, T, D, P, U, Q = (
    HostState.ACCEPTING,
    HostState.THROTTLED,
    HostState.DRAINING,
    HostState.PAUSED,
    HostState.UNHEALTHY,
    HostState.QUARANTINED,
)
CALM = Readings(idle_seconds=900, memory_percent=40, cpu_percent=10, temperature_c=50)
USER = Readings(idle_seconds=2, memory_percent=40, cpu_percent=10, temperature_c=50)
HOT = Readings(idle_seconds=900, memory_percent=40, temperature_c=88)
CRITICAL = Readings(idle_seconds=900, memory_percent=40, temperature_c=99)
WARM = Readings(idle_seconds=900, memory_percent=40, temperature_c=80)  # between thresholds
ON_BATTERY_LOW = Readings(idle_seconds=900, battery_percent=35, on_ac_power=False)
ON_BATTERY_EMPTY = Readings(idle_seconds=900, battery_percent=10, on_ac_power=False)
PLUGGED = Readings(idle_seconds=900, battery_percent=10, on_ac_power=True)
UNKNOWN = Readings()
POLICY = ProtectionPolicy(debounce_samples=3, recovery_cooldown_seconds=30, drain_grace_seconds=20)


@dataclass(frozen=True)
class Row:
    name: str
    samples: list[Readings]
    expected: list[HostState]
    policy: ProtectionPolicy = POLICY
    busy: list[bool] | None = None


ROWS = [
    Row("calm stays accepting", [CALM] * 4, [A, A, A, A]),
    Row("a one-sample spike is debounced", [CALM, HOT, CALM, HOT, CALM], [A] * 5),
    Row("a sustained heat throttles after three samples", [HOT] * 4, [A, A, T, T]),
    Row("critical heat is unhealthy", [CRITICAL] * 3, [A, A, U]),
    Row("user activity pauses the host", [USER] * 3, [A, A, P]),
    Row(
        "recovery needs the looser threshold, not just below the trigger",
        [HOT] * 3 + [WARM] * 20,
        [A, A, T] + [T] * 20,
    ),
    Row(
        "recovery waits for debounce and the cooldown (samples are 5 s apart)",
        [HOT] * 3 + [CALM] * 8,
        [A, A, T, T, T, T, T, T, T, T, A],
    ),
    Row(
        "flapping is suppressed by the recovery cooldown",
        ([HOT] * 3 + [CALM] * 3) * 2 + [CALM] * 6,
        [A, A] + [T] * 14 + [A, A],
    ),
    Row(
        "a low battery throttles, an empty one pauses",
        [ON_BATTERY_LOW] * 3 + [ON_BATTERY_EMPTY] * 3,
        [A, A, T, T, T, P],
    ),
    Row("a plugged-in machine ignores its battery level", [PLUGGED] * 4, [A] * 4),
    Row(
        "dedicated hosts ignore user activity and battery",
        [USER] * 3 + [ON_BATTERY_EMPTY] * 3,
        [A] * 6,
        ProtectionPolicy(debounce_samples=3, dedicated=True),
    ),
    Row("unknown sensors are ignored by default", [UNKNOWN] * 4, [A] * 4),
    Row(
        "or conservatively throttle",
        [UNKNOWN] * 2,
        [T, T],
        ProtectionPolicy(unknown_sensors="throttle"),
    ),
    Row(
        "running requests drain first, within the grace",
        [USER] * 7,
        [A, A, D, D, P, P, P],
        busy=[True, True, True, True, False, False, False],
    ),
    Row(
        "the drain grace is bounded",
        [USER] * 8,
        [A, A, D, D, D, D, P, P],
        busy=[True] * 8,
    ),
    Row(
        "the controller falling silent throttles",
        [Readings(controller_silent_seconds=s) for s in (5, 40, 45, 50, 1, 1, 1)],
        [A, A, A, T, T, T, T],
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_transitions(row: Row) -> None:
    machine = ProtectionMachine(row.policy)
    got = []
    busy = row.busy or [False] * len(row.samples)
    for i, (sample, running) in enumerate(zip(row.samples, busy, strict=True)):
        got.append(machine.step(sample, now=5.0 * i, busy=running).state)
    assert got == row.expected


OVERRIDES = [
    (None, A, A),
    (None, U, U),
    (D, A, D),  # an override outranks the controller
    (D, P, P),  # local safety makes it stricter
    (P, T, P),  # but never looser
    (Q, U, Q),
    (D, U, U),  # an operator cannot turn a critically hot machine back on
]


@pytest.mark.parametrize(("override", "protected", "expected"), OVERRIDES)
def test_override_is_stricter_only(
    override: HostState | None, protected: HostState, expected: HostState
) -> None:
    assert combine(override, protected) is expected


def test_reasons_and_multiplier() -> None:
    machine = ProtectionMachine(POLICY)
    for i in range(3):
        decision = machine.step(HOT, now=float(i))
    assert decision.reasons == ("temperature_high",)
    assert decision.concurrency_multiplier == POLICY.concurrency_multiplier
    assert "battery_low" in decision.unknown
    assert multiplier(P, POLICY) == 0.0 and multiplier(A, POLICY) == 1.0
