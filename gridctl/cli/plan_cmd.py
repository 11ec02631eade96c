"""``gridctl plan``: plan a desired-state directory against a frozen fleet snapshot.

Loads DIR (all-or-nothing), reads the snapshot (``now`` comes from it), runs
the pure planner once and prints a Terraform-like diff — ``+`` place, ``-``
preempt, ``!`` unsatisfied — or the plan as JSON. ``--explain MODEL`` shows
every host considered for MODEL with its rejection or named score parts.
``--detailed-exitcode``: 0 no changes, 2 changes, 1 error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from gridctl.config import load_directory
from gridctl.config.snapshots import load_snapshot
from gridctl.domain import ModelExplanation, Plan
from gridctl.errors import ConfigError, WireError
from gridctl.planner import plan_placement, plan_to_json

DEFAULT_DIRECTORY = "policies"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "plan",
        help="plan DIR's desired state against a fleet snapshot (a Terraform-like diff)",
        description=(
            "Load the desired state in DIR, read the frozen fleet observation SNAPSHOT "
            "(schemas/wire/fleet-snapshot.schema.json; its 'now' is the planning instant) and "
            "print what the planner would do: '+' place a replica, '-' preempt a residency, "
            "'!' an unsatisfied constraint, each with its reason."
        ),
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=DEFAULT_DIRECTORY,
        metavar="DIR",
        help=f"desired-state directory or YAML file (default: {DEFAULT_DIRECTORY})",
    )
    parser.add_argument(
        "--against", required=True, metavar="SNAPSHOT", help="fleet snapshot JSON file"
    )
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(
        "--explain",
        metavar="MODEL",
        help="show every host considered for MODEL: rejection or named score components",
    )
    parser.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 0 when nothing changes, 2 when the plan places or preempts, 1 on error",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        desired = load_directory(args.directory)
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue.render(), file=sys.stderr)
        return 1
    try:
        snapshot = load_snapshot(args.against)
    except WireError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.explain and desired.profile(args.explain) is None:
        print(f"error: --explain {args.explain}: no such model profile", file=sys.stderr)
        return 1
    started = time.perf_counter()
    plan = plan_placement(desired.profiles, snapshot, desired.policy)
    plan_ms = (time.perf_counter() - started) * 1000.0
    if args.json:
        document = plan_to_json(plan)
        if args.explain:
            document["explanations"] = {args.explain: document["explanations"][args.explain]}
        document["revision"] = desired.revision
        document["timings"] = {"plan_ms": round(plan_ms, 3)}
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_diff(plan, plan_ms)
        if args.explain:
            print_explanation(next(e for e in plan.explanations if e.model_id == args.explain))
    if args.detailed_exitcode:
        return 2 if has_changes(plan) else 0
    return 0


def has_changes(plan: Plan) -> bool:
    return bool(plan.preemptions) or any(not a.existing for a in plan.assignments)


def print_diff(plan: Plan, plan_ms: float) -> None:
    placing = [a for a in plan.assignments if not a.existing]
    kept = len(plan.assignments) - len(placing)
    print(f"gridctl plan: input {plan.input_digest[:12]}, planned in {plan_ms:.1f} ms")
    print(f"{kept} replica(s) already in place.")
    if placing or plan.preemptions or plan.unsatisfied:
        print()
    for a in placing:
        print(f"  + {a.model_id} on {a.host_id} ({a.runtime}, {a.memory_mb} MB): {a.reason}")
    for p in plan.preemptions:
        print(f"  - {p.model_id} on {p.host_id} (for {p.beneficiary}): {p.reason}")
    for u in plan.unsatisfied:
        where = f" on {u.host_id}" if u.host_id else ""
        missing = f", {u.missing_replicas} missing" if u.missing_replicas else ""
        print(f"  ! {u.model_id}{where}: {u.code.value}{missing}: {u.message}")
    missing_total = sum(1 for _ in plan.unsatisfied)
    print()
    print(
        f"Plan: {len(placing)} to place, {len(plan.preemptions)} to preempt, "
        f"{missing_total} unsatisfied."
    )


def print_explanation(explanation: ModelExplanation) -> None:
    print()
    demand_class = explanation.demand_class.value if explanation.demand_class else "none"
    print(
        f"Explain {explanation.model_id}: target {explanation.target_replicas} "
        f"({explanation.target_reason}); class {demand_class}"
    )
    for c in explanation.candidates:
        mark = "*" if c.chosen else " "
        if c.rejection is not None:
            print(f"  {mark} {c.host_id}: rejected {c.rejection}: {c.detail}")
            continue
        parts = ", ".join(f"{s.name} {s.value:+g}" for s in c.components)
        note = f" [{c.detail}]" if c.detail else ""
        print(f"  {mark} {c.host_id}: score {c.score:g} ({parts}){note}")
