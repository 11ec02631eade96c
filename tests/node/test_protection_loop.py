"""The protection loop's shell: sensors and the test hook, persistence, NodePolicy files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.domain.states import HostState
from gridctl.errors import ConfigError
from gridctl.node import reports
from gridctl.node.protecting import ProtectionLoop, load_node_policy
from gridctl.node.protection import ProtectionPolicy, Readings
from gridctl.node.sensors import OVERRIDES_ENV, read_sensors
from gridctl.node.statestore import NodeStateStore


def test_sensors_read_the_machine_and_the_test_hook(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = read_sensors("h1", tmp_path, controller_silent_seconds=None)
    assert real.memory_percent is not None and real.disk_free_mb is not None
    hook = tmp_path / "sensors.json"
    hook.write_text(json.dumps({"*": {"temperature_c": 70}, "h1": {"idle_seconds": 0}}))
    monkeypatch.setenv(OVERRIDES_ENV, str(hook))
    mine = read_sensors("h1", tmp_path, controller_silent_seconds=3.0)
    other = read_sensors("h2", tmp_path, controller_silent_seconds=None)
    assert (mine.idle_seconds, mine.temperature_c, mine.controller_silent_seconds) == (0, 70, 3.0)
    assert (other.idle_seconds, other.temperature_c) == (real.idle_seconds, 70)
    hook.write_text("not json")  # a broken hook file is ignored, never fatal
    assert read_sensors("h1", tmp_path, controller_silent_seconds=None).idle_seconds != 0


def test_the_loop_persists_and_a_restart_resumes_the_protective_state(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "node.sqlite3")
    clock = [1000.0]
    policy = ProtectionPolicy(debounce_samples=2, recovery_cooldown_seconds=60)
    reading = [Readings(idle_seconds=1)]
    loop = ProtectionLoop(policy, lambda: reading[0], lambda: False, store, lambda: clock[0])
    assert loop.sample().state is HostState.ACCEPTING
    clock[0] += 2
    assert loop.sample().state is HostState.PAUSED
    assert json.loads(store.get_meta("protection") or "{}")["reasons"] == ["user_active"]
    restarted = ProtectionLoop(policy, lambda: reading[0], lambda: False, store, lambda: clock[0])
    assert restarted.current().state is HostState.PAUSED
    reading[0] = Readings(idle_seconds=900)
    clock[0] += 5
    assert restarted.sample().state is HostState.PAUSED  # recovery needs debounce + cooldown
    clock[0] += 61
    restarted.sample()
    assert restarted.sample().state is HostState.ACCEPTING
    store.close()


def test_the_envelope_carries_the_multiplier_not_the_readings() -> None:
    envelope = reports.allocator_envelope(
        HostState.THROTTLED,
        [],
        [],
        0.0,
        endpoint_of=lambda _r: None,
        engine_api_key="k",
        max_concurrency=2,
        protection={
            "concurrency_multiplier": 0.5,
            "reasons": ["temperature_high"],
            "unknown_sensors": ["battery_low"],
            "state": "throttled",
        },
    )
    assert envelope["concurrency_multiplier"] == 0.5
    assert envelope["protection"] == {
        "reasons": ["temperature_high"],
        "unknown_sensors": ["battery_low"],
    }


def test_node_policy_files_are_validated(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "apiVersion: gridctl/v1\nkind: NodePolicy\nmetadata: {name: laptop}\n"
        "spec: {debounce_samples: 2, cpu_throttle_above_percent: 90, unknown_sensors: throttle}\n"
    )
    policy = load_node_policy(good)
    assert (policy.debounce_samples, policy.cpu_throttle_above_percent) == (2, 90)
    assert policy.unknown_sensors == "throttle" and policy.recovery_cooldown_seconds == 60.0
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: gridctl/v1\nkind: NodePolicy\nmetadata: {name: x}\n"
        "spec: {debounce_samples: 0, user_active_state: accepting}\n"
    )
    with pytest.raises(ConfigError) as error:
        load_node_policy(bad)
    assert len(error.value.issues) == 2
