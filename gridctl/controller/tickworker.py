"""The tick's computation in a worker process, off the serving process's interpreter lock.

``compute_tick`` is pure and, on a large fleet, the most expensive thing the
controller does: about 100 ms of CPU at 1,000 hosts. Run on the tick thread it
holds the interpreter lock for most of that time, and every heartbeat waiting
on the serving loop waits behind it. ``ProcessTicks`` runs it in one child
process instead: the tick thread gathers the inputs, the child plans and
reconciles, the tick thread persists and issues what came back. The serving
process pays only for pickling the inputs and unpickling the decision.

The child is started with ``spawn`` (the controller is multi-threaded, so it is
never forked), imports the planner once and exits when its parent goes away. If it dies
(killed, out of memory), the tick that was waiting fails with a named error —
a failed tick covers nothing and changes nothing — and the next tick starts a
new child.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from gridctl.controller.collector import settle as settle_collector
from gridctl.domain import ModelDemand, Plan
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.reconcile import ReconcileResult
from gridctl.tick.computing import TickInputs, TickOutcome, compute_tick, planned_snapshot

log = logging.getLogger(__name__)
PARENT_CHECK_SECONDS = 1.0


class TickWorkerLost(RuntimeError):
    """The planning process exited before answering; the next tick starts another."""


@dataclass(frozen=True)
class Answer:
    """What crosses back from the worker: the outcome without the planned-on snapshot,
    which the parent rebuilds from the inputs it already holds (it is the largest part)."""

    plan: Plan
    result: ReconcileResult
    demand: tuple[ModelDemand, ...]
    portfolio: PortfolioResult | None
    retired: tuple[str, ...]
    tombstoned: tuple[str, ...]
    mapping: tuple[tuple[str, str | None], ...]


def decide(inputs: TickInputs) -> Answer:
    """Runs in the worker."""
    outcome = compute_tick(inputs)
    return Answer(
        outcome.plan,
        outcome.result,
        outcome.snapshot.demand,
        outcome.portfolio,
        outcome.retired,
        outcome.tombstoned,
        outcome.mapping,
    )


def _ready() -> int:
    return os.getpid()


def _start_worker(parent: int) -> None:
    """Worker initializer: exit once the parent is gone (a SIGKILLed controller must not
    leave a planner behind), and settle the collector as the serving process does: a
    tick unpickles a whole fleet and plans on it, and with CPython's default thresholds
    its collections re-scanned what the worker had imported (at 10,000 hosts, unpickling
    took 57-77 ms and planning 194-258 ms; settled, 39-51 and 174-225 ms)."""
    settle_collector()

    def watch() -> None:
        while os.getppid() == parent:
            threading.Event().wait(PARENT_CHECK_SECONDS)
        os._exit(0)

    threading.Thread(target=watch, name="gridctl-parent-watch", daemon=True).start()


class ProcessTicks:
    """``compute_tick`` answered by one child process; call it like ``compute_tick``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: ProcessPoolExecutor | None = None
        self.restarts = 0

    def start(self) -> int:
        """Start the child and wait until it has imported the planner; its pid."""
        return int(self._executor().submit(_ready).result())

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_start_worker,
                    initargs=(os.getpid(),),
                )
            return self._pool

    def __call__(self, inputs: TickInputs) -> TickOutcome:
        pool = self._executor()
        try:
            answer = pool.submit(decide, inputs).result()
        except BrokenProcessPool as exc:
            with self._lock:
                if self._pool is pool:
                    self._pool = None
                    self.restarts += 1
            pool.shutdown(wait=False, cancel_futures=True)
            log.warning("the planning process exited; the next tick starts another")
            raise TickWorkerLost(
                "the planning process exited before answering; the next tick starts another"
            ) from exc
        return TickOutcome(
            answer.plan,
            answer.result,
            planned_snapshot(inputs, answer.demand),
            answer.portfolio,
            answer.retired,
            answer.tombstoned,
            answer.mapping,
        )

    def close(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["Answer", "ProcessTicks", "TickWorkerLost", "decide"]
