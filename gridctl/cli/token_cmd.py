"""``gridctl token write``: provision a host-scoped node credential into an owner-only file.

The secret goes only into FILE (mode 0600); the terminal shows the host id, the
file and the expiry, never the token, so it stays out of scrollback and logs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from gridctl.credentials import (
    DEFAULT_TTL_SECONDS,
    OPERATOR_CAPABILITY_FILE,
    SIGNING_KEY_FILE,
    CredentialError,
    credential_claims,
    issue_node_credential,
    key_id,
    load_or_create_signing_key,
    new_host_id,
    rotate_operator_capability,
    rotate_signing_key,
    write_secret_file,
)
from gridctl.errors import GridctlError
from gridctl.membership import DATABASE as MEMBERSHIP_DATABASE
from gridctl.membership import Membership
from gridctl.printable import one_line


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

    revoke = token_sub.add_parser(
        "revoke",
        help="revoke every credential of a host (refused from its next request on)",
        description="Mark every node credential issued for HOST revoked. The running "
        "controller refuses them at the next request (it re-reads the membership database "
        "when it changes); the host must join again with a new bundle.",
    )
    revoke.add_argument("host_id", metavar="HOST")
    _state_flag(revoke)
    revoke.set_defaults(func=run_revoke)

    rotate_op = token_sub.add_parser(
        "rotate-operator",
        help="replace the operator token (the running controller picks it up at once)",
    )
    _state_flag(rotate_op)
    rotate_op.set_defaults(func=run_rotate_operator)

    rotate_key = token_sub.add_parser(
        "rotate-signing-key",
        help="new node-credential signing key; credentials signed by the old one keep working",
        description="New credentials (joins and renewals) are signed with the new key; the "
        "previous key is kept to verify what it signed until those credentials expire or "
        "renew, so no node drops out.",
    )
    _state_flag(rotate_key)
    rotate_key.set_defaults(func=run_rotate_signing_key)

    router = token_sub.add_parser("router", help="router API keys for /v1 clients")
    router_sub = router.add_subparsers(dest="router_command", metavar="SUBCOMMAND")
    create = router_sub.add_parser(
        "create",
        help="make a router API key NAME; written to --out (0600) or printed once",
        description="A controller listening off loopback requires a router key on /v1/* "
        "(`Authorization: Bearer KEY`, what OpenAI clients send as api_key). Demand is "
        "attributed to the key's id, never to the key.",
    )
    create.add_argument("name", metavar="NAME")
    create.add_argument("--out", type=Path, default=None, metavar="FILE")
    _state_flag(create)
    create.set_defaults(func=run_router_create)
    router_revoke = router_sub.add_parser("revoke", help="revoke the router key NAME")
    router_revoke.add_argument("name", metavar="NAME")
    _state_flag(router_revoke)
    router_revoke.set_defaults(func=run_router_revoke)
    router_ls = router_sub.add_parser("ls", help="list router keys (ids and names only)")
    _state_flag(router_ls)
    router_ls.add_argument("--json", action="store_true")
    router_ls.set_defaults(func=run_router_ls)

    def router_help(_args: argparse.Namespace) -> int:
        router.print_help()
        return 2

    router.set_defaults(func=router_help)

    def show_help(_args: argparse.Namespace) -> int:
        token.print_help()
        return 2

    token.set_defaults(func=show_help)


def _state_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        type=Path,
        default=None,
        metavar="STATE_DIR",
        help="controller state directory "
        "(default: $GRIDCTL_CONTROLLER_STATE or ~/.local/state/gridctl/controller)",
    )


def _membership(args: argparse.Namespace) -> Membership:
    state: Path = args.state or default_controller_state()
    if not (state / MEMBERSHIP_DATABASE).exists() and not (state / SIGNING_KEY_FILE).exists():
        raise CredentialError(f"{state} is not a controller state directory")
    return Membership(state)


def run_revoke(args: argparse.Namespace) -> int:
    try:
        membership = _membership(args)
        count = membership.revoke_host(args.host_id, now=time.time())
        membership.close()
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(
        f"revoked host {args.host_id}: {count} recorded credential(s), and any older one; "
        "refused from its next request"
    )
    return 0


def run_rotate_operator(args: argparse.Namespace) -> int:
    state: Path = args.state or default_controller_state()
    path = state / OPERATOR_CAPABILITY_FILE
    if not path.exists():
        print(f"error: no operator token at {path}", file=sys.stderr)
        return 1
    rotate_operator_capability(path)
    print(f"rotated the operator token in {path}; the old one is refused from now on")
    return 0


def run_rotate_signing_key(args: argparse.Namespace) -> int:
    state: Path = args.state or default_controller_state()
    try:
        key = rotate_signing_key(state)
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"new node-credential signing key {key_id(key)}; the previous key still verifies")
    return 0


def run_router_create(args: argparse.Namespace) -> int:
    try:
        membership = _membership(args)
        key_id_, key = membership.create_router_key(args.name, now=time.time())
        membership.close()
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.out is not None:
        write_secret_file(args.out, key + "\n")
        print(f"router key {args.name} ({key_id_}) written to {args.out} (mode 0600)")
    else:
        print(f"router key {args.name} ({key_id_}); shown once, store it now:")
        print(key)
    return 0


def run_router_revoke(args: argparse.Namespace) -> int:
    try:
        membership = _membership(args)
        done = membership.revoke_router_key(args.name, now=time.time())
        membership.close()
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not done:
        print(f"error: no active router key named {args.name!r}", file=sys.stderr)
        return 1
    print(f"revoked router key {args.name}")
    return 0


def run_router_ls(args: argparse.Namespace) -> int:
    try:
        membership = _membership(args)
        rows = membership.router_key_rows()
        membership.close()
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        state = "revoked" if row["revoked_at"] else "active"
        print(f"{row['id']:<14} {one_line(row['name']):<24} {state}")  # names predate the rule
    return 0


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
    if (state_dir / MEMBERSHIP_DATABASE).exists():  # so `token revoke` can name it
        membership = Membership(state_dir)
        membership.record_credential(credential_claims(token, key, now=now))
        membership.close()
    expires = datetime.fromtimestamp(now + args.ttl_seconds, tz=UTC).isoformat(timespec="seconds")
    if args.host_id is None:
        print(f"generated host id: {host_id}")
    print(f"wrote node credential for host {host_id} to {path} (mode 0600, expires {expires})")
    return 0
