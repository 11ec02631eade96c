"""What the router tells the demand side about each request: counts and timings only.

No prompt, response, key or client identity is kept. A failing sink never
fails or delays the request: errors are swallowed and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RequestObservation:
    """Bounded features of one finished request."""

    t: float
    endpoint: str  # chat | completions | embeddings
    model: str | None  # as requested
    served_model: str | None
    host_id: str | None
    outcome: str  # ok | error | rejected
    status: int
    service_seconds: float
    queue_depth: int = 0
    input_units: int = 0
    output_units: int = 0


Sink = Callable[[RequestObservation], None]


class TelemetryTap:
    """Fans observations out to sinks; never raises."""

    def __init__(self) -> None:
        self._sinks: list[Sink] = []
        self.dropped = 0

    def add(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, observation: RequestObservation) -> None:
        for sink in self._sinks:
            try:
                sink(observation)
            except Exception:  # observation must never fail inference
                self.dropped += 1
                log.debug("telemetry sink failed", exc_info=True)
