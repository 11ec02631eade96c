"""Median plan time of the placement planner on two synthetic fleet shapes.

Sizes (hosts x models): 8x8, 64x32, 256x64 and 1,000x200, in two shapes:

- mixed: mixed demand (direct, correlation-only, none) and about half the
  hosts holding residencies, so few new replicas are placed;
- cold: a new deployment: hosts of four kinds, nine in ten of them empty,
  models with a minimum of 0-1 and a maximum of 1-4 replicas, direct demand
  on about 70% of them and a two-domain minimum on about a quarter, so
  nearly every replica is a new placement.

Prints, per shape, the median wall-clock and CPU time over several runs per
size, the growth exponent of CPU time between consecutive sizes and over the
whole range (log time ratio / log of the hosts x models ratio), the CPU time
when the inputs' canonical texts are already known (a controller tick whose
hosts and profiles are unchanged objects) and the load average, since a shared
machine makes wall-clock times noisy. Every timed run starts from a collected heap
(``gc.collect()`` outside the timing); the collections a plan's own allocations
trigger are timed. ``--saturated`` makes every model hot
and every GPU host full (the proactive repack's worst case) in the mixed shape.

Then, for 64x32 and 1,000x200 of each shape (``tickbench``): the median
``compute_tick`` (portfolio + plan + reconcile) and plan document time, and
``gridctl plan DIR --against SNAP.json`` (text and ``--json``) run in a fresh
process on the fleet written as files: wall time, wall time after the
interpreter's own start (``python -c pass``, printed), output bytes and the
child's CPU time and peak memory. ``--tick`` prints only that part.

    python benchmarks/planner.py [--runs N] [--cold | --mixed] [--profile SIZE] [--saturated]
                                 [--tick]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import math
import os
import pstats
import random
import statistics
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from tickbench import print_tick_and_cli, write_fleet

from gridctl.domain import (
    ControllerPolicy,
    DataTier,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    ModelDemand,
    ModelProfile,
    Residency,
    ResidencyState,
)
from gridctl.planner import plan_placement
from gridctl.planner.canonical import InputTexts

NOW = 1_800_000_000.0
SIZES = ((8, 8), (64, 32), (256, 64), (1000, 200))
TICK_SIZES = ((64, 32), (1000, 200))
HOST_TYPES = (
    # capacity, reserved, runtimes, backends, tags, gpu count, bandwidth
    (81920, 2048, ("llama.cpp", "vllm"), ("cuda",), ("gpu", "datacenter"), 1, 2000.0),
    (32768, 4096, ("llama.cpp",), ("metal",), ("office",), 0, 400.0),
    (16384, 4096, ("llama.cpp",), ("cpu",), ("employee",), 0, 100.0),
    (65536, 2048, ("llama.cpp",), ("cpu",), (), 0, 200.0),
)


def make_profiles(rng: random.Random, count: int) -> list[ModelProfile]:
    profiles = []
    for i in range(count):
        gpu_only = rng.random() < 0.2
        minimum = rng.choice((0, 0, 1, 1, 2))
        profiles.append(
            ModelProfile(
                name=f"model-{i:03d}",
                memory_mb=rng.choice((2048, 4096, 8192, 12288, 24576, 40960)),
                runtime_memory_mb={"vllm": 20480} if gpu_only else {},
                runtimes=("llama.cpp", "vllm") if gpu_only else ("llama.cpp",),
                required_tags=("gpu",) if gpu_only else (),
                data_tier=rng.choice((DataTier.INTERNAL, DataTier.INTERNAL, DataTier.CONFIDENTIAL)),
                min_replicas=minimum,
                max_replicas=minimum + rng.randint(1, 3),
                priority=rng.choice((10, 50, 50, 90)),
                min_failure_domains=rng.choice((1, 1, 2)),
                max_colocated_models=rng.choice((0, 0, 0, 2)),
            )
        )
    return profiles


def make_hosts(rng: random.Random, count: int, profiles: list[ModelProfile]) -> list[HostSnapshot]:
    hosts = []
    for i in range(count):
        capacity, reserved, runtimes, backends, tags, gpus, bandwidth = rng.choice(HOST_TYPES)
        residencies: list[Residency] = []
        if rng.random() < 0.5:
            free = capacity - reserved
            for p in rng.sample(profiles, min(2, len(profiles))):
                if p.memory_mb + 512 < free and set(p.runtimes) & set(runtimes):
                    free -= p.memory_mb
                    residencies.append(
                        Residency(
                            model_id=p.name,
                            memory_mb=p.memory_mb,
                            state=rng.choice(
                                (ResidencyState.READY,) * 4 + (ResidencyState.WARMING,)
                            ),
                            runtime="llama.cpp",
                            loaded_at=NOW - 3600,
                            last_used_at=NOW - rng.choice((30.0, 7200.0)),
                            active_requests=rng.randint(0, 2),
                        )
                    )
        hosts.append(
            HostSnapshot(
                host_id=f"host-{i:04d}",
                resources=HostResources(
                    capacity_mb=capacity,
                    reserved_mb=reserved,
                    runtimes=runtimes,
                    backends=backends,
                    tags=tags,
                    gpu_count=gpus,
                    failure_domain=f"rack-{i % 8}",
                    memory_bandwidth_gbps=bandwidth,
                    disk_free_mb=200_000,
                    max_models=rng.choice((0, 0, 4)),
                    allowed_data_tiers=tuple(DataTier)
                    if "employee" not in tags
                    else (DataTier.PUBLIC, DataTier.INTERNAL),
                ),
                state=rng.choice(
                    (HostState.ACCEPTING,) * 8 + (HostState.THROTTLED, HostState.PAUSED)
                ),
                last_heartbeat=NOW - 2,
                residencies=tuple(residencies),
            )
        )
    return hosts


def make_demand(rng: random.Random, profiles: list[ModelProfile]) -> tuple[ModelDemand, ...]:
    rows = []
    for p in profiles:
        kind = rng.random()
        if kind < 0.4:
            rows.append(ModelDemand(p.name, requests_per_minute=rng.choice((6.0, 30.0, 120.0))))
        elif kind < 0.6:
            rows.append(ModelDemand(p.name, correlated_requests_per_minute=30.0))
    return tuple(rows)


def inputs(hosts: int, models: int, seed: int = 7) -> tuple[list[ModelProfile], FleetSnapshot]:
    rng = random.Random(seed)
    profiles = make_profiles(rng, models)
    snapshot = FleetSnapshot(
        now=NOW, hosts=tuple(make_hosts(rng, hosts, profiles)), demand=make_demand(rng, profiles)
    )
    return profiles, snapshot


def make_cold_profiles(rng: random.Random, count: int) -> list[ModelProfile]:
    profiles = []
    for i in range(count):
        gpu_only = rng.random() < 0.15
        minimum = rng.choice((0, 1))
        profiles.append(
            ModelProfile(
                name=f"model-{i:03d}",
                memory_mb=rng.choice((2048, 4096, 8192, 12288, 24576)),
                runtime_memory_mb={"vllm": 20480} if gpu_only else {},
                runtimes=("llama.cpp", "vllm") if gpu_only else ("llama.cpp",),
                required_tags=("gpu",) if gpu_only else (),
                data_tier=rng.choice((DataTier.INTERNAL, DataTier.INTERNAL, DataTier.CONFIDENTIAL)),
                min_replicas=minimum,
                max_replicas=rng.randint(max(1, minimum), 4),
                priority=rng.choice((10, 50, 50, 90)),
                min_failure_domains=rng.choice((1, 1, 1, 2)),
            )
        )
    return profiles


def make_cold_hosts(
    rng: random.Random, count: int, profiles: list[ModelProfile]
) -> list[HostSnapshot]:
    hosts = make_hosts(rng, count, profiles)
    cold = []
    for host in hosts:
        keep = host.residencies if rng.random() < 0.1 else ()
        cold.append(replace(host, residencies=keep, state=HostState.ACCEPTING))
    return cold


def cold_inputs(hosts: int, models: int, seed: int = 7) -> tuple[list[ModelProfile], FleetSnapshot]:
    """A new deployment: mostly empty hosts, nearly every replica a new placement."""
    rng = random.Random(seed)
    profiles = make_cold_profiles(rng, models)
    demand = tuple(
        ModelDemand(p.name, requests_per_minute=rng.choice((6.0, 30.0, 120.0, 600.0)))
        for p in profiles
        if rng.random() < 0.7
    )
    snapshot = FleetSnapshot(
        now=NOW, hosts=tuple(make_cold_hosts(rng, hosts, profiles)), demand=demand
    )
    return profiles, snapshot


def saturate(snapshot: FleetSnapshot, profiles: list[ModelProfile]) -> FleetSnapshot:
    """Every model hot and every GPU host full: the proactive repack's worst case."""
    demand = tuple(ModelDemand(p.name, requests_per_minute=600.0) for p in profiles)
    hosts = []
    for i, h in enumerate(snapshot.hosts):
        if "gpu" in h.resources.tags:
            filler = Residency(
                model_id=profiles[i % len(profiles)].name,
                memory_mb=70000,
                state=ResidencyState.READY,
                runtime="llama.cpp",
                loaded_at=NOW - 3600,
            )
            h = replace(h, residencies=(filler,))
        hosts.append(h)
    return replace(snapshot, hosts=tuple(hosts), demand=demand)


def shape_inputs(shape: str, hosts: int, models: int) -> tuple[list[ModelProfile], FleetSnapshot]:
    return cold_inputs(hosts, models) if shape == "cold" else inputs(hosts, models)


def median_ms(
    shape: str, hosts: int, models: int, runs: int, saturated: bool = False
) -> tuple[float, float, float, int]:
    """Median wall-clock and CPU milliseconds of one plan, the median CPU milliseconds of a
    plan whose inputs' canonical texts are remembered (a controller tick whose hosts
    and profiles did not change), and the new replicas placed."""
    profiles, snapshot = shape_inputs(shape, hosts, models)
    if saturated and shape == "mixed":
        snapshot = saturate(snapshot, profiles)
    policy = ControllerPolicy()
    wall = []
    cpu = []
    remembered = []
    texts = InputTexts()
    plan = plan_placement(profiles, snapshot, policy)  # warm-up, outside the timing
    plan_placement(profiles, snapshot, policy, texts=texts)
    # each run starts from a collected heap, so a full collection that the previous
    # run's garbage made due is not charged to the next one
    for _ in range(runs):
        gc.collect()
        started = time.perf_counter()
        started_cpu = time.process_time()
        plan_placement(profiles, snapshot, policy)
        cpu.append((time.process_time() - started_cpu) * 1000.0)
        wall.append((time.perf_counter() - started) * 1000.0)
    for _ in range(runs):
        gc.collect()
        started_cpu = time.process_time()
        plan_placement(profiles, snapshot, policy, texts=texts)
        remembered.append((time.process_time() - started_cpu) * 1000.0)
    placed = sum(1 for a in plan.assignments if not a.existing)
    return statistics.median(wall), statistics.median(cpu), statistics.median(remembered), placed


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover - not every platform reports one
        return "unknown"


def growth(size: int, ms: float, prev_size: int, prev_ms: float) -> str:
    return f"{math.log(ms / prev_ms) / math.log(size / prev_size):.2f}"


def print_shape(shape: str, runs_wanted: int, saturated: bool) -> None:
    label = f"{shape} shape" + (" (saturated)" if saturated and shape == "mixed" else "")
    print(f"{label}:")
    print(
        f"{'hosts x models':>15} {'median ms':>10} {'cpu ms':>8} {'placed':>7} {'growth':>7}"
        f" {'cpu ms, texts known':>20}"
    )
    previous: tuple[int, float] | None = None
    first: tuple[int, float] | None = None
    for hosts, models in SIZES:
        runs = runs_wanted if hosts * models < 100_000 else max(3, runs_wanted // 2)
        ms, cpu, known, placed = median_ms(shape, hosts, models, runs, saturated)
        size = hosts * models
        step = "" if previous is None else growth(size, cpu, *previous)
        print(
            f"{hosts:>7} x {models:<5} {ms:>10.1f} {cpu:>8.1f} {placed:>7} {step:>7} {known:>20.1f}"
        )
        previous = (size, cpu)
        if first is None and hosts >= 64:
            first = (size, cpu)
    if first is not None and previous is not None and previous[0] > first[0]:
        print(f"growth exponent 64x32 -> 1000x200 (cpu): {growth(*previous, *first)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--profile",
        metavar="HxM",
        help="cProfile --runs warm plans of one size (after one plan outside it), e.g. 1000x200",
    )
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--cold", action="store_true", help="only the cold (new deployment) shape")
    only.add_argument("--mixed", action="store_true", help="only the mixed (incumbent) shape")
    parser.add_argument(
        "--saturated",
        action="store_true",
        help="every model hot and every GPU host full (the proactive repack's worst case)",
    )
    parser.add_argument(
        "--tick",
        action="store_true",
        help="only compute_tick, the plan document and the CLI dry run in fresh processes",
    )
    args = parser.parse_args()
    shapes = ("cold",) if args.cold else ("mixed",) if args.mixed else ("mixed", "cold")
    if args.profile:
        hosts, models = (int(v) for v in args.profile.split("x"))
        profiles, snapshot = shape_inputs(shapes[-1], hosts, models)
        if args.saturated and shapes[-1] == "mixed":
            snapshot = saturate(snapshot, profiles)
        policy = ControllerPolicy()
        # the first plan generates the canonical encoders and fills per-process memos:
        # profile the plans after it, as a running controller plans
        plan_placement(profiles, snapshot, policy)
        profiler = cProfile.Profile()
        for _ in range(args.runs):
            profiler.runcall(plan_placement, profiles, snapshot, policy)
        print(f"{args.runs} warm plans of {hosts}x{models} ({shapes[-1]} shape):")
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return
    print(f"load average before: {load_average()}")
    if not args.tick:
        for shape in shapes:
            print_shape(shape, args.runs, args.saturated)
    print_tick(shapes, args.runs)
    print(f"load average after: {load_average()}")


def print_tick(shapes: tuple[str, ...], runs: int) -> None:
    """compute_tick and the operator's dry run (``gridctl plan``) on written fleet files."""
    print("\nthe whole tick and the CLI dry run (a fresh process per run):")
    with tempfile.TemporaryDirectory(prefix="gridctl-bench-") as tmp:
        fleets = []
        for shape in shapes:
            for hosts, models in TICK_SIZES:
                directory = Path(tmp) / f"{shape}-{hosts}x{models}"
                write_fleet(directory, *shape_inputs(shape, hosts, models))
                fleets.append((shape, hosts, models, directory))
        print_tick_and_cli(fleets, max(3, runs))


if __name__ == "__main__":
    main()
