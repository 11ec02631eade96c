"""User idle time from systemd-logind over D-Bus: what a Linux laptop knows without X11.

Wayland sessions and consoles have no ``xprintidle``; logind does know whether the
user is idle. Its Manager object (``/org/freedesktop/login1``) aggregates every
session: ``IdleHint`` is true only when all of them are idle, and ``IdleSinceHint``
(CLOCK_REALTIME, microseconds) is when that hint last changed. So:

- idle, since T      -> ``now - T`` seconds idle;
- not idle, since T  -> 0 s: the user is active (the desktop keeps the hint);
- since 0            -> unknown: nobody ever set the hint (a desktop that does not
  maintain it, or a server without sessions), which must not read as "active" nor
  as "idle for ever";
- no bus, no logind, a timeout or a malformed answer -> unknown.

The connection is kept between samples and dropped on any error (the next sample
connects again). The bus is the system bus unless an address is given (tests start
their own ``dbus-daemon`` with a fake logind on it).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from jeepney import DBusAddress, MessageType, new_method_call
from jeepney.io.blocking import DBusConnection, open_dbus_connection

log = logging.getLogger("gridctl.node.sensors")

LOGIND = DBusAddress(
    "/org/freedesktop/login1",
    bus_name="org.freedesktop.login1",
    interface="org.freedesktop.DBus.Properties",
)
MANAGER_INTERFACE = "org.freedesktop.login1.Manager"
CALL_TIMEOUT_SECONDS = 1.0
MICROSECONDS = 1_000_000


def idle_from_hints(idle_hint: object, idle_since_us: object, now: float) -> float | None:
    """Seconds since the user's last input by logind's hints; None when they say nothing."""
    if not isinstance(idle_hint, bool) or isinstance(idle_since_us, bool):
        return None
    if not isinstance(idle_since_us, int) or idle_since_us <= 0:
        return None
    if not idle_hint:
        return 0.0
    return max(0.0, now - idle_since_us / MICROSECONDS)


class LogindIdle:
    """Reads the Manager's idle hints; call it once per protection sample."""

    def __init__(
        self,
        bus: str = "SYSTEM",
        *,
        clock: Callable[[], float] = time.time,
        timeout: float = CALL_TIMEOUT_SECONDS,
    ) -> None:
        self.bus, self.clock, self.timeout = bus, clock, timeout
        self._connection: DBusConnection | None = None
        self.last_error: str | None = None  # why the last reading was unknown

    def __call__(self) -> float | None:
        try:
            properties = self._manager_properties()
        except Exception as exc:  # any failure of the bus is an unknown reading
            self._forget(f"{type(exc).__name__}: {exc}")
            return None
        self.last_error = None
        idle = properties.get("IdleHint")
        since = properties.get("IdleSinceHint")
        return idle_from_hints(
            idle[1] if isinstance(idle, tuple) else None,
            since[1] if isinstance(since, tuple) else None,
            self.clock(),
        )

    def _manager_properties(self) -> dict[str, Any]:
        if self._connection is None:
            self._connection = open_dbus_connection(bus=self.bus, auth_timeout=self.timeout)
        message = new_method_call(LOGIND, "GetAll", "s", (MANAGER_INTERFACE,))
        reply = self._connection.send_and_get_reply(message, timeout=self.timeout)
        if reply.header.message_type is not MessageType.method_return:
            raise LookupError(f"logind answered {reply.body!r:.200}")
        (found,) = reply.body
        if not isinstance(found, dict):
            raise LookupError("logind's properties are not a dictionary")
        return found

    def _forget(self, why: str) -> None:
        if why != self.last_error:
            log.debug("logind idle unknown: %s", why)
        self.last_error = why
        self.close()

    def close(self) -> None:
        if self._connection is not None:
            with contextlib.suppress(OSError):
                self._connection.close()
            self._connection = None
