"""Idle time from systemd-logind over a real D-Bus: a ``dbus-daemon --session`` this test
starts, with a fake logind (jeepney) owning ``org.freedesktop.login1`` on it.

The readings then drive the protection machine (time is an argument): the user becoming
active pauses the host only after the debounce, idleness between the two thresholds
changes nothing, and recovery waits for its debounce and the cooldown. A bus that is
missing, or has no logind, reads unknown: never "active" (0 s) and never "idle".
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jeepney import MessageType, new_error, new_method_return
from jeepney.bus_messages import message_bus
from jeepney.io.blocking import open_dbus_connection

from gridctl.domain.states import HostState
from gridctl.node.idle_logind import LogindIdle, idle_from_hints
from gridctl.node.protection import ProtectionMachine, ProtectionPolicy, Readings
from gridctl.node.sensors import read_sensors

NOW = 1_800_000_000.0
POLICY = ProtectionPolicy(debounce_samples=3, recovery_cooldown_seconds=60.0)

needs_dbus = pytest.mark.skipif(
    shutil.which("dbus-daemon") is None, reason="dbus-daemon is not installed"
)


class FakeLogind:
    """``org.freedesktop.login1`` answering ``Properties.GetAll`` on the Manager object."""

    def __init__(self, address: str) -> None:
        self.properties: dict[str, tuple[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._connection = open_dbus_connection(bus=address)
        reply = self._connection.send_and_get_reply(
            message_bus.RequestName("org.freedesktop.login1"), timeout=5
        )
        assert reply.body == (1,), reply.body  # primary owner
        self.calls = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def hints(self, idle: bool, since_us: int) -> None:
        with self._lock:
            self.properties = {"IdleHint": ("b", idle), "IdleSinceHint": ("t", since_us)}

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                message = self._connection.receive(timeout=0.1)
            except TimeoutError:
                continue
            except OSError:
                return
            header = message.header
            if header.message_type is not MessageType.method_call:
                continue
            if header.fields.get(3) == "GetAll" and message.body == (
                "org.freedesktop.login1.Manager",
            ):
                with self._lock:
                    body = dict(self.properties)
                self.calls += 1
                self._connection.send(new_method_return(message, "a{sv}", (body,)))
            else:
                self._connection.send(
                    new_error(message, "org.freedesktop.DBus.Error.UnknownMethod")
                )

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._connection.close()


@pytest.fixture
def session_bus(tmp_path: Path) -> Iterator[str]:
    """A private ``dbus-daemon --session`` on a socket in ``tmp_path``; its address."""
    if shutil.which("dbus-daemon") is None:
        pytest.skip("dbus-daemon is not installed")
    daemon = subprocess.Popen(
        [
            "dbus-daemon",
            "--session",
            "--nofork",
            "--nopidfile",
            f"--address=unix:path={tmp_path / 'bus'}",
            "--print-address=1",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "DBUS_SESSION_BUS_ADDRESS": ""},
    )
    try:
        assert daemon.stdout is not None
        ready, _, _ = select.select([daemon.stdout], [], [], 20)
        assert ready, "dbus-daemon printed no address within 20 s"
        address = daemon.stdout.readline().decode().strip()
        assert address.startswith("unix:"), address
        yield address
    finally:
        daemon.terminate()
        try:
            daemon.wait(timeout=10)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=10)


@pytest.fixture
def logind(session_bus: str) -> Iterator[FakeLogind]:
    fake = FakeLogind(session_bus)
    try:
        yield fake
    finally:
        fake.stop()


# --- the hints alone --------------------------------------------------------------------


def test_hints_map_to_idle_seconds_and_silence_to_unknown() -> None:
    assert idle_from_hints(True, int((NOW - 400) * 1e6), NOW) == pytest.approx(400)
    assert idle_from_hints(False, int((NOW - 400) * 1e6), NOW) == 0.0  # active now
    assert idle_from_hints(True, int((NOW + 5) * 1e6), NOW) == 0.0  # a clock step back
    assert idle_from_hints(False, 0, NOW) is None  # nobody ever set the hint
    assert idle_from_hints(True, 0, NOW) is None  # no session at all
    assert idle_from_hints(None, 5, NOW) is None
    assert idle_from_hints(True, True, NOW) is None
    assert idle_from_hints("yes", 5, NOW) is None


# --- a real bus -------------------------------------------------------------------------


@needs_dbus
def test_idle_is_read_from_logind_on_the_bus(logind: FakeLogind, session_bus: str) -> None:
    clock = [NOW]
    reader = LogindIdle(session_bus, clock=lambda: clock[0])
    logind.hints(True, int((NOW - 400) * 1e6))
    assert reader() == pytest.approx(400)
    logind.hints(False, int((NOW - 3) * 1e6))
    assert reader() == 0.0
    logind.hints(False, 0)
    assert reader() is None
    assert logind.calls == 3  # one connection, one call per sample
    reader.close()


@needs_dbus
def test_user_activity_from_logind_moves_the_host_with_debounce_and_recovery(
    logind: FakeLogind, session_bus: str
) -> None:
    clock = [NOW]
    reader = LogindIdle(session_bus, clock=lambda: clock[0])
    machine = ProtectionMachine(POLICY)

    def sample(t: float) -> HostState:
        clock[0] = NOW + t
        return machine.step(Readings(idle_seconds=reader()), NOW + t).state

    logind.hints(True, int((NOW - 1000) * 1e6))
    assert sample(0) is HostState.ACCEPTING  # idle 1000 s
    # the user comes back: active (0 s idle) is under the 60 s threshold
    logind.hints(False, int(NOW * 1e6) + 1)
    assert [sample(t) for t in (2, 4)] == [HostState.ACCEPTING] * 2  # debounce
    assert sample(6) is HostState.PAUSED
    # idle 100 s: past the trigger (60 s), short of the recovery threshold (300 s)
    logind.hints(True, int((NOW + 6) * 1e6))
    assert [sample(t) for t in (106, 108, 110, 112)] == [HostState.PAUSED] * 4
    # idle past 300 s: recovers after the debounce, then loosens only after the cooldown
    assert [sample(t) for t in (320, 322, 324)] == [HostState.PAUSED] * 3
    assert machine.tracks["user_active"].active is False
    assert sample(350) is HostState.PAUSED  # 60 s since protection last demanded it: not yet
    assert sample(385) is HostState.ACCEPTING
    reader.close()


@needs_dbus
def test_a_bus_without_logind_and_a_missing_bus_read_unknown(
    session_bus: str, tmp_path: Path
) -> None:
    nobody = LogindIdle(session_bus, timeout=2)
    assert nobody() is None and nobody.last_error is not None
    missing = LogindIdle(f"unix:path={tmp_path / 'no-such-bus'}")
    assert missing() is None and missing.last_error is not None
    machine = ProtectionMachine(POLICY)
    for t in range(5):
        decision = machine.step(Readings(idle_seconds=missing()), NOW + t)
    assert decision.state is HostState.ACCEPTING  # unknown is ignored by default
    assert "user_active" in decision.unknown  # and shown as unknown, not as 0 s


@needs_dbus
def test_logind_is_the_fallback_of_the_node_sensors(
    logind: FakeLogind, session_bus: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)  # no X11: logind answers
    monkeypatch.delenv("GRIDCTL_SENSOR_OVERRIDES", raising=False)
    logind.hints(False, int(NOW * 1e6))
    reading = read_sensors(
        "h1",
        tmp_path,
        controller_silent_seconds=None,
        idle_fallback=LogindIdle(session_bus),
    )
    assert reading.idle_seconds == 0.0
    assert read_sensors("h1", tmp_path, controller_silent_seconds=None).idle_seconds is None
