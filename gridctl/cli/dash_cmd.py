"""``gridctl dash``: the live dashboard, or a saved status document for post-mortems."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from gridctl.client import default_controller_url, default_token_file
from gridctl.credentials import read_operator_capability
from gridctl.errors import GridctlError

TOKEN_ENV = "GRIDCTL_TOKEN_FILE"


def operator_token(explicit: str | None) -> str | None:
    """The operator token, or None for a read-only dashboard.

    An explicit ``--token-file`` or ``$GRIDCTL_TOKEN_FILE`` that cannot be read is an
    error; the default file that ``gridctl up`` writes is used only when it exists.
    """
    path = Path(explicit) if explicit else default_token_file()
    if not explicit and not os.environ.get(TOKEN_ENV) and not path.exists():
        return None
    return read_operator_capability(path)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "dash",
        help="terminal dashboard: hosts, admission rows, plan, commands, history",
        description=(
            "Watch the controller: hosts and their residencies, admission rows, the diff the "
            "next tick would apply, pending and withdrawn commands, history and desired-state "
            "revisions. With an operator token (--token-file or $GRIDCTL_TOKEN_FILE) the "
            "m and t keys change the mode and request a tick, each after a confirmation; "
            "without one the dashboard is read-only."
        ),
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--controller",
        metavar="URL",
        help="controller base URL (default: $GRIDCTL_CONTROLLER or http://127.0.0.1:22100)",
    )
    where.add_argument(
        "--from-file",
        metavar="STATUS.json",
        help="show a saved GET /allocator/status document instead (read-only)",
    )
    parser.add_argument(
        "--refresh",
        type=float,
        metavar="SECONDS",
        help="poll interval (default 2; a saved file is read once unless given)",
    )
    parser.add_argument(
        "--token-file",
        metavar="F",
        help=(
            f"operator token file (default: ${TOKEN_ENV}, else the one `gridctl up` writes, "
            "if present); without a token the dashboard is read-only"
        ),
    )
    parser.set_defaults(func=run)


def terminal_problem() -> str | None:
    """Why the dashboard cannot draw here, or None. Without a terminal on both ends
    Textual has no input to wait on and spins a core: refuse before importing it."""
    for name, stream in (("standard input", sys.stdin), ("standard output", sys.stdout)):
        try:
            attached = stream is not None and stream.isatty()
        except (ValueError, OSError):  # closed or detached
            attached = False
        if not attached:
            return (
                f"{name} is not a terminal; the dashboard needs one (for plain text use "
                "`gridctl status`, `gridctl fleet watch` or `gridctl dash --from-file` in a "
                "terminal)"
            )
    return None


def run(args: argparse.Namespace) -> int:
    problem = terminal_problem()
    if problem is not None:
        print(f"gridctl dash: {problem}", file=sys.stderr)
        return 2
    from gridctl.tui.app import build_app

    if args.refresh is not None and args.refresh < 0:
        print("gridctl dash: --refresh must be >= 0", file=sys.stderr)
        return 2
    try:
        token = None if args.from_file else operator_token(args.token_file)
    except GridctlError as exc:
        print(f"gridctl dash: {exc}", file=sys.stderr)
        return 1
    app = build_app(
        controller=args.controller or default_controller_url(),
        from_file=args.from_file,
        token=token,
        refresh_seconds=args.refresh,
    )
    app.run()
    return 0
