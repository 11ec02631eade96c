"""What the router tells the demand side about each request: counts and timings only.

No prompt, response, raw key or client identity is kept: a request becomes a
handful of bounded features (endpoint, modality, workload class, approximate
units, service time, queue pressure, outcome, and a double-hashed session
token when the caller sent an affinity key).

Observation never delays or fails inference. ``emit`` only puts the record on
a bounded queue; one worker thread hands it to the sinks in order. A sink that
raises is counted and skipped, a sink that blocks only backs the queue up, and
a full queue drops (and counts) the newest observation instead of waiting.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

QUEUE_LIMIT = 4096


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
    queue_depth: int = 0  # requests waiting for a slot of this model when it arrived
    input_units: int = 0  # approximate (body bytes / 4)
    output_units: int = 0  # completion tokens when the engine reported them
    modality: str = "text"  # text | image | audio | embedding
    workload: str = "general"  # coarse class from request shape, never from content
    session: str | None = None  # double-hashed affinity key
    wait_seconds: float = 0.0  # time spent waiting for an admission slot
    client: str | None = None  # the router key's id (never the key) when keys are in use
    # the artifact the serving replica proved (its residency's digest): outcome evidence
    # is keyed by it, so a late response from a previous revision never credits the new one
    artifact_sha256: str | None = None
    evaluation: bool = False  # operator-marked evaluation: speed and quality, never demand


Sink = Callable[[RequestObservation], None]


class TelemetryTap:
    """Fans observations out to sinks on a worker thread; ``emit`` never blocks or raises."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._sinks: list[Sink] = []
        self._queue: queue.Queue[RequestObservation] = queue.Queue(maxsize=limit)
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self._pending = 0
        self.dropped = 0  # queue full
        self.failed = 0  # a sink raised

    def add(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, observation: RequestObservation) -> None:
        if not self._sinks:
            return
        with self._lock:
            self._ensure_worker()
            try:
                self._queue.put_nowait(observation)
            except queue.Full:
                self.dropped += 1
                return
            self._pending += 1

    def _ensure_worker(self) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(
                target=self._drain_forever, name="gridctl-telemetry", daemon=True
            )
            self._worker.start()

    def _drain_forever(self) -> None:
        while True:
            observation = self._queue.get()
            for sink in list(self._sinks):
                try:
                    sink(observation)
                except Exception:  # observation must never fail inference
                    self.failed += 1
                    log.debug("telemetry sink failed", exc_info=True)
            with self._lock:
                self._pending -= 1
                if self._pending == 0:
                    self._idle.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued observation reached the sinks (tests, shutdown)."""
        with self._lock:
            return self._idle.wait_for(lambda: self._pending == 0, timeout)
