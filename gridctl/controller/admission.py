"""New hosts wait while the serving loop is behind the hosts it holds.

A large fleet that starts at once (after a controller restart, or when a partition
heals) sends its registrations within seconds. Each is a full inventory to validate
and index, and each dirties the plan. When they come faster than the serving process
answers, connections wait in the kernel's accept queue past the clients' timeout
(30 s): the clients give up and connect again, the server goes on reading and
answering registrations nobody waits for, and the hosts already registered get their
heartbeats answered late. At 10,000 simulated hosts the accept queue stayed full for
minutes, and a health check waited 18 s in it.

``LoopLag`` says when the process is behind: a probe asks the serving loop to wake it
``PROBE_SECONDS`` later and records how much later than that it woke (everything
else the loop had to run went first). While that lag is over ``LAG_LIMIT_SECONDS``
on a fleet of at least ``GATE_FROM_HOSTS`` hosts, ``RegistrationGate`` answers a
registration at once, before its body is read, with 503 and a time to come back drawn
uniformly from ``RETRY_SECONDS`` (the hosts refused together return spread out; the
node agent waits at least that long). Heartbeats of registered hosts are never
refused here: the hosts the controller holds come first. A smaller fleet is never
asked to wait.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Callable

PROBE_SECONDS = 0.05
LAG_LIMIT_SECONDS = 0.25
GATE_FROM_HOSTS = 1000
RETRY_SECONDS = (2.0, 20.0)


class LoopLag:
    """How late the serving loop last ran a callback it was asked to run at a time."""

    def __init__(self) -> None:
        self.seconds = 0.0

    async def watch(self) -> None:
        """Probe until cancelled (a task on the serving loop)."""
        loop = asyncio.get_running_loop()
        while True:
            asked = loop.time() + PROBE_SECONDS
            await asyncio.sleep(PROBE_SECONDS)
            self.seconds = max(0.0, loop.time() - asked)


class RegistrationGate:
    """Whether a registration is taken now, or how long its host should wait."""

    def __init__(self, lag: LoopLag, hosts: Callable[[], int], rng: random.Random) -> None:
        self.lag = lag
        self.hosts = hosts
        self.rng = rng
        self.deferred = 0  # registrations asked to come back later

    def wait(self) -> float | None:
        """None to take the registration now; else the seconds its host waits first."""
        if self.lag.seconds <= LAG_LIMIT_SECONDS or self.hosts() < GATE_FROM_HOSTS:
            return None
        self.deferred += 1
        low, high = RETRY_SECONDS
        return round(self.rng.uniform(low, high), 3)


def retry_after_header(seconds: float) -> str:
    """``Retry-After`` in whole seconds (HTTP's delay-seconds), never sooner than asked."""
    return str(max(1, math.ceil(seconds)))


__all__ = [
    "GATE_FROM_HOSTS",
    "LAG_LIMIT_SECONDS",
    "PROBE_SECONDS",
    "RETRY_SECONDS",
    "LoopLag",
    "RegistrationGate",
    "retry_after_header",
]
