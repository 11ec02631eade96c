"""Private per-engine, per-model circuit breakers for outcomes the proxy observes.

A 429 opens a cooldown at once (``circuit_rate_limit_open_seconds``, one
second by default). ``circuit_failure_threshold`` consecutive transport or 5xx
failures (two by default) open the circuit with exponential backoff (1 s, 2 s,
4 s ... capped at ``circuit_backoff_max_seconds``, 30 s by default); the
tunables are read from the controller policy in force at each outcome.
When the backoff expires exactly one half-open probe is let through; a
2xx resets everything, another failure reopens with a doubled backoff. A
caller-caused 4xx never counts. Circuit state is memory only: it is never
persisted, never changes inventory and grants no lifecycle authority. The
breaker only redirects *later* requests; the proxy never replays a failed POST.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

RATE_LIMIT_SECONDS = 1.0
FAILURES_TO_OPEN = 2
BASE_BACKOFF_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 30.0
MAX_CIRCUITS = 4096

CircuitKey = tuple[str, str, str]  # (host_id, endpoint, model_id)


@dataclass
class Circuit:
    streak: int = 0  # consecutive transport/5xx failures
    openings: int = 0  # consecutive failure openings (drives the backoff)
    open_until: float = 0.0
    probing: bool = False  # a half-open probe is in flight
    probe_allowed: bool = False  # the circuit has opened and expired: next admit is a probe


def outcome_kind(status: int | None) -> str:
    """``ok``, ``rate_limited``, ``failure`` (transport/5xx) or ``neutral`` (caller 4xx)."""
    if status is None or status >= 500:
        return "failure"
    if status == 429:
        return "rate_limited"
    if status < 400:
        return "ok"
    return "neutral"


# who hears of circuit openings: ``gridctl.metrics`` subscribes when it is imported (the
# router never imports the controller's metrics, which read the controller itself)
_opening_listeners: list[Callable[[str, str], None]] = []
_listeners_lock = threading.Lock()


def on_circuit_opening(listener: Callable[[str, str], None]) -> Callable[[], None]:
    """Call ``listener(model, host)`` at every circuit opening of every router in the
    process; returns the call that unsubscribes it. Subscribing twice is one listener."""
    with _listeners_lock:
        if listener not in _opening_listeners:
            _opening_listeners.append(listener)

    def unsubscribe() -> None:
        with _listeners_lock:
            if listener in _opening_listeners:
                _opening_listeners.remove(listener)

    return unsubscribe


def _record_opening(model: str, host: str) -> None:
    with _listeners_lock:
        listeners = tuple(_opening_listeners)
    for listener in listeners:
        try:
            listener(model, host)
        except Exception:  # metrics never affect routing
            log.debug("circuit opening listener failed", exc_info=True)


@dataclass(frozen=True)
class BreakerTunables:
    """The controller policy's circuit tunables."""

    rate_limit_open_seconds: float = RATE_LIMIT_SECONDS
    failure_threshold: int = FAILURES_TO_OPEN
    backoff_max_seconds: float = MAX_BACKOFF_SECONDS


class Breakers:
    """All circuits of one router; thread-safe, clock injected."""

    def __init__(
        self,
        clock: Callable[[], float],
        tunables: Callable[[], BreakerTunables] = BreakerTunables,
    ) -> None:
        self._clock = clock
        self._tunables = tunables
        self._lock = threading.Lock()
        self._circuits: dict[CircuitKey, Circuit] = {}

    def _circuit(self, key: CircuitKey) -> Circuit:
        circuit = self._circuits.get(key)
        if circuit is None:
            if len(self._circuits) >= MAX_CIRCUITS:
                self._forget_closed()
            circuit = self._circuits[key] = Circuit()
        return circuit

    def _forget_closed(self) -> None:
        now = self._clock()
        for key in [k for k, c in self._circuits.items() if c.open_until <= now and not c.streak]:
            del self._circuits[key]

    def available(self, key: CircuitKey) -> bool:
        """Whether a request may be sent now (does not claim a half-open probe)."""
        with self._lock:
            circuit = self._circuits.get(key)
            if circuit is None:
                return True
            if self._clock() < circuit.open_until:
                return False
            return not circuit.probing

    def admit(self, key: CircuitKey) -> bool:
        """Claim the right to send one request; an expired circuit yields one probe."""
        with self._lock:
            circuit = self._circuits.get(key)
            if circuit is None:
                return True
            if self._clock() < circuit.open_until or circuit.probing:
                return False
            if circuit.probe_allowed:
                circuit.probing = True
            return True

    def record(self, key: CircuitKey, status: int | None) -> None:
        """Record the outcome of a request admitted on ``key`` (``None`` = transport error)."""
        kind = outcome_kind(status)
        opened = False
        tunables = self._tunables()
        with self._lock:
            circuit = self._circuit(key)
            was_probe, circuit.probing = circuit.probing, False
            now = self._clock()
            if kind == "ok":
                self._circuits[key] = Circuit()
            elif kind == "rate_limited":
                cooldown = tunables.rate_limit_open_seconds
                circuit.open_until = max(circuit.open_until, now + cooldown)
                circuit.probe_allowed = True
                opened = True
            elif kind == "failure":
                circuit.streak += 1
                if circuit.streak >= tunables.failure_threshold or was_probe:
                    growth = BASE_BACKOFF_SECONDS * 2.0 ** min(circuit.openings, 64)
                    backoff = min(tunables.backoff_max_seconds, growth)
                    circuit.openings += 1
                    circuit.open_until = now + backoff
                    circuit.probe_allowed = True
                    opened = True
        if opened:
            _record_opening(key[2], key[0])

    def backoff_left(self, key: CircuitKey) -> float:
        with self._lock:
            circuit = self._circuits.get(key)
            return 0.0 if circuit is None else max(0.0, circuit.open_until - self._clock())

    def describe(self) -> list[dict[str, object]]:
        """Aggregates for status: which circuits are open (no request content)."""
        now = self._clock()
        with self._lock:
            return [
                {
                    "host_id": k[0],
                    "model_id": k[2],
                    "open_for_seconds": round(c.open_until - now, 3),
                }
                for k, c in sorted(self._circuits.items())
                if c.open_until > now
            ]
