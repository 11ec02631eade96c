"""Disk pressure on the artifact and state volumes: the readings, both sides of each
threshold, and the protection machine they drive (time is an argument).

Defaults: under 2048 MiB free on either volume throttles, under 256 MiB is unhealthy
(receipts can no longer be written safely), and both volumes need more than 4096 MiB
before either rule recovers.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain.states import HostState
from gridctl.node.disk_space import MIB, free_mb, read_disks
from gridctl.node.protection import ProtectionMachine, ProtectionPolicy, Readings, conditions
from gridctl.node.sensors import read_sensors

POLICY = ProtectionPolicy(debounce_samples=3, recovery_cooldown_seconds=60.0)
A, T, U = HostState.ACCEPTING, HostState.THROTTLED, HostState.UNHEALTHY
RULES = {rule.name: rule for rule in conditions(POLICY)}


def disks(artifact: int | None, state: int | None) -> Readings:
    return Readings(disk_free_mb=artifact, state_disk_free_mb=state)


def test_free_space_is_read_per_volume_and_a_failure_is_unknown(tmp_path: Path) -> None:
    usage = {tmp_path / "a": 5000 * MIB, tmp_path / "s": 100 * MIB}
    (tmp_path / "a").mkdir()
    (tmp_path / "s").mkdir()

    def fake(path: Path) -> SimpleNamespace:
        return SimpleNamespace(free=usage[path])

    reading = read_disks(tmp_path / "a", tmp_path / "s", fake)
    assert (reading.artifact_free_mb, reading.state_free_mb) == (5000, 100)

    def broken(_path: Path) -> SimpleNamespace:
        raise OSError("stale NFS handle")

    assert free_mb(tmp_path, broken) is None
    assert read_disks(tmp_path, None).state_free_mb is None
    real = free_mb(tmp_path / "not" / "made" / "yet")  # the volume it would be made on
    assert real is not None and real > 0
    sampled = read_sensors("h", tmp_path, controller_silent_seconds=None, state_dir=tmp_path)
    assert sampled.disk_free_mb is not None and sampled.state_disk_free_mb is not None


@pytest.mark.parametrize(
    ("rule", "artifact", "state", "fires"),
    [
        ("disk_low", 2047, 10_000, True),
        ("disk_low", 2048, 10_000, False),  # the threshold itself is not under it
        ("disk_low", 10_000, 2047, True),  # the state volume counts the same
        ("disk_low", 100, None, True),  # one low volume is enough
        ("disk_low", 10_000, None, None),  # the other is unknown: unknown
        ("disk_low", None, None, None),
        ("disk_critical", 255, 10_000, True),
        ("disk_critical", 256, 10_000, False),
        ("disk_critical", 10_000, 255, True),
    ],
)
def test_both_sides_of_each_trigger(
    rule: str, artifact: int | None, state: int | None, fires: bool | None
) -> None:
    assert RULES[rule].fires(disks(artifact, state)) is fires


@pytest.mark.parametrize(
    ("artifact", "state", "recovered"),
    [
        (4097, 4097, True),
        (4096, 4097, False),  # the recovery threshold itself is not past it
        (4097, 4096, False),
        (3000, 9000, False),  # between trigger and recovery: not yet
        (9000, None, None),
    ],
)
def test_both_sides_of_the_recovery_threshold(
    artifact: int | None, state: int | None, recovered: bool | None
) -> None:
    for rule in ("disk_low", "disk_critical"):
        assert RULES[rule].recovered(disks(artifact, state)) is recovered


def test_disk_pressure_moves_the_host_with_debounce_recovery_and_cooldown() -> None:
    machine = ProtectionMachine(POLICY)

    def run(artifact: int, times: list[float]) -> list[HostState]:
        return [machine.step(disks(artifact, 50_000), t).state for t in times]

    assert run(1500, [0, 1]) == [A, A]  # debounce
    assert run(50_000, [2]) == [A]  # two low samples, then a good one: nothing happened
    assert run(1500, [3, 4, 5]) == [A, A, T]
    assert run(200, [6, 7, 8]) == [T, T, U]  # worse: unhealthy after its own debounce
    assert run(3000, [9, 10, 11, 12]) == [U] * 4  # between thresholds: held
    # past the recovery threshold: both rules clear after the debounce; cooldown after that
    assert run(5000, [13, 14, 15]) == [U, U, U]
    assert set(machine.step(disks(5000, 50_000), 16).reasons) == set()
    assert run(5000, [70, 75]) == [U, A]  # 60 s after the rules last demanded it (t=14)


def test_unknown_disks_never_throttle_by_default_and_do_with_throttle_policy() -> None:
    machine = ProtectionMachine(POLICY)
    for t in range(5):
        decision = machine.step(disks(None, None), float(t))
    assert decision.state is A and {"disk_low", "disk_critical"} <= set(decision.unknown)
    careful = ProtectionMachine(ProtectionPolicy(debounce_samples=1, unknown_sensors="throttle"))
    assert careful.step(disks(None, None), 0).state is T


def test_the_disk_rules_can_be_turned_off() -> None:
    off = ProtectionPolicy(
        debounce_samples=1, disk_throttle_below_free_mb=None, disk_unhealthy_below_free_mb=None
    )
    decision = ProtectionMachine(off).step(disks(1, 1), 0)
    assert decision.state is A and "disk_low" not in decision.unknown


FREE = st.one_of(st.none(), st.integers(min_value=0, max_value=20_000))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(FREE, FREE), min_size=1, max_size=40))
def test_a_disk_state_needs_debounced_evidence(
    samples: list[tuple[int | None, int | None]],
) -> None:
    """Unhealthy for disk only after ``debounce`` consecutive samples under the critical
    threshold, throttled only after as many under the low one; unknown readings never
    count as pressure."""
    machine = ProtectionMachine(POLICY)
    run_critical = run_low = 0
    seen_critical = seen_low = False
    for t, (artifact, state) in enumerate(samples):
        known = [v for v in (artifact, state) if v is not None]
        run_critical = run_critical + 1 if any(v < 256 for v in known) else 0
        run_low = run_low + 1 if any(v < 2048 for v in known) else 0
        seen_critical = seen_critical or run_critical >= 3
        seen_low = seen_low or run_low >= 3
        state_now = machine.step(disks(artifact, state), float(t)).state
        if state_now is U:
            assert seen_critical
        if state_now is T:
            assert seen_low
