"""What the router tells the demand side about each request: counts and timings only.

No prompt, response, raw key or client identity is kept: a request becomes a
handful of bounded features (endpoint, modality, workload class, approximate
units, service time, queue pressure, outcome, and a double-hashed session
token when the caller sent an affinity key).

Observation never delays or fails inference. ``emit`` only appends the record
to a bounded buffer; one worker thread hands it to the sinks in order. A sink
that raises is counted and skipped, a sink that blocks only backs the buffer up,
and a full buffer drops (and counts) the newest observation instead of waiting.

The worker wakes once per ``DRAIN_DELAY_SECONDS`` window, not once per request:
a wake-up per request was a thread switch and a contended interpreter lock on
every response the router sent, and sinks running while the serving loop
writes the response. Observations reach the sinks at most that much later.

Emitted on an event loop (the router), the sleeping worker is woken by a timer
on that loop when the window ends, not by the emitting request: waking a thread
in the middle of a loop step (a response joined into one write is sent at the end
of the step) put a thread switch and an interpreter-lock handoff in front of the
caller's bytes, and waking it right after still cost the serving thread about
as much as the request's own handling when the machine was busy (the woken
worker preempting it). Once the window is over the loop is most likely idle,
waiting for an engine. Emitted off a loop, the worker is woken at once and waits
out the window itself.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from gridctl.demand.intake import RequestObservation

__all__ = ["QUEUE_LIMIT", "RequestObservation", "Sink", "TelemetryTap"]

log = logging.getLogger(__name__)

QUEUE_LIMIT = 4096
DRAIN_DELAY_SECONDS = 0.02


Sink = Callable[[RequestObservation], None]


class TelemetryTap:
    """Fans observations out to sinks on a worker thread; ``emit`` never blocks or raises."""

    def __init__(self, limit: int = QUEUE_LIMIT) -> None:
        self._sinks: list[Sink] = []
        self._limit = limit
        self._buffer: list[RequestObservation] = []
        self._lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._idle = threading.Condition(self._lock)
        self._wake = threading.Condition(self._lock)
        self._asleep = False  # the worker waits on ``_wake`` for the next observation
        self._wake_deferred = False  # a loop timer will wake it when the window ends
        self._gathered = False  # that window is over when it wakes
        self._pending = 0  # emitted, not yet through every sink
        self.dropped = 0  # buffer full
        self.failed = 0  # a sink raised

    def add(self, sink: Sink) -> None:
        self._sinks.append(sink)

    def emit(self, observation: RequestObservation) -> None:
        if not self._sinks:
            return
        with self._lock:
            if self._pending >= self._limit:
                self.dropped += 1
                return
            self._buffer.append(observation)
            self._pending += 1
            if self._asleep:
                self._asleep = False
                self._wake_worker()
            elif self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._drain_forever, name="gridctl-telemetry", daemon=True
                )
                self._worker.start()

    def _wake_worker(self) -> None:
        """Wake the sleeping worker (the lock held): by a timer on the running loop when
        the window ends, else now (and it waits the window out)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._wake.notify()
            return
        self._wake_deferred = self._gathered = True
        loop.call_later(DRAIN_DELAY_SECONDS, self._notify)

    def _notify(self) -> None:
        with self._lock:
            if self._wake_deferred:
                self._wake_deferred = False
                self._wake.notify()

    def _drain_forever(self) -> None:
        while True:
            with self._lock:
                while not self._buffer:
                    self._asleep = True
                    self._wake.wait()
                gathered, self._gathered = self._gathered, False
            if not gathered:
                time.sleep(DRAIN_DELAY_SECONDS)  # gather the burst this observation began
            with self._lock:
                batch, self._buffer = self._buffer, []
            for observation in batch:
                for sink in list(self._sinks):
                    try:
                        sink(observation)
                    except Exception:  # observation must never fail inference
                        self.failed += 1
                        log.debug("telemetry sink failed", exc_info=True)
            with self._lock:
                self._pending -= len(batch)
                if self._pending == 0:
                    self._idle.notify_all()

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until every queued observation reached the sinks (tests, shutdown)."""
        with self._lock:
            if self._wake_deferred:  # flushing on the loop: its callback cannot run first
                self._wake_deferred = False
                self._wake.notify()
            return self._idle.wait_for(lambda: self._pending == 0, timeout)
