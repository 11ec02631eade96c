"""``gridctl plan``: what the controller would do with DIR's desired state, as a diff.

Against a controller URL this is a server-side dry run (``POST
/allocator/dry-run``, operator token): the controller runs its own tick function
— tombstones, pending work, withdrawn batches, learned timings, portfolio
demand, its mode — on DIR's desired state without persisting or issuing
anything. Against a SNAPSHOT.json the same function runs locally with an empty
memory (no previous revision, so no tombstones). The diff shows ``+`` place,
``-`` destroy (drain/unload, with why: ``profile removed``), ``-/+`` replace
(a preemption), ``!`` unsatisfied, then every action with its state or the rule
holding it. The plan folds each model's hosts into groups turned down (or left eligible)
alike, with a count and an example host each; ``--explain MODEL`` (repeatable)
shows every host considered for MODEL, ``--explain-all`` for every model.
``--out PLAN.json`` saves the plan with its inputs for ``gridctl apply``; the
header's ``inputs`` digest is the one the file and ``gridctl apply`` name.
``--detailed-exitcode``: 0 no changes, 2 changes (any place, destroy, replace,
held or pending action), 1 error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from gridctl.cli.plan_words import explanation_lines, print_diff, print_explanation
from gridctl.config import load_directory
from gridctl.config.loading import yaml_files
from gridctl.config.snapshots import load_snapshot
from gridctl.domain import DesiredState
from gridctl.errors import ConfigError, WireError
from gridctl.tick.previewing import offline_document

# A dry run against a snapshot file imports only what it runs: the HTTP client (httpx),
# the controller's saved-plan module and the observation replay are imported where a
# URL, --out or --observations needs them (together about 0.5 s of a fresh process's
# start on this machine, measured with ``python -X importtime``), and the JSON writer
# (orjson, about 5 ms) where --json or --out writes JSON.

DEFAULT_DIRECTORY = "policies"


def add_observation_args(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--against",
        required=required,
        metavar="URL|SNAPSHOT",
        help="a controller URL (a server-side dry run of its own tick; operator token "
        "needed) or a fleet snapshot JSON file (the same decision with an empty memory); "
        "default: the current context's controller",
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
            "Load the desired state in DIR and show exactly what the controller would do "
            "with it: against a URL the controller runs its own tick on DIR without "
            "persisting or issuing anything; against a SNAPSHOT file (per "
            "schemas/wire/fleet-snapshot.schema.json; its 'now' is the planning instant) the "
            "same function runs here with an empty memory. '+' place a replica, '-' destroy "
            "(drain/unload, with why), '-/+' replace (a preemption), '!' an unsatisfied "
            "constraint, then every action: executable, proposed, or held with its rule."
        ),
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=DEFAULT_DIRECTORY,
        metavar="DIR",
        help=f"desired-state directory or YAML file (default: {DEFAULT_DIRECTORY})",
    )
    add_observation_args(parser, required=False)
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
        action="append",
        default=[],
        metavar="MODEL",
        help="show every host considered for MODEL: rejection or named score components "
        "(repeatable; without it the plan folds each model's hosts into groups alike)",
    )
    parser.add_argument(
        "--explain-all",
        action="store_true",
        help="every host's row for every model (large: hosts x models rows)",
    )
    parser.add_argument(
        "--detailed-exitcode",
        action="store_true",
        help="exit 0 when nothing changes, 2 for any place, destroy, replacement, held or "
        "pending action, 1 on error",
    )
    parser.set_defaults(func=run)


def is_url(value: str) -> bool:
    return value.startswith(("http://", "https://"))


def load_desired(directory: str) -> DesiredState | None:
    try:
        return load_directory(directory)
    except ConfigError as exc:
        for issue in exc.issues:
            print(issue.render(), file=sys.stderr)
        return None


def desired_files(directory: str) -> dict[str, str]:
    """DIR's YAML texts by relative path: what a dry run and a saved plan carry."""
    root = Path(directory)
    base = root if root.is_dir() else root.parent
    return {
        file.relative_to(base).as_posix(): file.read_text(encoding="utf-8")
        for file in yaml_files(root)
    }


def candidate_body(desired: DesiredState, directory: str) -> dict[str, Any]:
    return {
        "desired": {
            "revision": desired.revision,
            "dirty": desired.dirty,
            "files": desired_files(directory),
        }
    }


def explain_params(explain: Sequence[str] = (), explain_all: bool = False) -> dict[str, Any]:
    """The dry run's and the status's query for per-host rows (``--explain``)."""
    if explain_all:
        return {"explain_all": "true"}
    return {"explain": list(explain)} if explain else {}


def remote_dry_run(
    url: str,
    token_file: Path | None,
    desired: DesiredState,
    directory: str,
    explain: Sequence[str] = (),
    explain_all: bool = False,
) -> dict[str, Any]:
    """The controller's own decision for DIR; raises ``ControllerError``."""
    from gridctl.client import ControllerClient

    with ControllerClient(url, token_file=token_file) as client:
        document: dict[str, Any] = client.call_admin(
            "POST",
            "/allocator/dry-run",
            json=candidate_body(desired, directory),
            params=explain_params(explain, explain_all),
        )
    return document


def offline_dry_run(
    desired: DesiredState,
    path: str,
    observations: str | None,
    explain: Sequence[str] = (),
    explain_all: bool = False,
) -> tuple[dict[str, Any], Any]:
    """The same decision on a snapshot file (empty memory); raises ``WireError``/``OSError``."""
    snapshot = load_snapshot(path)
    portfolio = None
    if observations:  # demand learned from the observations replaces the snapshot's
        from gridctl.cli.forecast_cmd import observation_portfolio

        portfolio = observation_portfolio(desired, snapshot, observations)
        snapshot = replace(snapshot, demand=portfolio.demand)
    started = time.perf_counter()
    document = offline_document(desired, snapshot, explain, explain_all=explain_all)
    document["timings"] = {"plan_ms": round((time.perf_counter() - started) * 1000.0, 3)}
    return document, portfolio


def saved_plan(document: dict[str, Any], directory: str, against: str) -> dict[str, Any]:
    """The ``--out`` document (``gridctl apply`` submits it unchanged)."""
    from gridctl.controller.applying import PLAN_FORMAT

    return {
        "format": PLAN_FORMAT,
        "created_at": document["now"],
        "against": against,
        "desired": {
            "directory": str(Path(directory).resolve()),
            "revision": document["revision"],
            "dirty": document["dirty"],
            "files": desired_files(directory),
        },
        "mode": document["mode"],
        # a snapshot file is not a controller's live inputs: such a plan cannot be applied
        "inputs": document["inputs"] if is_url(against) else None,
        "changes": document["changes"],
        "plan": document["plan"],
        "actions": document["actions"],
        "deferred": document["deferred"],
        "destroys": document["destroys"],
        "replacements": document["replacements"],
    }


def run(args: argparse.Namespace) -> int:
    if args.against is None:  # the fleet the context (or $GRIDCTL_CONTROLLER) names
        args.against = default_controller_url()
    desired = load_desired(args.directory)
    if desired is None:
        return 1
    explain = sorted(set(args.explain))
    unknown = [model for model in explain if desired.profile(model) is None]
    if unknown:
        print(f"error: --explain {unknown[0]}: no such model profile", file=sys.stderr)
        return 1
    if args.explain_all:
        explain = sorted(p.name for p in desired.profiles)
    portfolio = None
    try:
        if is_url(args.against):
            if args.observations:
                print(
                    "error: --observations replays against a snapshot file; a controller "
                    "plans with its own telemetry",
                    file=sys.stderr,
                )
                return 1
            answer = _controller_document(args, desired, explain)
            if isinstance(answer, int):
                return answer
            document = answer
        else:
            document, portfolio = offline_dry_run(
                desired, args.against, args.observations, explain, args.explain_all
            )
    except WireError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        where = exc.filename or args.observations or args.against
        print(f"error: {where}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    explained = document["plan"].setdefault("explanations", {})
    for model in explain:  # a profile the plan holds no rows for is shown as such
        explained.setdefault(model, None)
    if args.out is not None:
        from gridctl.jsontext import encode_json

        plan = saved_plan(document, args.directory, args.against)
        args.out.write_bytes(encode_json(plan, indent=True) + b"\n")
    if args.json:
        from gridctl.jsontext import encode_json

        shown = {**document["plan"], **{k: v for k, v in document.items() if k != "plan"}}
        if portfolio is not None:
            from gridctl.planner.portfolio import portfolio_to_json

            shown["portfolio"] = portfolio_to_json(portfolio)
        print(encode_json(shown, indent=True, sort_keys=True).decode())
    else:
        print_diff(document)
        if portfolio is not None:
            from gridctl.cli.forecast_cmd import print_portfolio

            print_portfolio(portfolio)
        for model in explain:
            print_explanation(model, explained.get(model))
        if args.out is not None:
            print_apply_hint(args.out, args.against, document)
    if args.detailed_exitcode:
        return 2 if document["changes"] else 0
    return 0


def default_controller_url() -> str:
    from gridctl.client import default_controller_url as configured

    return configured()


def _controller_document(
    args: argparse.Namespace, desired: DesiredState, explain: Sequence[str]
) -> dict[str, Any] | int:
    """The controller's dry run with its round trip timed, or the exit code of its error
    (printed; 2 when unreachable)."""
    from gridctl.client import ControllerError

    started = time.perf_counter()
    try:
        document = remote_dry_run(
            args.against, args.token_file, desired, args.directory, explain, args.explain_all
        )
    except ControllerError as exc:  # names the controller already
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    document["timings"] = {"plan_ms": round((time.perf_counter() - started) * 1000, 3)}
    return document


def print_apply_hint(out: Path, against: str, document: dict[str, Any]) -> None:
    """How to apply the saved plan, said only where `gridctl apply` will take it."""
    print(f"\nSaved the plan to {out}.")
    if not is_url(against):
        print("It was made against a snapshot file: plan --against the controller URL to apply.")
        return
    flag = "" if against.rstrip("/") == default_controller_url() else f" --controller {against}"
    source = document.get("source")
    if source in (None, "api"):
        print(f"Apply exactly it with:\n  gridctl apply {out}{flag}")
        return
    print(
        f"This controller follows its {source} source: `gridctl apply {out}{flag}` approves "
        "these actions while its revision in force would take exactly them (commit a change "
        "first, let the controller sync, then plan and apply)."
    )


__all__ = [
    "candidate_body",
    "desired_files",
    "explain_params",
    "explanation_lines",
    "is_url",
    "load_desired",
    "offline_dry_run",
    "print_diff",
    "print_explanation",
    "register",
    "remote_dry_run",
    "run",
    "saved_plan",
]
