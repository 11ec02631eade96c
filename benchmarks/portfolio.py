"""Median time of a full portfolio search, and how many planner evaluations it ran.

Fleet: 64 hosts x 32 models (the planner benchmark's synthetic fleet, with
mixed direct and correlated demand and residencies), every model scored on
one to three of the nine catalog workloads, all nine workloads active with
unbound demand. One run is a whole planning tick with portfolio search:
base plan, feasibility scan, joint and subset search, final plan, admission
rows. Prints the median wall-clock and CPU time (CPU time is the steadier
measure on a shared machine) and the load average. Target: <= 50 ms.

    python benchmarks/portfolio.py [--runs N] [--hosts H] [--models M] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from planner import inputs as fleet_inputs

from gridctl.demand import WorkloadDemand
from gridctl.domain import DEFAULT_WORKLOADS, ControllerPolicy
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_types import PortfolioInputs

TARGET_MS = 50.0


def portfolio_inputs(hosts: int, models: int, seed: int = 11) -> PortfolioInputs:
    rng = random.Random(seed)
    profiles, snapshot = fleet_inputs(hosts, models)
    scored = []
    for p in profiles:
        chosen = rng.sample(DEFAULT_WORKLOADS, rng.randint(1, 3))
        scores = {w: rng.choice((0.6, 0.75, 0.9, 1.0)) for w in chosen}
        scored.append(replace(p, workload_scores=scores))
    workloads = tuple(
        WorkloadDemand(
            workload=w,
            requests=rng.randint(3, 60),
            requests_per_minute=rng.choice((1.0, 4.0, 12.0)),
            offered_concurrency=rng.choice((0.2, 1.0, 3.0)),
            queue_depth=rng.choice((0.0, 0.0, 2.0)),
            error_rate=rng.choice((0.0, 0.0, 0.1)),
            mean_service_seconds=rng.choice((1.0, 4.0, 30.0)),
        )
        for w in DEFAULT_WORKLOADS
    )
    return PortfolioInputs(tuple(scored), snapshot, ControllerPolicy(), workloads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--hosts", type=int, default=64)
    parser.add_argument("--models", type=int, default=32)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    inputs = portfolio_inputs(args.hosts, args.models)
    if args.profile:
        cProfile.runctx("plan_portfolio(inputs)", globals(), {"inputs": inputs}, "/tmp/pf.prof")
        pstats.Stats("/tmp/pf.prof").sort_stats("cumulative").print_stats(25)
        return
    times = []
    cpu_times = []
    result = plan_portfolio(inputs)
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    for _ in range(args.runs):
        started = time.perf_counter()
        started_cpu = time.process_time()
        result = plan_portfolio(inputs)
        cpu_times.append((time.process_time() - started_cpu) * 1000.0)
        times.append((time.perf_counter() - started) * 1000.0)
    median = statistics.median(times)
    cpu = statistics.median(cpu_times)
    verdict = "within" if cpu <= TARGET_MS else "over"
    print(
        f"portfolio search {args.hosts} hosts x {args.models} models x "
        f"{len(inputs.workloads)} workloads: median {median:.1f} ms wall, {cpu:.1f} ms cpu "
        f"over {args.runs} runs ({verdict} the {TARGET_MS:.0f} ms target); "
        f"{result.evaluations} planner evaluations, {result.portfolios} portfolios; "
        f"selected {', '.join(result.selected) or '(none)'}"
    )
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
