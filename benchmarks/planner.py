"""Median plan time of the placement planner on mixed synthetic fleets.

Sizes (hosts x models): 8x8, 64x32, 256x64 and 1,000x200, with mixed demand
(direct, correlation-only, none) and about half the hosts holding residencies.
Prints the median wall-clock (and CPU) time over several runs per size, the
growth exponent between consecutive sizes (log time ratio / log of the hosts x
models ratio) and the load average, since a shared machine makes wall-clock
times noisy. ``--saturated`` makes every model hot and every GPU host full,
the proactive repack's worst case.

    python benchmarks/planner.py [--runs N] [--profile SIZE] [--saturated]
"""

from __future__ import annotations

import argparse
import cProfile
import math
import os
import pstats
import random
import statistics
import time
from dataclasses import replace

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

NOW = 1_800_000_000.0
SIZES = ((8, 8), (64, 32), (256, 64), (1000, 200))
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


def median_ms(hosts: int, models: int, runs: int, saturated: bool = False) -> tuple[float, float]:
    """Median wall-clock and CPU milliseconds of one plan."""
    profiles, snapshot = inputs(hosts, models)
    if saturated:
        snapshot = saturate(snapshot, profiles)
    policy = ControllerPolicy()
    wall = []
    cpu = []
    for _ in range(runs):
        started = time.perf_counter()
        started_cpu = time.process_time()
        plan_placement(profiles, snapshot, policy)
        cpu.append((time.process_time() - started_cpu) * 1000.0)
        wall.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(wall), statistics.median(cpu)


def load_average() -> str:
    try:
        return " ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover - not every platform reports one
        return "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--profile", metavar="HxM", help="cProfile one size, e.g. 1000x200")
    parser.add_argument(
        "--saturated",
        action="store_true",
        help="every model hot and every GPU host full (the proactive repack's worst case)",
    )
    args = parser.parse_args()
    if args.profile:
        hosts, models = (int(v) for v in args.profile.split("x"))
        profiles, snapshot = inputs(hosts, models)
        if args.saturated:
            snapshot = saturate(snapshot, profiles)
        profiler = cProfile.Profile()
        profiler.runcall(plan_placement, profiles, snapshot, ControllerPolicy())
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
        return
    previous: tuple[int, float] | None = None
    print(f"load average before: {load_average()}")
    print(f"{'hosts x models':>15} {'median ms':>10} {'cpu ms':>8} {'growth':>7}")
    for hosts, models in SIZES:
        runs = args.runs if hosts * models < 100_000 else max(3, args.runs // 2)
        ms, cpu = median_ms(hosts, models, runs, args.saturated)
        growth = ""
        if previous is not None:
            size, prev_ms = previous
            growth = f"{math.log(ms / prev_ms) / math.log(hosts * models / size):.2f}"
        print(f"{hosts:>7} x {models:<5} {ms:>10.1f} {cpu:>8.1f} {growth:>7}")
        previous = (hosts * models, ms)
    print(f"load average after: {load_average()}")


if __name__ == "__main__":
    main()
