"""Idle time from input devices: a FIFO stands in for ``/dev/input/eventN``.

The test writes packed ``struct input_event`` records into the FIFO the reader's
thread polls: a key press or pointer motion resets the idle time, ``EV_SYN``
and ``EV_MSC`` alone do not, nothing seen yet is unknown, and a missing device (or one
that went away) makes the source unavailable, which reads unknown, never 0 s. The
readings then drive the protection machine through ``read_sensors`` on both sides of
the idle thresholds, with debounce, recovery and the cooldown.
"""

from __future__ import annotations

import array
import fcntl
import os
import tempfile
import termios
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.credentials import write_secret_file
from gridctl.domain.states import HostState
from gridctl.node.actuator import PortRange
from gridctl.node.daemon import NodeConfig, build_node, shutdown
from gridctl.node.idle_input import (
    EV_ABS,
    EV_KEY,
    EV_MSC,
    EV_REL,
    EV_SYN,
    INPUT_EVENT,
    InputIdle,
    keyboards_and_pointers,
    user_event_count,
    user_event_handlers,
)
from gridctl.node.idle_logind import LogindIdle
from gridctl.node.protection import ProtectionMachine, ProtectionPolicy, Readings
from gridctl.node.sensors import IdleSources, read_sensors
from tests.node.controller_harness import running_controller

START = 10_000.0
POLICY = ProtectionPolicy(debounce_samples=3, recovery_cooldown_seconds=60.0)
WAIT_SECONDS = 10.0
KEY_A, BTN_LEFT, REL_X, ABS_X, MSC_SCAN = 30, 0x110, 0, 0, 4


def record(kind: int, code: int = 0, value: int = 0) -> bytes:
    return INPUT_EVENT.pack(0, 0, kind, code, value)


def key_press() -> bytes:
    """What a keyboard sends for one key: scan code, key down, frame end."""
    return record(EV_MSC, MSC_SCAN, KEY_A) + record(EV_KEY, KEY_A, 1) + record(EV_SYN)


def wait_until(done: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not done():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


class FakeDevice:
    """A FIFO the test writes records into; the writer end is held open (O_RDWR never blocks)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.fd: int | None = os.open(path, os.O_RDWR)
        self.written = 0  # bytes, all of which the reader consumes in order

    def write(self, data: bytes) -> None:
        assert self.fd is not None
        self.written += os.write(self.fd, data)

    def unread(self) -> int:
        """Bytes written that no reader has taken yet."""
        assert self.fd is not None
        waiting = array.array("i", [0])
        fcntl.ioctl(self.fd, termios.FIONREAD, waiting)
        return waiting[0]

    def unplug(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


@pytest.fixture
def device(tmp_path: Path) -> Iterator[FakeDevice]:
    fake = FakeDevice(tmp_path / "event0")
    try:
        yield fake
    finally:
        fake.unplug()


@pytest.fixture
def clock() -> list[float]:
    return [START]


@pytest.fixture
def reader(device: FakeDevice, clock: list[float]) -> Iterator[InputIdle]:
    with InputIdle([device.path], clock=lambda: clock[0], poll_seconds=0.2) as watching:
        yield watching


def send(reader: InputIdle, device: FakeDevice, data: bytes) -> None:
    """Write bytes and wait until the reader has counted every whole record written so far."""
    device.write(data)
    whole = device.written // INPUT_EVENT.size
    wait_until(lambda: reader.records_read >= whole, "the reader to consume the records")


# --- the records alone ------------------------------------------------------------------


def test_only_keys_and_pointers_are_the_users_hand() -> None:
    assert INPUT_EVENT.size == (24 if struct_long_is_64_bit() else 16)
    assert user_event_count(key_press()) == 1
    assert user_event_count(record(EV_REL, REL_X, 3) + record(EV_ABS, ABS_X, 100)) == 2
    assert user_event_count(record(EV_SYN) + record(EV_MSC, MSC_SCAN, 1)) == 0
    assert user_event_count(record(5, 0, 1)) == 0  # EV_SW: a lid switch is not a hand
    assert user_event_count(key_press()[:-1]) == 1  # a torn last record is not counted


def struct_long_is_64_bit() -> bool:
    return INPUT_EVENT.size // 2 - 4 == 8


def test_discovery_keeps_keyboards_and_pointers_only(tmp_path: Path) -> None:
    proc = tmp_path / "devices"
    proc.write_text(
        "I: Bus=0011 Vendor=0001 Product=0001 Version=ab41\n"
        'N: Name="AT Translated Set 2 keyboard"\n'
        "H: Handlers=sysrq kbd leds event3 \n\n"
        'N: Name="SynPS/2 Synaptics TouchPad"\n'
        "H: Handlers=mouse0 event7 \n\n"
        'N: Name="ST LIS3LV02DL Accelerometer"\n'
        "H: Handlers=js0 event8 \n\n"
        'N: Name="Lid Switch"\n'
        "H: Handlers=event0 \n",
        encoding="utf-8",
    )
    assert user_event_handlers(proc.read_text(encoding="utf-8")) == ["event3", "event7"]
    assert keyboards_and_pointers(proc, Path("/dev/input")) == [
        Path("/dev/input/event3"),
        Path("/dev/input/event7"),
    ]
    assert keyboards_and_pointers(tmp_path / "no-proc") == []


# --- a device ---------------------------------------------------------------------------


def test_a_key_press_resets_idle_and_frames_alone_do_not(
    reader: InputIdle, device: FakeDevice, clock: list[float]
) -> None:
    assert reader.open_devices == 1
    assert reader() is None  # nothing seen since start: unknown, not "idle since start"
    send(reader, device, record(EV_SYN) + record(EV_MSC, MSC_SCAN, 1))
    assert reader() is None  # frames and scan codes alone are not the user
    send(reader, device, key_press())
    assert reader() == 0.0
    clock[0] = START + 90
    assert reader() == pytest.approx(90)
    send(reader, device, record(EV_SYN) * 5)
    assert reader() == pytest.approx(90)  # still 90: no reset
    send(reader, device, record(EV_REL, REL_X, -2) + record(EV_SYN))
    assert reader() == 0.0  # the pointer moved
    clock[0] = START + 95
    assert reader() == pytest.approx(5)


def test_a_record_torn_across_writes_is_read_whole(reader: InputIdle, device: FakeDevice) -> None:
    press = record(EV_KEY, KEY_A, 1)
    device.write(press[:10])
    wait_until(lambda: device.unread() == 0, "the reader to take the first half")
    assert reader.records_read == 0 and reader() is None
    send(reader, device, press[10:] + record(EV_SYN))
    assert reader.records_read == 2
    assert reader() == 0.0


def test_no_device_and_a_missing_device_read_unknown(tmp_path: Path) -> None:
    with InputIdle([], poll_seconds=0.2) as nothing:
        assert nothing() is None and nothing.open_devices == 0
    with InputIdle([tmp_path / "no-such-event0"], poll_seconds=0.2) as missing:
        assert missing() is None and missing.open_devices == 0
        assert missing.last_error is not None and "no-such-event0" in missing.last_error


def test_a_device_that_goes_away_makes_the_source_unavailable(
    reader: InputIdle, device: FakeDevice
) -> None:
    send(reader, device, key_press())
    assert reader() == 0.0
    device.unplug()  # the writer end closes: EOF, as an unplugged keyboard reads ENODEV
    wait_until(lambda: reader.open_devices == 0, "the reader to drop the device")
    assert reader() is None  # unavailable: never 0 s, never a stale reading


def test_close_stops_the_thread_and_closes_the_descriptors(device: FakeDevice) -> None:
    before = set(os.listdir("/proc/self/fd"))
    reader = InputIdle([device.path], poll_seconds=30.0).start()  # poll() would wait 30 s
    assert any(t.name == "input-idle" for t in threading.enumerate())
    began = time.monotonic()
    reader.close()
    assert time.monotonic() - began < 2.0  # woken by its pipe, not by the poll timeout
    assert not any(t.name == "input-idle" for t in threading.enumerate())
    assert set(os.listdir("/proc/self/fd")) <= before
    reader.close()  # twice is harmless
    assert reader.start() is reader and reader() is None  # a closed reader stays closed


def test_devices_plugged_in_later_are_found_by_the_rescan(
    tmp_path: Path, clock: list[float]
) -> None:
    found: list[Path] = []
    with InputIdle(lambda: list(found), clock=lambda: clock[0], rescan_seconds=0.1) as reader:
        assert reader.open_devices == 0
        late = FakeDevice(tmp_path / "event9")
        try:
            found.append(late.path)
            wait_until(lambda: reader.open_devices == 1, "the rescan to open the new device")
            send(reader, late, key_press())
            assert reader() == 0.0
        finally:
            late.unplug()


# --- through the node's sensors into the protection machine ----------------------------


def test_input_activity_moves_the_host_through_the_real_sensor_path(
    reader: InputIdle,
    device: FakeDevice,
    clock: list[float],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DISPLAY", raising=False)  # no X11: the input devices answer
    monkeypatch.delenv("GRIDCTL_SENSOR_OVERRIDES", raising=False)
    never_known = IdleSources(lambda: None)  # logind without a desktop: unknown
    sources = IdleSources(reader, never_known)
    machine = ProtectionMachine(POLICY)

    def sample(t: float) -> HostState:
        clock[0] = START + t
        idle = read_sensors("h1", tmp_path, controller_silent_seconds=None, idle_fallback=sources)
        return machine.step(Readings(idle_seconds=idle.idle_seconds), START + t).state

    # before any event the rule is unknown and ignored: the host keeps accepting
    assert [sample(t) for t in (0, 2, 4, 6)] == [HostState.ACCEPTING] * 4
    assert "user_active" in machine.step(Readings(), START + 7).unknown
    # the user types at 8 s: under 60 s idle, paused only after the debounce
    clock[0] = START + 8
    send(reader, device, key_press())
    assert [sample(t) for t in (10, 12)] == [HostState.ACCEPTING] * 2
    assert sample(14) is HostState.PAUSED
    # idle 100 s: past the trigger (60 s), short of recovery (300 s): stays paused
    assert [sample(t) for t in (108, 110, 112, 114)] == [HostState.PAUSED] * 4
    # idle past 300 s: recovers after the debounce, loosens only after the cooldown
    assert [sample(t) for t in (320, 322, 324)] == [HostState.PAUSED] * 3
    assert machine.tracks["user_active"].active is False
    assert sample(350) is HostState.PAUSED  # 60 s since protection last demanded it
    assert sample(385) is HostState.ACCEPTING
    # one key press again: a single sample under 60 s does nothing (debounce)
    clock[0] = START + 386
    send(reader, device, key_press())
    assert sample(387) is HostState.ACCEPTING


def test_the_next_source_answers_while_the_devices_know_nothing(
    reader: InputIdle, device: FakeDevice
) -> None:
    logind_says = [400.0]
    sources = IdleSources(reader, lambda: logind_says[0])
    assert sources() == 400.0  # no event yet: logind's reading
    send(reader, device, key_press())
    assert sources() == 0.0  # the devices know now, and they are more precise
    sources.close()
    assert reader.open_devices == 0


# --- the safety property ----------------------------------------------------------------

RECORDS = st.lists(
    st.tuples(st.integers(0, 0x1F), st.integers(0, 0x2FF), st.integers(-(2**31), 2**31 - 1)),
    max_size=30,
)


@settings(max_examples=40, deadline=None)
@given(RECORDS, st.lists(st.integers(1, 60), max_size=10))
def test_only_a_users_event_ever_makes_idle_known(
    records: list[tuple[int, int, int]], cuts: list[int]
) -> None:
    """Whatever the stream and however the pipe splits it, idle is known iff the user acted."""
    stream = b"".join(record(kind, code, value) for kind, code, value in records)
    with tempfile.TemporaryDirectory() as scratch:
        fake = FakeDevice(Path(scratch) / "event0")
        try:
            with InputIdle([fake.path], clock=lambda: START, poll_seconds=0.2) as reader:
                rest = stream
                for cut in cuts:
                    if not rest:
                        break
                    fake.write(rest[:cut])
                    rest = rest[cut:]
                    wait_until(lambda: fake.unread() == 0, "the reader to take a piece")
                send(reader, fake, rest)
                assert reader.records_read == len(records)
                acted = any(kind in (EV_KEY, EV_REL, EV_ABS) for kind, _, _ in records)
                assert (reader() is not None) == acted
                assert reader() in (None, 0.0)
        finally:
            fake.unplug()


# --- the node daemon's lifecycle --------------------------------------------------------


def test_the_node_starts_the_input_reader_and_closes_it_at_shutdown(tmp_path: Path) -> None:
    with running_controller(tmp_path / "controller") as controller:
        token_file = tmp_path / "node.token"
        write_secret_file(token_file, controller.token("host-a") + "\n")
        config = NodeConfig(
            host_id="host-a",
            controller_url=controller.url,
            token_file=token_file,
            state_dir=tmp_path / "node",
            capacity_mb=4096,
            port_range=PortRange(29910, 29919),
            binary=Path("/nonexistent/llama-server"),
        )
        parts = build_node(config, instance_id="input-idle-test")
        assert parts.idle is not None
        readers = [s for s in parts.idle.sources if isinstance(s, InputIdle)]
        assert len(readers) == 1  # asked before logind
        assert isinstance(parts.idle.sources[1], LogindIdle)
        assert not any(t.name == "input-idle" for t in threading.enumerate())  # built, idle
        parts.idle.start()
        assert any(t.name == "input-idle" for t in threading.enumerate())
        shutdown(parts, config)
        assert not any(t.name == "input-idle" for t in threading.enumerate())
        assert readers[0]() is None and readers[0].open_devices == 0
