"""The tick's computation in a worker process, off the serving process's interpreter lock.

``compute_tick`` is pure and, on a large fleet, the most expensive thing the
controller does: about 100 ms of CPU at 1,000 hosts. Run on the tick thread it
holds the interpreter lock for most of that time, and every heartbeat waiting
on the serving loop waits behind it. ``ProcessTicks`` runs it in one child
process instead: the tick thread gathers the inputs, the child plans and
reconciles, the tick thread persists and issues what came back. The serving
process pays only for pickling the inputs and unpickling the decision.

A plan's candidate rows (one per host per model) do not cross: at 10,000 hosts
building them for the pickle took the child about 320 ms a tick, for rows only an
``--explain`` reads. The child sends each model's folded summary (what status and
plan documents show) and the parent's plan builds a model's rows on first read by
running the same pure ``compute_tick`` on the same inputs in the parent, once per
tick (``ReplannedRows``): same inputs, the same rows.

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
from dataclasses import dataclass, replace
from functools import partial

from gridctl.controller.collector import settle as settle_collector
from gridctl.domain import ModelDemand, Plan
from gridctl.domain.plans import CandidateExplanation, CandidateRows, ModelExplanation
from gridctl.domain.row_summaries import RowSummary
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
    which the parent rebuilds from the inputs it already holds (it is the largest part),
    and with each model's candidate rows replaced by their summary (``summaries``, in
    the order of ``plan.explanations``). ``portfolio.plan`` is ``plan`` when the tick's
    plan was the portfolio's (``shared``)."""

    plan: Plan
    summaries: tuple[RowSummary, ...]
    result: ReconcileResult
    demand: tuple[ModelDemand, ...]
    portfolio: PortfolioResult | None
    shared: bool
    retired: tuple[str, ...]
    tombstoned: tuple[str, ...]
    mapping: tuple[tuple[str, str | None], ...]


def decide(inputs: TickInputs) -> Answer:
    """Runs in the worker."""
    outcome = compute_tick(inputs)
    explanations = outcome.plan.explanations
    summaries = tuple(e.summary() for e in explanations)
    bare = tuple(replace(e, candidates=()) for e in explanations)
    plan = replace(outcome.plan, explanations=bare)
    portfolio = outcome.portfolio
    shared = portfolio is not None and portfolio.plan is outcome.plan
    if portfolio is not None and shared:
        portfolio = replace(portfolio, plan=plan)
    return Answer(
        plan,
        summaries,
        outcome.result,
        outcome.snapshot.demand,
        portfolio,
        shared,
        outcome.retired,
        outcome.tombstoned,
        outcome.mapping,
    )


class ReplannedRows:
    """The candidate rows of one tick's plan, built in this process on first read by
    running ``compute_tick`` on that tick's inputs again (it is pure), once."""

    def __init__(self, inputs: TickInputs) -> None:
        self._inputs: TickInputs | None = inputs
        self._plan: Plan | None = None
        self._lock = threading.Lock()

    def rows(self, model_id: str) -> tuple[CandidateExplanation, ...]:
        with self._lock:
            if self._plan is None:
                assert self._inputs is not None
                self._plan = compute_tick(self._inputs).plan
                self._inputs = None  # what the rows came from is no longer needed
            explanation = self._plan.explanation_of(model_id)
        return tuple(explanation.candidates) if explanation is not None else ()


def _summary(summary: RowSummary) -> RowSummary:
    return summary


def with_rows(plan: Plan, summaries: tuple[RowSummary, ...], rows: ReplannedRows) -> Plan:
    """``plan`` (as ``decide`` sent it) with each model's rows built on first read by
    ``rows`` and its summary the one the worker folded."""
    explanations: list[ModelExplanation] = []
    for explanation, summary in zip(plan.explanations, summaries, strict=True):
        candidates = CandidateRows(
            partial(rows.rows, explanation.model_id), partial(_summary, summary)
        )
        explanations.append(replace(explanation, candidates=candidates))
    return replace(plan, explanations=tuple(explanations))


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
        plan = with_rows(answer.plan, answer.summaries, ReplannedRows(inputs))
        portfolio = answer.portfolio
        if portfolio is not None and answer.shared:
            portfolio = replace(portfolio, plan=plan)
        return TickOutcome(
            plan,
            answer.result,
            planned_snapshot(inputs, answer.demand),
            portfolio,
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
