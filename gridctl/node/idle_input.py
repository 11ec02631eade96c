"""User idle time from Linux input devices: the keyboard and pointer themselves.

A Wayland or console session has no ``xprintidle``, and logind's idle hint is coarse:
the desktop flips it only after its own idle delay (often minutes), so "not idle"
covers anything from 0 s to that delay. The evdev devices (``/dev/input/event*``)
say exactly when a key was pressed or the pointer moved, for every local session
alike. They are readable only by root or the ``input`` group, so this source is
often unavailable; it is then unknown, never "active".

A background thread waits with ``poll()`` (``select()`` without its 1024-descriptor
limit) on the opened devices and on a wake-up pipe, so ``close`` is immediate. It
decodes ``struct input_event`` records and stamps the monotonic time of the last user
event: ``EV_KEY`` (keys, buttons, auto-repeat), ``EV_REL`` (mouse motion, wheel) and
``EV_ABS`` (touchpad, touchscreen). ``EV_SYN`` frames, ``EV_MSC`` scan codes and
switches (a lid, a headphone jack) are not the user's hand and are ignored. The time
of reading is used, not the record's own timestamp, so a wall-clock step cannot fake
idleness.

Before the first user event since the reader started, idle time is **unknown**, not
"time since start". That would be a lower bound only, and a lower bound can never
prove the user is *active*: the protection rule reads "idle under 60 s" as a user at
the keyboard, so a freshly started node would pause its host for minutes on no
evidence at all (and the spec's "missing sensors are unknown, not zero" forbids
exactly that). An unknown reading lets the next source (logind) answer instead.
Once a device has produced an event, idle is ``now - last event``. With no readable
device (none found, permission denied, or every device gone) the source is
unavailable: unknown.

Devices come from a callable, rescanned every ``rescan_seconds`` so a keyboard
plugged in later is watched too; ``keyboards_and_pointers`` is the default
discovery (``/proc/bus/input/devices``: devices with a ``kbd`` or ``mouse``
handler, which leaves out accelerometers and other always-chattering sensors).
Tests hand the reader a FIFO and write packed records into it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import select
import struct
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

log = logging.getLogger("gridctl.node.sensors")

# struct input_event: struct timeval (two C longs), __u16 type, __u16 code, __s32 value;
# native sizes, 24 bytes on 64-bit Linux.
INPUT_EVENT = struct.Struct("@llHHi")
EV_SYN, EV_KEY, EV_REL, EV_ABS, EV_MSC = 0, 1, 2, 3, 4
USER_EVENT_TYPES = frozenset({EV_KEY, EV_REL, EV_ABS})
READ_EVENTS = 64  # records per read(): a burst of motion is drained in few calls
POLL_SECONDS = 1.0  # bounds how long the thread goes without checking its stop flag
RESCAN_SECONDS = 30.0
JOIN_SECONDS = 5.0
PROC_INPUT_DEVICES = Path("/proc/bus/input/devices")
DEV_INPUT = Path("/dev/input")
USER_HANDLERS = frozenset({"kbd", "mouse"})

DeviceSource = Callable[[], Iterable[Path]]


def user_event_count(records: bytes) -> int:
    """How many whole ``input_event`` records in ``records`` are the user's hand."""
    whole = len(records) - len(records) % INPUT_EVENT.size
    return sum(
        1
        for _sec, _usec, kind, _code, _value in INPUT_EVENT.iter_unpack(records[:whole])
        if kind in USER_EVENT_TYPES
    )


def user_event_handlers(proc_devices_text: str) -> list[str]:
    """The ``eventN`` names of devices with a keyboard or mouse handler, in file order."""
    found: list[str] = []
    for block in proc_devices_text.split("\n\n"):
        for line in block.splitlines():
            if not line.startswith("H: Handlers="):
                continue
            handlers = line.partition("=")[2].split()
            kinds = {h.rstrip("0123456789") for h in handlers}
            if kinds & USER_HANDLERS:
                found.extend(h for h in handlers if h.startswith("event"))
    return found


def keyboards_and_pointers(
    proc_devices: Path = PROC_INPUT_DEVICES, dev_input: Path = DEV_INPUT
) -> list[Path]:
    """Default discovery: the evdev nodes of this machine's keyboards and pointers."""
    try:
        text = proc_devices.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return [dev_input / name for name in user_event_handlers(text)]


class InputIdle:
    """Seconds since the last key or pointer event; call it once per protection sample."""

    def __init__(
        self,
        devices: DeviceSource | Iterable[Path] = keyboards_and_pointers,
        *,
        clock: Callable[[], float] = time.monotonic,
        rescan_seconds: float = RESCAN_SECONDS,
        poll_seconds: float = POLL_SECONDS,
    ) -> None:
        if callable(devices):
            self._discover: DeviceSource = devices
        else:
            fixed = tuple(Path(p) for p in devices)
            self._discover = lambda: fixed
        self.clock = clock
        self.rescan_seconds = rescan_seconds
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._last_user_event: float | None = None
        self._open_devices = 0
        self.records_read = 0  # every record, the user's or not (tests wait on it)
        self.last_error: str | None = None  # why the last device failed to open or read
        self._stop = threading.Event()
        self._wake_read, self._wake_write = os.pipe()
        self._thread: threading.Thread | None = None
        self._closed = False

    # --- the protection loop's side -----------------------------------------------------

    def __call__(self) -> float | None:
        with self._lock:
            if self._open_devices == 0 or self._last_user_event is None:
                return None
            return max(0.0, self.clock() - self._last_user_event)

    @property
    def open_devices(self) -> int:
        with self._lock:
            return self._open_devices

    def start(self) -> InputIdle:
        """Open the devices and start watching them (once; a closed reader stays closed)."""
        if self._thread is None and not self._closed:
            devices = self._open_new({})  # the first scan happens before start returns
            self._thread = threading.Thread(
                target=self._watch, args=(devices,), name="input-idle", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop the thread (bounded wait) and close every descriptor."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        with contextlib.suppress(OSError):
            os.write(self._wake_write, b"x")
        if self._thread is not None:
            self._thread.join(timeout=JOIN_SECONDS)
            if self._thread.is_alive():  # pragma: no cover - poll() is bounded
                log.warning("input idle reader did not stop within %.0f s", JOIN_SECONDS)
                return  # the thread still owns its descriptors
        for fd in (self._wake_read, self._wake_write):
            with contextlib.suppress(OSError):
                os.close(fd)

    def __enter__(self) -> InputIdle:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    # --- the watching thread --------------------------------------------------------------

    def _watch(self, devices: dict[int, Path]) -> None:
        """Owns ``devices`` (fd -> path) until the stop flag; closes them on the way out."""
        partial: dict[int, bytes] = {}
        next_scan = time.monotonic() + self.rescan_seconds
        try:
            while not self._stop.is_set():
                if time.monotonic() >= next_scan:
                    devices.update(self._open_new(devices))
                    next_scan = time.monotonic() + self.rescan_seconds
                wait = min(self.poll_seconds, max(0.0, next_scan - time.monotonic()))
                ready = self._wait_readable(devices, wait)
                for fd in ready:
                    if fd != self._wake_read and not self._drain(fd, partial):
                        self._drop(fd, devices, partial)
        finally:
            for fd in list(devices):
                self._drop(fd, devices, partial)

    def _wait_readable(self, devices: dict[int, Path], seconds: float) -> list[int]:
        """The descriptors with data, an end of file or an error (poll: no FD_SETSIZE cap)."""
        poller = select.poll()
        for fd in (self._wake_read, *devices):
            poller.register(fd, select.POLLIN)
        try:
            return [fd for fd, _event in poller.poll(seconds * 1000)]
        except OSError as exc:  # pragma: no cover - EINTR is retried by Python itself
            self._note(f"poll: {exc}")
            return list(devices)

    def _drain(self, fd: int, partial: dict[int, bytes]) -> bool:
        """Read what ``fd`` has; False when the device is gone (EOF or an error)."""
        try:
            chunk = os.read(fd, INPUT_EVENT.size * READ_EVENTS)
        except BlockingIOError:
            return True
        except OSError as exc:  # ENODEV: unplugged
            self._note(f"reading input device: {exc}")
            return False
        if not chunk:
            return False
        records = partial.pop(fd, b"") + chunk  # a pipe may split a record; evdev never does
        whole = len(records) - len(records) % INPUT_EVENT.size
        if whole < len(records):
            partial[fd] = records[whole:]
        users = user_event_count(records[:whole])
        with self._lock:
            self.records_read += whole // INPUT_EVENT.size
            if users:
                self._last_user_event = self.clock()
        return True

    def _open_new(self, known: dict[int, Path]) -> dict[int, Path]:
        """Open the discovered devices not open yet; unreadable ones are skipped."""
        opened: dict[int, Path] = {}
        watched = set(known.values())
        try:
            paths = list(self._discover())
        except OSError as exc:
            self._note(f"listing input devices: {exc}")
            paths = []
        for path in paths:
            if path in watched or path in opened.values():
                continue
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.EACCES, errno.EPERM):
                    log.debug("input device %s: %s", path, exc)
                self._note(f"{path}: {exc.strerror or exc}")
                continue
            opened[fd] = path
        with self._lock:
            self._open_devices += len(opened)
        return opened

    def _drop(self, fd: int, devices: dict[int, Path], partial: dict[int, bytes]) -> None:
        if devices.pop(fd, None) is None:
            return
        partial.pop(fd, None)
        with contextlib.suppress(OSError):
            os.close(fd)
        with self._lock:
            self._open_devices -= 1
            if self._open_devices == 0:  # nothing watched: a later device starts afresh
                self._last_user_event = None

    def _note(self, why: str) -> None:
        if why != self.last_error:
            log.debug("input idle: %s", why)
        self.last_error = why
