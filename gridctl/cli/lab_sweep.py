"""``gridctl lab graduate``: the graduation sweep, its cells run in parallel worker processes.

A sweep over tens of seeds and several fleet sizes is what makes a tuned-to-
two-seeds allocator visible, and it is only affordable when the cells run on
every core. The pure lab (``gridctl.lab.graduation``) runs one cell; this
shell parses the seed and size lists (ranges and lists), fans cells out to a
process pool bounded by ``--jobs``, reports progress on stderr, and assembles
the matrix in the sweep's order, so the report is the same bytes whatever
``--jobs`` is. Process pools and wall-clock timing are I/O, so they live here
and not in the pure core.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from gridctl.cli.lab_cmd import UsageError, add_world_options, load_inputs, parse_duration
from gridctl.domain import Fleet, WorkloadCatalog
from gridctl.lab.gates import RunRow
from gridctl.lab.graduation import CellSpec, Matrix, assemble, run_cell, sweep_cells
from gridctl.lab.models import MAX_MODELS
from gridctl.lab.scenario import MAX_MACHINES, MAX_USERS

MAX_SEED = 2**63 - 1
MAX_VALUES = 10_000  # values one --seeds or --machines may expand to
WORST_CELLS_CHARTED = 3

CellResult = tuple[tuple[RunRow, ...], float]  # the cell's rows and its wall-clock seconds


def parse_int_ranges(option: str, text: str, low: int, high: int) -> list[int]:
    """``1-5,42,100-102`` as [1..5, 42, 100..102]: ascending ranges, no value twice."""
    values: list[int] = []
    seen: set[int] = set()
    for part in text.split(","):
        item = part.strip()
        first, dash, last = item.partition("-")
        try:
            start = int(first)
            end = int(last) if dash else start
        except ValueError:
            raise UsageError(
                f"{option} {text!r}: use integers and ranges, e.g. 1-5,42,100-102"
            ) from None
        if end < start:
            raise UsageError(f"{option} {text!r}: range {item} runs backwards")
        if start < low or end > high:
            raise UsageError(f"{option} {text!r}: values must be between {low} and {high}")
        if len(values) + end - start + 1 > MAX_VALUES:
            raise UsageError(f"{option} {text!r}: more than {MAX_VALUES} values")
        for value in range(start, end + 1):
            if value in seen:
                raise UsageError(f"{option} {text!r}: {value} is given twice")
            seen.add(value)
            values.append(value)
    return values


GATE_CALIBRATION_MINUTES = 120  # the gates' thresholds assume full-length days


def add_graduate(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    grad = verbs.add_parser(
        "graduate",
        help="run every strategy per fleet size and seed and check the gates",
        description=(
            "Run every strategy on each (fleet size, seed) cell, print the per-cell table and "
            "the gates. Exit 0 when every gate passes, 1 naming the failing gates otherwise, "
            "2 on a bad option. The gates are calibrated on runs of at least 2h of simulated "
            "time (--duration 2h); shorter runs see too few requests to pass them."
        ),
    )
    add_world_options(grad)
    grad.add_argument(
        "--machines", default="2,4,8", help="fleet sizes, a list or ranges (default 2,4,8)"
    )
    grad.add_argument(
        "--seeds", default="42,144", help="seeds, e.g. 1-30 or 1-5,42,100-102 (default 42,144)"
    )
    grad.add_argument(
        "--jobs",
        default=str(os.cpu_count() or 1),
        help="worker processes for the cells (default: the cores; 1 runs serially)",
    )
    grad.add_argument(
        "--progress",
        action="store_true",
        help="one stderr line per finished cell (on by default when stderr is a terminal)",
    )
    grad.add_argument(
        "--report", metavar="DIR", help="write report.json and index.html with the worst cells"
    )
    grad.set_defaults(func=run_graduate)


def _positive(option: str, text: str, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{option} {text!r} is not an integer") from None
    if not 1 <= value <= high:
        raise UsageError(f"{option} must be between 1 and {high}, got {value}")
    return value


def _usage(message: str) -> int:
    print(f"gridctl lab graduate: error: {message}", file=sys.stderr)
    return 2


_WORKER_INPUTS: tuple[Fleet, WorkloadCatalog] | None = None


def _init_worker(fleet: Fleet, catalog: WorkloadCatalog) -> None:
    global _WORKER_INPUTS
    _WORKER_INPUTS = (fleet, catalog)


def _timed_cell(fleet: Fleet, catalog: WorkloadCatalog, cell: CellSpec) -> CellResult:
    started = time.perf_counter()
    rows = run_cell(fleet, catalog, cell)
    return rows, time.perf_counter() - started


def _worker_cell(cell: CellSpec) -> CellResult:
    assert _WORKER_INPUTS is not None, "worker started without its fleet and catalog"
    return _timed_cell(*_WORKER_INPUTS, cell)


def run_sweep(
    fleet: Fleet,
    catalog: WorkloadCatalog,
    cells: Sequence[CellSpec],
    jobs: int,
    on_done: Callable[[int, CellSpec, float], None] | None = None,
) -> Matrix:
    """Every cell, ``jobs`` at a time; the matrix is assembled in ``cells`` order.

    ``on_done(k, cell, seconds)`` is called as the k-th cell finishes (completion order).
    """
    results: list[tuple[RunRow, ...] | None] = [None] * len(cells)
    finished = 0

    def record(index: int, result: CellResult) -> None:
        nonlocal finished
        finished += 1
        results[index] = result[0]
        if on_done is not None:
            on_done(finished, cells[index], result[1])

    workers = min(jobs, len(cells))
    if workers <= 1:
        for index, cell in enumerate(cells):
            record(index, _timed_cell(fleet, catalog, cell))
    else:
        with ProcessPoolExecutor(
            workers, initializer=_init_worker, initargs=(fleet, catalog)
        ) as pool:
            pending: dict[Future[CellResult], int] = {
                pool.submit(_worker_cell, cell): index for index, cell in enumerate(cells)
            }
            try:
                while pending:
                    done, _ = wait(pending, return_when=FIRST_COMPLETED)
                    for future in done:
                        record(pending.pop(future), future.result())
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                raise
    return assemble([r for r in results if r is not None])


def run_graduate(args: argparse.Namespace) -> int:
    try:
        sizes = parse_int_ranges("--machines", args.machines, 1, MAX_MACHINES)
        seeds = parse_int_ranges("--seeds", args.seeds, 0, MAX_SEED)
        jobs = _positive("--jobs", args.jobs, 1024)
        minutes = parse_duration(args.duration)
        models = _positive("--models", args.models, MAX_MODELS)
        users = _positive("--users", args.users, MAX_USERS)
        cells = sweep_cells(sizes, seeds, minutes=minutes, users=users, models=models)
        problems = cells[0].config().problems()
        if problems:
            raise UsageError("; ".join(problems))
    except UsageError as exc:
        return _usage(str(exc))
    try:
        fleet, catalog = load_inputs(args.blueprints, args.catalog)
    except UsageError as exc:
        print(f"gridctl lab: {exc}", file=sys.stderr)
        return 1
    show = args.progress or sys.stderr.isatty()

    def progress(k: int, cell: CellSpec, seconds: float) -> None:
        if show:
            print(
                f"[{k}/{len(cells)}] machines {cell.machines} seed {cell.seed} {seconds:.1f}s",
                file=sys.stderr,
                flush=True,
            )

    try:
        matrix = run_sweep(fleet, catalog, cells, jobs, progress)
    except BrokenProcessPool as exc:
        print(
            f"gridctl lab graduate: a worker process died ({exc}); try fewer --jobs",
            file=sys.stderr,
        )
        return 1
    document = matrix.to_json()
    page = None
    if args.report:
        from gridctl.cli.lab_sweep_report import write_sweep_report

        page = write_sweep_report(
            Path(args.report), document, fleet, catalog, cells, WORST_CELLS_CHARTED
        )
    if args.json:
        import json

        print(json.dumps(document, sort_keys=True, indent=2))
    else:
        print_sweep(matrix)
        if page is not None:
            print(f"report: {page}")
    failed = [g.name for g in matrix.gates if not g.passed]
    if failed:
        print(f"gridctl lab graduate: failing gates: {', '.join(failed)}", file=sys.stderr)
        if minutes < GATE_CALIBRATION_MINUTES:
            print(
                f"gridctl lab graduate: the gates are calibrated on runs of at least "
                f"{GATE_CALIBRATION_MINUTES // 60}h of simulated time; this run had "
                f"{minutes}m, too few requests for the evidence they check "
                f"(try --duration {GATE_CALIBRATION_MINUTES // 60}h)",
                file=sys.stderr,
            )
        return 1
    return 0


def print_sweep(matrix: Matrix) -> None:
    """The per-cell table, then each gate with its worst, median and deciding cell."""
    head = ("machines", "seed", "smart", "reactive", "greedy", "static", "winner")
    print("  ".join(f"{h:>8}" for h in head) + "  vs-best  vs-static")
    for c in matrix.cells:
        scores = "  ".join(f"{c.scores[s]:8.1f}" for s in head[2:6])
        print(
            f"{c.machines:8}  {c.seed:8}  {scores}  {c.winner:>8}  "
            f"{c.margin_over_best_baseline:+7.2f}  {c.margin_over_static:+9.2f}"
        )
    detail = {g.name: g for g in matrix.gate_cells}
    for gate in matrix.gates:
        mark = "pass" if gate.passed else "FAIL"
        rule = f"{gate.value:.3f} {gate.comparison} {gate.threshold:g}"
        print(f"{mark}  {gate.name}: {rule}  ({gate.detail})")
        cells = detail.get(gate.name)
        if cells is not None and cells.worst is not None and cells.deciding is not None:
            (wm, ws), wv = cells.worst
            (dm, ds), dv = cells.deciding
            print(
                f"      worst cell {wm} machines seed {ws}: {wv:.3f}; "
                f"median {cells.median:.3f}; decided by {dm} machines seed {ds}: {dv:.3f}"
            )
