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

from gridctl.demand.intake import RequestObservation

__all__ = ["QUEUE_LIMIT", "RequestObservation", "Sink", "TelemetryTap"]

log = logging.getLogger(__name__)

QUEUE_LIMIT = 4096


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
