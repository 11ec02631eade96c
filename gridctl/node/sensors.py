"""Reading the machine for the protection loop: psutil where it can, unknown where not.

Every reader returns ``None`` rather than guessing: a laptop without a
temperature sensor has an *unknown* temperature, not a cool one. User idle
time is read on macOS (``ioreg`` HIDIdleTime), from an X11 session when
``xprintidle`` exists, and otherwise from the first of the ``idle_fallback``
sources that knows: on Linux the input devices (``idle_input``: exact, when the
node may read ``/dev/input``), then systemd-logind's idle hints over D-Bus
(``idle_logind``: Wayland and console sessions, but only as precise as the
desktop's idle delay); elsewhere it is unknown. Most precise first: the session's
own counter, then the devices' last event, then logind's boolean hint. Free
space on the artifact and state volumes comes from ``disk_space``, the network
link and the route to the controller from ``network_state``.

Test hook: when ``GRIDCTL_SENSOR_OVERRIDES`` names a JSON file, its entry for
this host (or ``"*"``) replaces the matching readings, e.g.
``{"local-2": {"idle_seconds": 0}}``. It exists so end-to-end tests can inject
user activity; production nodes never set it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from gridctl.node.disk_space import read_disks
from gridctl.node.gpus import probe_gpus
from gridctl.node.network_state import read_network
from gridctl.node.protection import Readings

OVERRIDES_ENV = "GRIDCTL_SENSOR_OVERRIDES"


class IdleSources:
    """Idle-time readers asked in order: the first known reading wins."""

    def __init__(self, *sources: Callable[[], float | None]) -> None:
        self.sources = sources

    def __call__(self) -> float | None:
        for source in self.sources:
            seconds = source()
            if seconds is not None:
                return seconds
        return None

    def start(self) -> None:
        """Start the readers that watch in the background (the input devices)."""
        for source in self.sources:
            start = getattr(source, "start", None)
            if callable(start):
                start()

    def close(self) -> None:
        """Release every reader's threads, descriptors and connections."""
        for source in self.sources:
            close = getattr(source, "close", None)
            if callable(close):
                close()


def _idle_seconds(fallback: Callable[[], float | None] | None = None) -> float | None:
    """macOS or X11 when they answer, else ``fallback`` (input devices, logind on Linux)."""
    precise = _precise_idle_seconds()
    if precise is None and fallback is not None:
        return fallback()
    return precise


def _precise_idle_seconds() -> float | None:
    try:
        if os.uname().sysname == "Darwin" and shutil.which("ioreg"):
            out = subprocess.run(
                ["ioreg", "-c", "IOHIDSystem"], capture_output=True, text=True, timeout=2
            ).stdout
            match = re.search(r'"HIDIdleTime"\s*=\s*(\d+)', out)
            return int(match.group(1)) / 1e9 if match else None
        if os.environ.get("DISPLAY") and shutil.which("xprintidle"):
            out = subprocess.run(["xprintidle"], capture_output=True, text=True, timeout=2).stdout
            return int(out.strip()) / 1000.0
    except (OSError, ValueError, subprocess.SubprocessError):
        return None
    return None


def _battery() -> tuple[float | None, bool | None]:
    try:
        battery = psutil.sensors_battery()
    except (AttributeError, OSError, RuntimeError):
        return None, None
    if battery is None:
        return None, None
    return float(battery.percent), battery.power_plugged


def _temperature() -> float | None:
    try:
        readings = psutil.sensors_temperatures()
    except (AttributeError, OSError, RuntimeError):
        return None
    values = [t.current for group in readings.values() for t in group if t.current]
    return max(values) if values else None


def _load_per_cpu() -> float | None:
    try:
        return os.getloadavg()[0] / max(1, psutil.cpu_count() or 1)
    except (AttributeError, OSError):
        return None


def injected(host_id: str) -> dict[str, Any]:
    """The test hook's readings for this host (empty when the hook is not set)."""
    path = os.environ.get(OVERRIDES_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    merged: dict[str, Any] = {}
    for key in ("*", host_id):
        entry = data.get(key)
        if isinstance(entry, dict):
            merged.update(entry)
    return merged


def read_sensors(
    host_id: str,
    artifact_root: Path,
    *,
    controller_silent_seconds: float | None,
    state_dir: Path | None = None,
    controller_url: str | None = None,
    idle_fallback: Callable[[], float | None] | None = None,
) -> Readings:
    """One sample of this machine (the first CPU sample after start reads as unknown)."""
    disks = read_disks(artifact_root, state_dir)
    network = read_network(controller_url)
    battery, plugged = _battery()
    memory = psutil.virtual_memory()
    cpu = psutil.cpu_percent(interval=None)
    readings = Readings(
        idle_seconds=_idle_seconds(idle_fallback),
        battery_percent=battery,
        on_ac_power=plugged,
        temperature_c=_temperature(),
        cpu_percent=cpu if cpu > 0 else None,
        memory_percent=float(memory.percent),
        load_per_cpu=_load_per_cpu(),
        gpu_memory_percent=gpus.used_percent if (gpus := probe_gpus()) else None,  # unknown != 0
        controller_silent_seconds=controller_silent_seconds,
        disk_free_mb=disks.artifact_free_mb,
        state_disk_free_mb=disks.state_free_mb,
        network_link_up=network.link_up,
        network_route_up=network.route_up,
    )
    return readings.merged(injected(host_id))
