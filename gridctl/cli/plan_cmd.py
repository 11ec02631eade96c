"""``gridctl plan``: plan a desired-state directory against a fleet snapshot or a live controller.

Loads DIR (all-or-nothing), reads the observation — a snapshot file, or
``GET URL/allocator/snapshot`` with the operator token — runs the pure planner
and the reconciler once (for the mode DIR's ControllerPolicy declares) and
prints a Terraform-like diff — ``+`` place, ``-`` preempt, ``!`` unsatisfied —
then the actions, or all of it as JSON. ``--explain MODEL`` shows every host
considered for MODEL. ``--out PLAN.json`` saves the plan with the digest of
its inputs for ``gridctl apply``. ``--detailed-exitcode``: 0 no changes,
2 changes, 1 error.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gridctl.cli.forecast_cmd import observation_portfolio, print_portfolio
from gridctl.client import ControllerClient, ControllerError
from gridctl.config import load_directory
from gridctl.config.loading import yaml_files
from gridctl.config.snapshots import load_snapshot, snapshot_from_json
from gridctl.controller.applying import PLAN_FORMAT
from gridctl.domain import DesiredState, FleetSnapshot, Mode, ModelExplanation, Plan
from gridctl.errors import ConfigError, WireError
from gridctl.planner import plan_placement, plan_to_json
from gridctl.planner.portfolio import portfolio_to_json
from gridctl.reconcile import (
    ReconcileResult,
    action_to_json,
    history_from_json,
    pending_from_json,
    reconcile,
)

DEFAULT_DIRECTORY = "policies"


@dataclass(frozen=True)
class Observation:
    """What a plan is made against: the snapshot and, from a live controller, its extras."""

    snapshot: FleetSnapshot
    source: str
    inputs: dict[str, Any] | None = None
    controller: dict[str, Any] | None = None


@dataclass(frozen=True)
class DryRun:
    desired: DesiredState
    observation: Observation
    mode: Mode
    plan: Plan
    result: ReconcileResult
    plan_ms: float

    @property
    def changes(self) -> bool:
        pending = self.observation.snapshot.extras.get("pending_actions") or []
        return has_changes(self.plan) or bool(
            self.result.actions or self.result.deferred or pending
        )


def add_observation_args(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--against",
        required=required,
        metavar="URL|SNAPSHOT",
        help="a controller URL (its live observation, operator token needed) or a fleet "
        "snapshot JSON file",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="operator token file for a URL (default $GRIDCTL_TOKEN_FILE or the one "
        "`gridctl up` wrote)",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "plan",
        help="plan DIR's desired state against a live controller or a snapshot (a diff)",
        description=(
            "Load the desired state in DIR, read the fleet observation (a controller URL's "
            "live snapshot, or a frozen SNAPSHOT file per "
            "schemas/wire/fleet-snapshot.schema.json; its 'now' is the planning instant) and "
            "print what would happen: '+' place a replica, '-' preempt a residency, "
            "'!' an unsatisfied constraint, then the lifecycle actions for DIR's mode."
        ),
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=DEFAULT_DIRECTORY,
        metavar="DIR",
        help=f"desired-state directory or YAML file (default: {DEFAULT_DIRECTORY})",
    )
    add_observation_args(parser, required=True)
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")
    parser.add_argument(  # demand learned from request observations, with a joint portfolio
        "--observations",
        metavar="FILE.jsonl",
        help="replace the snapshot's demand with demand learned from these request "
        "observations (schemas/wire/observation.schema.json); also print admission rows and "
        "the joint portfolio",
    )
    parser.add_argument(
        "--out",
        type=Path,
        metavar="PLAN.json",
        help="save the plan with the digest of its inputs, for `gridctl apply`",
    )
    parser.add_argument(
        "--explain",
        metavar="MODEL",
        help="show every host considered for MODEL: rejection or named score components",
    )
    parser.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 0 when nothing changes, 2 when the plan places, preempts or acts, 1 on error",
    )
    parser.set_defaults(func=run)


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def read_observation(against: str, token_file: Path | None) -> Observation:
    """The snapshot to plan against; raises ``WireError`` or ``ControllerError``."""
    if not is_url(against):
        return Observation(load_snapshot(against), against)
    with ControllerClient(against, token_file=token_file) as client:
        document = client.snapshot()
    try:
        snapshot = snapshot_from_json(document)
    except WireError as exc:
        raise WireError(f"{against}: the controller's snapshot: {exc.args[0]}") from exc
    return Observation(snapshot, against, document.get("inputs"), document.get("controller"))


def load_desired(directory: str) -> DesiredState | None:
    try:
        return load_directory(directory)
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue.render(), file=sys.stderr)
        return None


def dry_run(desired: DesiredState, observation: Observation, mode: Mode) -> DryRun:
    """Plan and reconcile once, exactly as a controller holding DIR would this instant."""
    snapshot = observation.snapshot
    pending = pending_from_json(snapshot.extras.get("pending_actions") or [])  # type: ignore[arg-type]
    history = history_from_json(snapshot.extras.get("history") or [])  # type: ignore[arg-type]
    started = time.perf_counter()
    plan = plan_placement(desired.profiles, snapshot, desired.policy)
    plan_ms = (time.perf_counter() - started) * 1000.0
    profiles = {p.name: p for p in desired.profiles}
    result = reconcile(
        plan, snapshot, profiles, desired.policy, mode, pending, history, snapshot.now
    )
    return DryRun(desired, observation, mode, plan, result, plan_ms)


def desired_files(directory: str) -> dict[str, str]:
    """DIR's YAML texts by relative path: what a saved plan carries to the controller."""
    root = Path(directory)
    base = root if root.is_dir() else root.parent
    return {
        file.relative_to(base).as_posix(): file.read_text(encoding="utf-8")
        for file in yaml_files(root)
    }


def saved_plan(run: DryRun, directory: str) -> dict[str, Any]:
    """The ``--out`` document (``gridctl apply`` submits it unchanged)."""
    return {
        "format": PLAN_FORMAT,
        "created_at": run.observation.snapshot.now,
        "against": run.observation.source,
        "desired": {
            "directory": str(Path(directory).resolve()),
            "revision": run.desired.revision,
            "dirty": run.desired.dirty,
            "files": desired_files(directory),
        },
        "mode": run.mode.value,
        "inputs": run.observation.inputs,
        "changes": run.changes,
        "plan": plan_to_json(run.plan),
        "actions": [action_to_json(a) for a in run.result.actions],
        "deferred": [action_to_json(a) for a in run.result.deferred],
    }


def run(args: argparse.Namespace) -> int:
    desired = load_desired(args.directory)
    if desired is None:
        return 1
    try:
        observation = read_observation(args.against, args.token_file)
    except (WireError, ControllerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.explain and desired.profile(args.explain) is None:
        print(f"error: --explain {args.explain}: no such model profile", file=sys.stderr)
        return 1
    portfolio = None
    if args.observations:  # portfolio demand replaces the snapshot's demand
        try:
            portfolio = observation_portfolio(desired, observation.snapshot, args.observations)
        except (OSError, WireError) as exc:
            print(f"error: {args.observations}: {exc}", file=sys.stderr)
            return 1
        snapshot = replace(observation.snapshot, demand=portfolio.demand)
        observation = replace(observation, snapshot=snapshot)
    try:
        result = dry_run(desired, observation, desired.policy.mode)
    except WireError as exc:
        print(f"error: {args.against}: {exc}", file=sys.stderr)
        return 1
    plan = result.plan
    if args.out is not None:
        args.out.write_text(json.dumps(saved_plan(result, args.directory), indent=2) + "\n")
    if args.json:
        document = plan_to_json(plan)
        if args.explain:
            document["explanations"] = {args.explain: document["explanations"][args.explain]}
        document["revision"] = desired.revision
        document["timings"] = {"plan_ms": round(result.plan_ms, 3)}
        document["mode"] = result.mode.value
        document["actions"] = [action_to_json(a) for a in result.result.actions]
        document["deferred"] = [action_to_json(a) for a in result.result.deferred]
        if portfolio is not None:
            document["portfolio"] = portfolio_to_json(portfolio)
        print(json.dumps(document, indent=2, sort_keys=True))
    else:
        print_diff(plan, result.plan_ms, result)
        if portfolio is not None:
            print_portfolio(portfolio)
        if args.explain:
            print_explanation(next(e for e in plan.explanations if e.model_id == args.explain))
        if args.out is not None:
            where = observation.source if observation.inputs else "URL"
            print(f"\nSaved the plan to {args.out}. Apply exactly it with:")
            print(f"  gridctl apply {args.out} --controller {where}")
    if args.detailed_exitcode:
        return 2 if result.changes else 0
    return 0


def print_actions(run: DryRun) -> None:
    rows = [*run.result.actions, *run.result.deferred]
    if not rows:
        return
    executable = sum(1 for a in run.result.actions if a.executable)
    print()
    print(
        f"Actions (mode {run.mode.value}): {executable} executable, {len(rows) - executable} held"
    )
    for a in rows:
        state = "executable" if a.executable else f"held: {a.blocked or 'not executable'}"
        after = f" after {', '.join(d[:8] for d in a.depends_on)}" if a.depends_on else ""
        print(f"  {a.kind.value:<6} {a.model_id} on {a.host_id} [{state}]{after}: {a.reason}")


def has_changes(plan: Plan) -> bool:
    return bool(plan.preemptions) or any(not a.existing for a in plan.assignments)


def print_diff(plan: Plan, plan_ms: float, run: DryRun | None = None) -> None:
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
    if run is not None:
        print_actions(run)
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
