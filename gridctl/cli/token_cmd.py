"""``gridctl token write``: provision a host-scoped node credential into an owner-only file.

The secret goes only into FILE (mode 0600); the terminal shows the host id, the
file and the expiry, never the token, so it stays out of scrollback and logs.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from gridctl.credentials import (
    DEFAULT_TTL_SECONDS,
    CredentialError,
    issue_node_credential,
    load_or_create_signing_key,
    new_host_id,
    write_secret_file,
)


def default_controller_state() -> Path:
    """Where the controller keeps its state unless told otherwise."""
    override = os.environ.get("GRIDCTL_CONTROLLER_STATE")
    if override:
        return Path(override)
    return Path.home() / ".local" / "state" / "gridctl" / "controller"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    token = sub.add_parser("token", help="node credentials")
    token_sub = token.add_subparsers(dest="token_command", metavar="SUBCOMMAND")
    write = token_sub.add_parser(
        "write",
        help="write an expiring credential bound to one host id into an owner-only file",
        description=(
            "Sign an expiring node credential with the controller's key (kept in the "
            "controller state directory) and write it to FILE with mode 0600. If --host-id "
            "is omitted a new id is generated and printed once. Copy FILE to the node over a "
            "secure channel and start it with `gridctl node start --token-file FILE`."
        ),
    )
    write.add_argument("file", metavar="FILE", type=Path)
    write.add_argument("--host-id", default=None, help="stable id of the host (default: new)")
    write.add_argument(
        "--state",
        type=Path,
        default=None,
        help="controller state directory holding the signing key "
        "(default: $GRIDCTL_CONTROLLER_STATE or ~/.local/state/gridctl/controller)",
    )
    write.add_argument(
        "--ttl-seconds",
        type=float,
        default=float(DEFAULT_TTL_SECONDS),
        help="lifetime of the credential (default: 30 days)",
    )
    write.add_argument("--force", action="store_true", help="replace an existing FILE")
    write.set_defaults(func=run_write)

    def show_help(_args: argparse.Namespace) -> int:
        token.print_help()
        return 2

    token.set_defaults(func=show_help)


def run_write(args: argparse.Namespace) -> int:
    path: Path = args.file
    if path.exists() and not args.force:
        print(f"error: {path} exists (use --force to replace it)", file=sys.stderr)
        return 1
    state_dir: Path = args.state or default_controller_state()
    host_id = args.host_id or new_host_id()
    now = time.time()
    try:
        key = load_or_create_signing_key(state_dir)
        token = issue_node_credential(key, host_id, now=now, ttl_seconds=args.ttl_seconds)
    except CredentialError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    write_secret_file(path, token + "\n")
    expires = datetime.fromtimestamp(now + args.ttl_seconds, tz=UTC).isoformat(timespec="seconds")
    if args.host_id is None:
        print(f"generated host id: {host_id}")
    print(f"wrote node credential for host {host_id} to {path} (mode 0600, expires {expires})")
    return 0
