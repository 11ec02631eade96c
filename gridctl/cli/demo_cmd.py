"""``gridctl fleet demo`` and ``gridctl fleet compete STRATEGY...``: the real workday.

``demo`` runs the adaptive day once (the ``smart`` strategy: the live allocator
sizes every model from demand); ``compete`` runs the same day once per named
strategy on a fresh fleet each time and prints them side by side. Both print
the timeline as it happens, the verdicts, and write the lab-style report.
Exit 0 when every promise of every day held, 1 when one did not, 2 on a usage
error or a fleet that could not start.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from gridctl.client import default_state_root

MIN_SECONDS, MAX_SECONDS = 120.0, 3600.0


def duration(value: str) -> float:
    """``5m``, ``300s``, ``300`` -> seconds, between two minutes and an hour."""
    text = value.strip().lower()
    scale = 60.0 if text.endswith("m") else 1.0
    try:
        seconds = float(text.rstrip("ms")) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {value!r} (e.g. 5m, 300s)") from None
    if not MIN_SECONDS <= seconds <= MAX_SECONDS:
        raise argparse.ArgumentTypeError(
            f"{value}: must be between {MIN_SECONDS:.0f}s and {MAX_SECONDS:.0f}s"
        )
    return seconds


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--duration", type=duration, default=300.0, help="length of the day (default 5m)"
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where the day's fleet keeps state and logs (default ~/.local/state/gridctl/demo; "
        "emptied at the start)",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        metavar="DIR",
        help="where report.json, the charts and index.html go (default STATE_DIR/report)",
    )
    parser.add_argument("--port", type=int, default=22180, help="controller port (default 22180)")
    parser.add_argument(
        "--engine-port-base", type=int, default=23800, help="first engine port (default 23800)"
    )
    parser.add_argument("--json", action="store_true", help="print report.json at the end")


def register(fsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = fsub.add_parser(
        "demo",
        help="the adaptive workday on real processes (surge, drain, cooldown)",
        description="Start a 3-host embedded fleet with a baseline chat model and a coding "
        "specialist, drive a bounded workday through the router with the openai client, "
        "print what the controller changed and why, check the day's promises, stop "
        "everything and write the report.",
    )
    _common(demo)
    demo.set_defaults(func=run_demo, strategies=["smart"])
    compete = fsub.add_parser(
        "compete",
        help="the same real day under several strategies, side by side",
        description="Run the demo's day once per strategy on a fresh fleet: smart (demand "
        "sizes every model) and static (the day's average map, fixed).",
    )
    compete.add_argument("strategies", nargs="+", metavar="STRATEGY", help="smart, static")
    _common(compete)
    compete.set_defaults(func=run_demo)


def run_demo(args: argparse.Namespace) -> int:
    from gridctl.demo.desired import STRATEGIES

    unknown = [s for s in args.strategies if s not in STRATEGIES]
    if unknown:
        print(
            f"error: unknown strategy {', '.join(unknown)} (choose from "
            f"{', '.join(sorted(STRATEGIES))})",
            file=sys.stderr,
        )
        return 2
    return _run(args, [STRATEGIES[s] for s in dict.fromkeys(args.strategies)])


def _stop_on_term(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # the day's ``finally`` stops the fleet


def _run(args: argparse.Namespace, strategies: list[Any]) -> int:
    from gridctl.demo.day import DayPlan, run_day, verdicts
    from gridctl.demo.report import document, write_report
    from gridctl.fleetrun import FleetStartError

    root = (args.state_dir or default_state_root() / "demo").resolve()

    def say(line: str) -> None:
        if not args.json:
            print(line, flush=True)

    signal.signal(signal.SIGTERM, _stop_on_term)
    results = []
    for strategy in strategies:
        say(f"== {strategy.name}: a {args.duration:.0f}s day on 3 logical hosts ==")
        plan = DayPlan(
            strategy,
            args.duration,
            root / strategy.name,
            port=args.port,
            engine_port_base=args.engine_port_base,
            say=say,
        )
        try:
            result = run_day(plan)
        except (FleetStartError, TimeoutError, RuntimeError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("interrupted; the fleet was stopped", file=sys.stderr)
            return 130
        checks = verdicts(result)
        results.append((result, checks))
        for v in checks:
            say(f"{'held' if v.held else 'NOT HELD':>8}  {v.promise}: {v.evidence}")
    report_dir = (args.report or root / "report").resolve()
    page = write_report(report_dir, results)
    if len(results) > 1:
        say("strategy  served  failed  p95 s  promises held")
        for run in document(results)["runs"]:
            held = sum(v["held"] for v in run["verdicts"])
            say(
                f"{run['strategy']:<8}  {run['served']:>6}  {run['failed']:>6}  "
                f"{run['p95_seconds']!s:>5}  {held}/{len(run['verdicts'])}"
            )
    if args.json:
        print(json.dumps(document(results), indent=2, sort_keys=True))
    else:
        say(f"report: {page}")
    return 0 if all(v.held for _, checks in results for v in checks) else 1
