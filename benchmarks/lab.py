"""Wall-clock and CPU time of one scenario-lab workday, and whether two runs are identical.

Default: ``gridctl lab scenario --machines 16 --models 9 --users 500
--duration 2h --json`` (target: <= 10 s on the development machine), run
twice in one process through the real command; the two JSON documents must
be byte-identical. CPU time is printed beside wall-clock because the machine
is shared; the load average says how busy it was.

    python benchmarks/lab.py [--machines N] [--models M] [--users U] [--duration 2h]
                             [--strategy smart] [--runs 2] [--profile]

``--sweep`` instead times ``gridctl lab graduate`` on a small sweep (default
``--machines 2,4 --seeds 1-4 --models 4 --users 20 --duration 20m --json``),
each in a fresh process: serially (``--jobs 1``) and with ``--jobs 2`` (or
``--jobs N``), prints the speed-up ratio and checks that both JSON reports
are the same bytes. The speed-up is only measured here, never asserted.

    python benchmarks/lab.py --sweep [--sweep-machines 2,4] [--sweep-seeds 1-4]
                             [--models 4] [--users 20] [--duration 20m] [--jobs 2]

``--maxima`` times the specification's maxima in a fresh process: ``gridctl lab
scenario --machines 64 --models 32 --users 10000 --duration 24h --json``
(acceptance: <= 60 s on the development machine), printing wall-clock, CPU and
peak memory (``--duration`` shortens it to extrapolate). ``--graduation``
times the 80-cell sweep ``gridctl lab graduate --machines 2,4,8,16 --seeds
7001-7020 --duration 2h --json`` (acceptance: <= 10 minutes) the same way.
Times are printed, never asserted.

    python benchmarks/lab.py --maxima [--duration 24h]
    python benchmarks/lab.py --graduation [--sweep-machines 2,4,8,16]
                             [--sweep-seeds 7001-7020] [--duration 2h] [--jobs 2]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import os
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path

from gridctl.cli.main import main


def one_run(argv: list[str]) -> tuple[float, float, str]:
    out = io.StringIO()
    wall, cpu = time.perf_counter(), time.process_time()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if code != 0:
        raise SystemExit(f"gridctl {' '.join(argv)} exited {code}")
    return wall, cpu, out.getvalue()


def fresh_process(argv: list[str]) -> tuple[float, float, str]:
    """Wall-clock and CPU seconds (workers included) and stdout of ``gridctl ARGV``."""
    wall, used, _, out = measured_process(argv)
    return wall, used, out


def measured_process(argv: list[str]) -> tuple[float, float, float, str]:
    """``fresh_process`` plus the peak resident memory (MB) of the largest child so far."""
    root = Path(__file__).resolve().parents[1]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]),
    }
    cpu = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "gridctl", *argv],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    if done.returncode not in (0, 1):  # 1: a gate failed, which is still a measured run
        raise SystemExit(f"gridctl {' '.join(argv)} exited {done.returncode}: {done.stderr}")
    peak_mb = after.ru_maxrss / 1024.0  # kilobytes on Linux
    return wall, used, peak_mb, done.stdout


def maxima(args: argparse.Namespace) -> None:
    """The specification's largest scenario, once, in a fresh process."""
    argv = [
        "lab",
        "scenario",
        "--machines",
        args.machines if args.machines != "16" else "64",
        "--models",
        args.models or "32",
        "--users",
        args.users or "10000",
        "--duration",
        args.duration or "24h",
        "--strategy",
        args.strategy,
        "--json",
    ]
    print_measured(argv, "target <= 60 s wall for 24h")


def print_measured(argv: list[str], target: str) -> None:
    """Run ``gridctl ARGV`` in a fresh process and print its wall, CPU, peak memory, the
    report's digest (same digest, same report) and the load average beside ``target``."""
    wall, cpu, peak_mb, out = measured_process(argv)
    digest = hashlib.sha256(out.encode()).hexdigest()[:16]
    load = os.getloadavg()[0]
    print(f"gridctl {' '.join(argv)}")
    print(f"wall {wall:.2f} s, cpu {cpu:.2f} s, peak memory {peak_mb:.0f} MB, report {digest}")
    print(f"{target}; load average {load:.2f}")


def graduation(args: argparse.Namespace) -> None:
    """The acceptance sweep (4 fleet sizes x 20 seeds = 80 cells), in a fresh process."""
    argv = [
        "lab",
        "graduate",
        "--machines",
        args.sweep_machines if args.sweep_machines != "2,4" else "2,4,8,16",
        "--seeds",
        args.sweep_seeds if args.sweep_seeds != "1-4" else "7001-7020",
        "--duration",
        args.duration or "2h",
        "--jobs",
        str(args.jobs),
        "--json",
    ]
    print_measured(argv, f"target <= 600 s wall; {os.cpu_count()} cores")


def sweep(args: argparse.Namespace) -> None:
    argv = [
        "lab",
        "graduate",
        "--machines",
        args.sweep_machines,
        "--seeds",
        args.sweep_seeds,
        "--models",
        args.models or "4",
        "--users",
        args.users or "20",
        "--duration",
        args.duration or "20m",
        "--json",
    ]
    serial, serial_cpu, serial_out = fresh_process([*argv, "--jobs", "1"])
    parallel, parallel_cpu, parallel_out = fresh_process([*argv, "--jobs", str(args.jobs)])
    identical = serial_out == parallel_out
    load = os.getloadavg()[0]
    print(f"gridctl {' '.join(argv)}")
    print(f"--jobs 1: wall {serial:.2f} s, cpu {serial_cpu:.2f} s")
    print(f"--jobs {args.jobs}: wall {parallel:.2f} s, cpu {parallel_cpu:.2f} s")
    print(f"speed-up {serial / parallel:.2f}x on {os.cpu_count()} cores; load average {load:.2f}")
    print(f"JSON reports byte-identical: {identical}")
    if not identical:
        sys.exit(1)


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="16")
    parser.add_argument("--models", help="default 9 (a sweep: 4)")
    parser.add_argument("--users", help="default 500 (a sweep: 20)")
    parser.add_argument("--duration", help="default 2h (a sweep: 20m)")
    parser.add_argument("--strategy", default="smart")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="time graduate serial vs parallel")
    parser.add_argument("--sweep-machines", default="2,4")
    parser.add_argument("--sweep-seeds", default="1-4")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--maxima", action="store_true", help="time 64 x 32 x 10000 x 24h")
    parser.add_argument("--graduation", action="store_true", help="time the 80-cell sweep")
    args = parser.parse_args()
    if args.maxima:
        maxima(args)
        return
    if args.graduation:
        graduation(args)
        return
    if args.sweep:
        sweep(args)
        return
    args.models, args.users = args.models or "9", args.users or "500"
    args.duration = args.duration or "2h"
    argv = [
        "lab",
        "scenario",
        "--machines",
        args.machines,
        "--models",
        args.models,
        "--users",
        args.users,
        "--duration",
        args.duration,
        "--strategy",
        args.strategy,
        "--json",
    ]
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(one_run, argv)
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(30)
        return
    outputs = []
    for index in range(args.runs):
        wall, cpu, text = one_run(argv)
        outputs.append(text)
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        print(f"run {index + 1}: wall {wall:.2f} s, cpu {cpu:.2f} s, report sha256 {digest}")
    identical = len(set(outputs)) == 1
    load = os.getloadavg()[0]
    print(f"gridctl {' '.join(argv)}")
    print(f"byte-identical across {args.runs} runs: {identical}; load average {load:.2f}")
    if not identical:
        sys.exit(1)


if __name__ == "__main__":
    run()
