"""Wall-clock and CPU time of one scenario-lab workday, and whether two runs are identical.

Default: ``gridctl lab scenario --machines 16 --models 9 --users 500
--duration 2h --json`` (target: <= 10 s on the development machine), run
twice in one process through the real command; the two JSON documents must
be byte-identical. CPU time is printed beside wall-clock because the machine
is shared; the load average says how busy it was.

    python benchmarks/lab.py [--machines N] [--models M] [--users U] [--duration 2h]
                             [--strategy smart] [--runs 2] [--profile]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import hashlib
import io
import os
import pstats
import sys
import time

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


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--machines", default="16")
    parser.add_argument("--models", default="9")
    parser.add_argument("--users", default="500")
    parser.add_argument("--duration", default="2h")
    parser.add_argument("--strategy", default="smart")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
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
