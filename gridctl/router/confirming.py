"""Breakers that count an engine's 5xx only when the engine's own health confirms it.

Why it exists: a 5xx answer proves only that one request failed. llama-server
answers 500 to some requests that are the caller's fault (an image part for a
model without a projector), and when every 5xx counted as an engine failure one
caller sending such a request twice a second kept a healthy model closed to
everyone. Here a 500 that came with a complete answer is held as *suspect*: the
engine's ``/health`` is asked once (one probe in flight per circuit, however
many suspects arrive), and only an engine that does not answer healthy gets the
failure counted, with the usual threshold and backoff. A request the engine
never answered (refused, reset, a stream broken off) proves the engine is in
trouble and counts at once, as before, and so do 502, 503 and 504 (the engine
saying it is overloaded, loading or cut off) and every outcome when no health
check is configured.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from gridctl.router.breakers import Breakers, BreakerTunables, CircuitKey

log = logging.getLogger(__name__)

NEUTRAL = 499  # an outcome that neither counts against the engine nor resets it
SUSPECT = 500  # the status llama-server gives a request it could not serve, whoever erred

HealthCheck = Callable[[str], Awaitable[bool]]  # engine base URL -> answers healthy


class ConfirmingBreakers(Breakers):
    """``Breakers`` whose 500 answers wait for the engine's health to confirm them."""

    def __init__(
        self,
        clock: Callable[[], float],
        tunables: Callable[[], BreakerTunables],
        healthy: HealthCheck,
    ) -> None:
        super().__init__(clock, tunables)
        self._healthy = healthy
        self._confirming: dict[CircuitKey, asyncio.Task[None]] = {}
        self.confirmed = 0  # suspects the health check confirmed as failures
        self.excused = 0  # suspects the engine's health excused (the caller's fault)

    def record(self, key: CircuitKey, status: int | None) -> None:
        if status != SUSPECT:
            super().record(key, status)
            return
        super().record(key, NEUTRAL)  # releases a half-open probe; the verdict comes later
        if key in self._confirming:
            return  # one health probe per circuit answers for every suspect meanwhile
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to probe from: judge as before
            super().record(key, None)
            return
        self._confirming[key] = loop.create_task(self._confirm(key))

    async def _confirm(self, key: CircuitKey) -> None:
        try:
            healthy = await self._healthy(key[1])
        except Exception:  # a probe that cannot run proves nothing about the caller
            log.debug("health confirmation of %s failed", key[1], exc_info=True)
            healthy = False
        finally:
            self._confirming.pop(key, None)
        if healthy:
            self.excused += 1
        else:
            self.confirmed += 1
            super().record(key, None)

    async def settled(self) -> None:
        """Wait for the health probes in flight (tests, and a clean shutdown)."""
        while self._confirming:
            await asyncio.gather(*list(self._confirming.values()), return_exceptions=True)
