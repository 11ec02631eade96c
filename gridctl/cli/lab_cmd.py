"""``gridctl lab scenario`` and ``gridctl lab graduate``: the scenario lab's commands.

This is the lab's shell: it reads and validates the Fleet blueprints and the
workload catalog (``gridctl.config``), reads workload traces, runs the pure
lab (``gridctl.lab``) on a simulated clock, and prints or writes the result.
Bad arguments exit 1 with the option named; bad traces name file and line.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gridctl.config import check_directory
from gridctl.domain import Fleet, WorkloadCatalog
from gridctl.domain.policy import ControllerPolicy
from gridctl.lab.gates import RunRow
from gridctl.lab.graduation import graduate
from gridctl.lab.models import MAX_MODELS
from gridctl.lab.scenario import (
    ScenarioConfig,
    World,
    build_world,
    run,
    run_report,
    scenario_header,
)
from gridctl.lab.strategies import STRATEGIES, Strategy
from gridctl.lab.traces import Trace, TraceError, parse_trace
from gridctl.lab.workday import WORKLOADS

DEFAULT_BLUEPRINTS = "fleet/lab-blueprints.yaml"
DEFAULT_CATALOG = "policies/workloads.yaml"
_DURATION = re.compile(r"^(?:(\d+)h)?(?:(\d+)m)?\Z")


class UsageError(ValueError):
    """A command-line value is out of range; the message names the option."""


GATE_CALIBRATION_MINUTES = 120  # the README's `--duration 2h`: the gates' thresholds assume it


def parse_duration(text: str) -> int:
    """Minutes from ``2h``, ``30m``, ``1h30m`` or a bare number of minutes."""
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    match = _DURATION.match(value)
    if not value or match is None or not any(match.groups()):
        raise UsageError(f"--duration {text!r}: use e.g. 30m, 2h or 1h30m")
    hours, minutes = (int(g) if g else 0 for g in match.groups())
    return hours * 60 + minutes


def parse_list(option: str, text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{option} {text!r}: a comma-separated list of integers") from None
    if not values:
        raise UsageError(f"{option} is empty")
    return values


def _shipped(relative: str) -> Path:
    """A path relative to the working directory, else to the source tree."""
    here = Path(relative)
    if here.exists():
        return here
    return Path(__file__).resolve().parents[2] / relative


def load_inputs(blueprints: str | None, catalog: str | None) -> tuple[Fleet, WorkloadCatalog]:
    fleet_path = Path(blueprints) if blueprints else _shipped(DEFAULT_BLUEPRINTS)
    report = check_directory(fleet_path)
    if report.state is None:
        raise UsageError("\n".join(i.render() for i in report.errors))
    if not report.state.fleets:
        raise UsageError(f"{fleet_path}: no Fleet document")
    catalog_path = Path(catalog) if catalog else _shipped(DEFAULT_CATALOG)
    cat_report = check_directory(catalog_path)
    if cat_report.state is None:
        raise UsageError("\n".join(i.render() for i in cat_report.errors))
    return report.state.fleets[0], cat_report.state.catalog


def load_traces(specs: Sequence[str], catalog: WorkloadCatalog) -> dict[str, Trace]:
    limit = ControllerPolicy().trace_max_bytes
    traces: dict[str, Trace] = {}
    for spec in specs:
        workload, sep, path = spec.partition("=")
        if not sep or not workload or not path:
            raise UsageError(f"--workload-trace {spec!r}: use WORKLOAD=CSV")
        if workload not in WORKLOADS or workload not in catalog.names:
            raise UsageError(f"--workload-trace: unknown workload {workload!r}")
        if workload in traces:
            raise UsageError(f"--workload-trace: {workload} given twice")
        file = Path(path)
        try:
            size = file.stat().st_size
            if size > limit:
                raise TraceError(path, 0, f"trace is {size} bytes; the limit is {limit}")
            data = file.read_bytes()
        except OSError as exc:
            raise TraceError(path, 0, exc.strerror or str(exc)) from None
        traces[workload] = parse_trace(workload, path, data, limit)
    return traces


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    lab = sub.add_parser(
        "lab",
        help="the deterministic scenario lab: simulated workdays and graduation gates",
        description=(
            "Explore a large heterogeneous logical fleet on a simulated clock, running the "
            "production learners, portfolio, planner and reconciler every tick. No model "
            "process is started."
        ),
    )
    verbs = lab.add_subparsers(dest="lab_command", metavar="VERB")
    scenario = verbs.add_parser(
        "scenario",
        help="run one seeded workday under one strategy",
        description="Run one seeded workday and print its score, or the full report as JSON.",
    )
    _common(scenario)
    scenario.add_argument("--machines", default="8", help="managed logical machines (default 8)")
    scenario.add_argument("--seed", default="42", help="scenario seed (default 42)")
    scenario.add_argument(
        "--strategy",
        default="smart",
        choices=[s.value for s in STRATEGIES],
        help="control under test (default smart)",
    )
    scenario.add_argument(
        "--compare", action="store_true", help="also run the other three strategies"
    )
    scenario.add_argument(
        "--oracle",
        action="store_true",
        help="add the hindsight oracle (at most 4 machines, 9 models, 240 minutes)",
    )
    scenario.add_argument(
        "--milp", action="store_true", help="add the exact per-tick optimality gap (HiGHS)"
    )
    scenario.add_argument(
        "--workload-trace",
        action="append",
        default=[],
        metavar="WORKLOAD=CSV",
        help="replay a headerless CSV (seconds, rate) as that workload's curve; repeatable",
    )
    scenario.add_argument("--timeline", action="store_true", help="print every changing tick")
    scenario.add_argument("--report", metavar="DIR", help="write report.json and index.html")
    scenario.set_defaults(func=run_scenario)
    grad = verbs.add_parser(
        "graduate",
        help="run every strategy per fleet size and seed and check the gates",
        description="Exit 0 when every gate passes, 1 naming the failing gates otherwise. "
        "The gates are calibrated on runs of at least 2h of simulated time "
        "(--duration 2h); shorter runs see too few requests to pass them.",
    )
    _common(grad)
    grad.add_argument("--machines", default="2,4,8", help="fleet sizes (default 2,4,8)")
    grad.add_argument("--seeds", default="42,144", help="seeds (default 42,144)")
    grad.set_defaults(func=run_graduate)

    def usage(_args: argparse.Namespace) -> int:
        lab.print_help()
        return 2

    lab.set_defaults(func=usage)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--models", default="8", help=f"lab models, 1..{MAX_MODELS} (default 8)")
    parser.add_argument("--users", default="50", help="users (default 50)")
    parser.add_argument(
        "--duration", default="30m", help="simulated time, e.g. 30m or 2h (default 30m)"
    )
    parser.add_argument("--blueprints", help=f"Fleet blueprints (default {DEFAULT_BLUEPRINTS})")
    parser.add_argument("--catalog", help=f"workload catalog (default {DEFAULT_CATALOG})")
    parser.add_argument("--json", action="store_true", help="print the stable JSON report")


def _int(option: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise UsageError(f"{option} {text!r} is not an integer") from None
    if not low <= value <= high:
        raise UsageError(f"{option} must be between {low} and {high}, got {value}")
    return value


def _dump(body: Any) -> str:
    return json.dumps(body, sort_keys=True, indent=2)


def _fail(message: str) -> int:
    print(f"gridctl lab: {message}", file=sys.stderr)
    return 1


def run_scenario(args: argparse.Namespace) -> int:
    try:
        fleet, catalog = load_inputs(args.blueprints, args.catalog)
        config = ScenarioConfig(
            machines=_int("--machines", args.machines, 1, 64),
            models=_int("--models", args.models, 1, MAX_MODELS),
            users=_int("--users", args.users, 1, 10_000),
            minutes=parse_duration(args.duration),
            seed=_int("--seed", args.seed, 0, 2**63 - 1),
            traces=load_traces(args.workload_trace, catalog),
        )
        problems = config.problems()
        if problems:
            raise UsageError("; ".join(problems))
        if args.oracle:
            from gridctl.lab.oracle import oracle_problems

            problems = oracle_problems(config)
            if problems:
                raise UsageError("--oracle: " + "; ".join(problems))
    except (UsageError, TraceError) as exc:
        return _fail(str(exc))
    world = build_world(config, fleet, catalog)
    chosen = Strategy(args.strategy)
    strategies = [chosen] + ([s for s in STRATEGIES if s is not chosen] if args.compare else [])
    runs = [run(world, s, keep_plans=args.milp and s is chosen) for s in strategies]
    document: dict[str, Any] = {
        "scenario": scenario_header(world),
        "runs": [run_report(world, r) for r in runs],
        "identical_traces": len({r.digest for r in runs}) == 1 and runs[0].digest == world.digest,
    }
    if args.oracle:
        from gridctl.lab.oracle import oracle_report

        document["oracle"] = oracle_report(world, runs[0])
    if args.milp:
        from gridctl.lab.optimality import optimality_report

        document["optimality"] = optimality_report(world, runs[0], quiet_solver)
    page = None
    if args.report:
        from gridctl.cli.lab_report import write_report

        page = write_report(Path(args.report), document, world, runs)
    if args.json:
        print(_dump(document))
        return 0
    _print_table(document, world)
    if args.timeline:
        _print_timeline(document)
    if page is not None:
        print(f"report: {page}")
    return 0


def quiet_solver() -> Any:
    """A HiGHS instance, created with its console banner kept off our stdout."""
    import os

    import highspy

    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as sink:
            os.dup2(sink.fileno(), 1)
            solver = highspy.Highs()  # type: ignore[no-untyped-call]
    finally:
        os.dup2(saved, 1)
        os.close(saved)
    return solver


def _print_table(document: dict[str, Any], world: World) -> None:
    c = world.config
    print(
        f"scenario: {c.machines} machines, {c.models} models, {c.users} users, "
        f"{c.minutes} min, seed {c.seed}, trace {world.digest[:12]}"
    )
    head = (
        "strategy",
        "score",
        "served%",
        "least-wl%",
        "slo%",
        "cover%",
        "chg/nh",
        "rev",
        "waits",
        "unsafe",
    )
    print("  ".join(f"{h:>9}" for h in head))
    for body in document["runs"]:
        s = body["summary"]
        cells = (
            body["strategy"],
            s["score"],
            s["served_pct"],
            s["least_workload_pct"],
            s["slo_pct"],
            s["coverage_pct"],
            s["changes_per_node_hour"],
            s["rapid_reversals"],
            s["startup_waits"],
            s["safety_violations"],
        )
        print("  ".join(f"{v:>9.1f}" if isinstance(v, float) else f"{v!s:>9}" for v in cells))
    first = document["runs"][0]
    print("workload   offered  served%  allocatable")
    for name, w in first["workloads"].items():
        allocatable = "yes" if w["allocatable"] else "no"
        print(f"{name:10} {w['offered']:7}  {w['served_pct']:7.1f}  {allocatable}")
    p = first["prefetch"]
    print(
        f"prefetch: {p['downloads']} downloads, {p['hits']} hits, "
        f"{p['unused_predictions']} unused, "
        f"{p['reclaimed_disk_mb']} MB reclaimed, {p['avoided_load_seconds']:.0f}s load avoided"
    )
    if "oracle" in document:
        o = document["oracle"]
        print(
            f"oracle: ceiling {o['ceiling_served']} served, smart {o['smart_served']} "
            f"({o['smart_pct_of_ceiling']:.1f}% of the ceiling), {o['states_evaluated']} states"
        )
    if "optimality" in document:
        g = document["optimality"]
        print(
            f"optimality gap: median {g['median_gap_pct']:.2f}%, worst {g['worst_gap_pct']:.2f}% "
            f"at minute {g['worst_minute']}"
        )


def _print_timeline(document: dict[str, Any]) -> None:
    last: tuple[Any, ...] | None = None
    for row in document["runs"][0]["timeline"]:
        key = (row["ready"], row["issued"], row["events"])
        if key == last:
            continue
        last = key
        ready = "; ".join(f"{h}: {', '.join(m)}" for h, m in row["ready"].items())
        print(f"[{row['minute']:4}] {row['phase']:17} {ready}")
        for line in row["events"] + row["issued"]:
            print(f"         {line}")


def run_graduate(args: argparse.Namespace) -> int:
    try:
        fleet, catalog = load_inputs(args.blueprints, args.catalog)
        sizes = parse_list("--machines", args.machines)
        seeds = parse_list("--seeds", args.seeds)
        for size in sizes:
            if not 1 <= size <= 64:
                raise UsageError(f"--machines must be between 1 and 64, got {size}")
        minutes = parse_duration(args.duration)
        models = _int("--models", args.models, 1, MAX_MODELS)
        users = _int("--users", args.users, 1, 10_000)
        probe = ScenarioConfig(sizes[0], models, users, minutes, seeds[0])
        problems = probe.problems()
        if problems:
            raise UsageError("; ".join(problems))
    except UsageError as exc:
        return _fail(str(exc))

    def progress(row: RunRow) -> None:
        if not args.json:
            s = row.summary
            print(
                f"{row.machines:3} machines  seed {row.seed:<6} {row.strategy:9} "
                f"score {s['score']:5.1f}  served {s['served_pct']:5.1f}%",
                flush=True,
            )

    matrix = graduate(
        fleet,
        catalog,
        sizes,
        seeds,
        minutes=minutes,
        users=users,
        models=models,
        progress=progress,
    )
    if args.json:
        print(_dump(matrix.to_json()))
    else:
        for gate in matrix.gates:
            mark = "pass" if gate.passed else "FAIL"
            rule = f"{gate.value:.3f} {gate.comparison} {gate.threshold:g}"
            print(f"{mark}  {gate.name}: {rule}  ({gate.detail})")
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
