"""``gridctl apply``: execute exactly a saved plan, or refuse; or dry-run a directory.

``gridctl apply PLAN.json`` posts the plan made by ``gridctl plan --out`` to
``POST /allocator/apply``. The controller re-plans on its current inputs: if
the actions it would take differ from the plan's, it answers 409 ``stale plan:``
naming each added, removed or changed action and the inputs that moved, and
this command prints that and exits 1; drift that changes no action is printed
as a note. Otherwise, in recommend mode exactly the plan's action ids become
executable (through every safety gate; nothing else is issued) until they have
run, been superseded or been withdrawn with ``gridctl apply --cancel``; in
automatic mode the plan's revision is pinned as the one in force.

``gridctl apply DIR --dry-run`` asks the controller what its next tick would do
with DIR (its mode: the operator override, else DIR's) and executes nothing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gridctl.cli import plan_cmd
from gridctl.client import (
    ControllerClient,
    ControllerError,
    add_ca_file_argument,
    default_controller_url,
)
from gridctl.controller.applying import PLAN_FORMAT
from gridctl.controller.staleness import STALE
from gridctl.domain import Mode
from gridctl.errors import WireError

MAX_PLAN_BYTES = 4 * 1024 * 1024


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "apply",
        help="execute exactly a saved plan (refused when stale), or --dry-run a directory",
        description="Submit PLAN.json (from `gridctl plan --out`) to the controller. It "
        "re-plans on its current inputs (revision, policy, mode, hosts, residencies, demand, "
        "pending work, history, memory, learned timings, telemetry) and applies the plan "
        "while it would take exactly the plan's actions: inputs that drifted without "
        "changing an action are reported as notes; otherwise it refuses with 'stale plan:', "
        "names each changed action and what moved, and you plan again. In recommend mode "
        "exactly the plan's action ids become executable until they have run (--cancel "
        "withdraws them). With DIR and --dry-run, print what the controller's next tick "
        "would do with DIR.",
    )
    parser.add_argument(
        "target",
        nargs="?",
        metavar="PLAN.json|DIR",
        help="saved plan, or DIR with --dry-run (none with --cancel)",
    )
    parser.add_argument(
        "--controller",
        metavar="URL",
        help="controller base URL (default: the plan's, else $GRIDCTL_CONTROLLER or "
        "http://127.0.0.1:22100)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="operator token file (default $GRIDCTL_TOKEN_FILE or the one `gridctl up` wrote)",
    )
    add_ca_file_argument(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="with DIR: print the actions, change nothing"
    )
    parser.add_argument(
        "--cancel",
        action="store_true",
        help="withdraw the plan applied in recommend mode: its actions not yet delivered "
        "become proposals again",
    )
    parser.add_argument("--json", action="store_true", help="print the controller's answer")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.cancel:
        if args.target is not None or args.dry_run:
            print("error: --cancel takes no PLAN.json|DIR and no --dry-run", file=sys.stderr)
            return 1
        return cancel(args)
    if args.target is None:
        print("error: PLAN.json|DIR is required (or --cancel)", file=sys.stderr)
        return 1
    target = Path(args.target)
    if args.dry_run:
        return dry_run(args)
    if target.is_dir():
        print(
            "error: a directory needs --dry-run; save a plan with `gridctl plan --out`",
            file=sys.stderr,
        )
        return 1
    try:
        saved = read_plan(target)
    except WireError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    against = saved.get("against")
    url = args.controller or (
        against if isinstance(against, str) and plan_cmd.is_url(against) else None
    )
    with ControllerClient(
        url or default_controller_url(),
        token_file=args.token_file,
        ca_file=getattr(args, "ca_file", None),
    ) as client:
        try:
            answer = client.call_admin("POST", "/allocator/apply", json=saved)
        except ControllerError as exc:
            return refused(exc)
    if args.json:
        print(json.dumps(answer, indent=2))
        return 0
    print_applied(answer, saved)
    return 0


def cancel(args: argparse.Namespace) -> int:
    """Withdraw the applied plan's approval (``POST /allocator/apply {"cancel": true}``)."""
    with ControllerClient(
        args.controller or default_controller_url(),
        token_file=args.token_file,
        ca_file=getattr(args, "ca_file", None),
    ) as client:
        try:
            answer = client.call_admin("POST", "/allocator/apply", json={"cancel": True})
        except ControllerError as exc:
            return refused(exc)
    if args.json:
        print(json.dumps(answer, indent=2))
    else:
        print(answer.get("message") or "cancelled")
    return 0


def read_plan(path: Path) -> dict[str, Any]:
    try:
        if path.stat().st_size > MAX_PLAN_BYTES:
            raise WireError(f"{path}: larger than {MAX_PLAN_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WireError(f"{path}: cannot read the plan: {exc.strerror}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"{path}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
        raise WireError(f"{path}: not a saved plan (make one with `gridctl plan --out`)")
    return data


def refused(exc: ControllerError) -> int:
    """Print a refusal; a stale plan's message already names each changed action and what
    moved, one a line. Exit 2 when the controller could not be reached, else 1."""
    text = str(exc)
    start = text.find(STALE) if exc.status == 409 else -1
    print(f"error: {text[start:] if start >= 0 else text}", file=sys.stderr)
    return exc.exit_code


def print_applied(answer: dict[str, Any], saved: dict[str, Any]) -> None:
    mode = answer.get("effective_mode")
    print(
        f"applied revision {str(answer.get('revision'))[:12]} "
        f"(inputs {str(answer.get('inputs_digest'))[:12]}); controller mode {mode}"
    )
    for note in answer.get("notes") or []:
        print(f"  note: {note}")
    if answer.get("refused_automatic"):
        print(f"  {answer['refused_automatic']}")
    for row in [*answer.get("actions", []), *answer.get("deferred", [])]:
        state = "executable" if row["executable"] else f"held: {row.get('blocked') or '-'}"
        print(f"  {row['kind']:<6} {row['model_id']} on {row['host_id']} [{state}]")
    if answer.get("approved_action_ids"):
        print(
            f"  recommend mode: {len(answer['approved_action_ids'])} action(s) of the plan made "
            "executable, nothing else"
        )
    if answer.get("issued_not_in_plan"):
        print(f"  issued outside the plan: {', '.join(answer['issued_not_in_plan'])}")
    if answer.get("not_in_plan"):
        print(f"  {len(answer['not_in_plan'])} other proposal(s) not in the plan stay proposals")
    if answer.get("planned_but_absent"):
        print(
            f"  {len(answer['planned_but_absent'])} planned action(s) were not proposed "
            "(already done, or superseded)"
        )
    if mode == Mode.OBSERVE.value and (saved.get("actions") or saved.get("deferred")):
        print(f"  mode is {mode}: drift is recorded, nothing executes")


def dry_run(args: argparse.Namespace) -> int:
    desired = plan_cmd.load_desired(args.target)
    if desired is None:
        return 1
    url = args.controller or default_controller_url()
    try:
        document = plan_cmd.remote_dry_run(url, args.token_file, desired, args.target)
    except ControllerError as exc:
        return refused(exc)
    except WireError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(document, indent=2, sort_keys=True))
        return 0
    print(f"dry run on {url}: its next tick holding {desired.revision[:12]} would:")
    why = "operator override" if document.get("mode_override") else "DIR's ControllerPolicy"
    print(f"mode {document['mode']} ({why})")
    plan_cmd.print_diff(document)
    if not (document["actions"] or document["deferred"]):
        print("no actions")
    return 0
