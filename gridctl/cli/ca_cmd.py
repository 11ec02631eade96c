"""``gridctl ca init|show|rotate`` and ``gridctl join-token create``: the fleet's trust.

The CA lives in the controller's state directory (``gridctl.fleetca``). A join
token bundle carries the controller URL, the fingerprint of the CA a joining
node must pin, and a one-time bootstrap secret; it is written owner-only and
never printed.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from gridctl.cli.token_cmd import default_controller_state
from gridctl.client import ControllerClient, ControllerError, add_ca_file_argument
from gridctl.credentials import write_secret_file
from gridctl.errors import GridctlError
from gridctl.fleetca import DEFAULT_OVERLAP_SECONDS, FleetCA


def _state(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state",
        type=Path,
        default=None,
        metavar="STATE_DIR",
        help="controller state directory (default: $GRIDCTL_CONTROLLER_STATE or "
        "~/.local/state/gridctl/controller)",
    )


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``15m``, ``1h``, ``7d`` -> seconds."""
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    raw = text.strip().lower()
    factor = units.get(raw[-1:])
    number = raw[:-1] if factor else raw
    try:
        value = float(number) * (factor or 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 90s, 15m, 1h)") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"a duration must be positive: {text!r}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ca = sub.add_parser("ca", help="the fleet's private certificate authority")
    ca_sub = ca.add_subparsers(dest="ca_command", metavar="SUBCOMMAND")
    init = ca_sub.add_parser(
        "init",
        help="create the fleet CA in the controller state directory (if there is none)",
        description="Create an ECDSA P-256 CA (10 years) in STATE_DIR/pki. The controller "
        "also does this on its first start off loopback.",
    )
    _state(init)
    init.set_defaults(func=run_init)
    show = ca_sub.add_parser("show", help="the CA's fingerprint, validity and rotation")
    _state(show)
    show.add_argument("--pem", action="store_true", help="print the trust bundle (PEM) only")
    show.add_argument("--json", action="store_true")
    show.set_defaults(func=run_show)
    rotate = ca_sub.add_parser(
        "rotate",
        help="make a new CA; the old one stays trusted for an overlap window",
        description="The new CA signs the controller's certificate from its next start and is "
        "cross-signed by the old one, so nodes that pin the old CA still connect; joined "
        "nodes notice the new trust bundle at their next heartbeat and renew their "
        "credential and engine certificate. The old CA is dropped when the overlap ends.",
    )
    _state(rotate)
    rotate.add_argument(
        "--overlap",
        type=parse_duration,
        default=DEFAULT_OVERLAP_SECONDS,
        metavar="DURATION",
        help="how long the old CA stays trusted (default 7d)",
    )
    rotate.set_defaults(func=run_rotate)

    def ca_help(_args: argparse.Namespace) -> int:
        ca.print_help()
        return 2

    ca.set_defaults(func=ca_help)

    token = sub.add_parser("join-token", help="bootstrap bundles for joining machines")
    token_sub = token.add_subparsers(dest="join_token_command", metavar="SUBCOMMAND")
    create = token_sub.add_parser(
        "create",
        help="write a one-time join bundle (controller URL, CA fingerprint, bootstrap secret)",
        description="Write FILE (mode 0600) for `gridctl node start --join FILE --advertise "
        "ADDR`. The secret works once, before --ttl runs out, and only for --host-id when "
        "given. Works offline from the controller's state directory, or with --token-file "
        "against a running controller's operator API.",
    )
    _state(create)
    create.add_argument(
        "--controller",
        required=True,
        metavar="URL",
        help="the controller's https:// URL as the joining machine reaches it",
    )
    create.add_argument("--out", type=Path, required=True, metavar="FILE")
    create.add_argument("--ttl", type=parse_duration, default=3600.0, metavar="DURATION")
    create.add_argument("--host-id", default=None, help="the only host id that may use it")
    create.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="operator token: create it through the running controller's API instead",
    )
    add_ca_file_argument(create)
    create.add_argument("--force", action="store_true", help="replace an existing FILE")
    create.set_defaults(func=run_join_token)

    def token_help(_args: argparse.Namespace) -> int:
        token.print_help()
        return 2

    token.set_defaults(func=token_help)


def _ca(args: argparse.Namespace) -> FleetCA:
    return FleetCA(args.state or default_controller_state())


def run_init(args: argparse.Namespace) -> int:
    ca = _ca(args)
    try:
        created = ca.init(now=time.time())
        info = ca.describe(now=time.time())
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    verb = "created" if created else "exists:"
    print(f"fleet CA {verb} {info['fingerprint']} in {ca.dir}")
    return 0


def run_show(args: argparse.Namespace) -> int:
    ca = _ca(args)
    try:
        info = ca.describe(now=time.time())
        bundle = ca.trust_bundle(now=time.time())
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.pem:
        sys.stdout.write(bundle)
        return 0
    if args.json:
        print(json.dumps(info, indent=2, sort_keys=True))
        return 0
    print(f"subject:      {info['subject']}")
    print(f"fingerprint:  {info['fingerprint']}")
    print(f"valid until:  {info['not_after']}")
    previous = info.get("previous")
    if isinstance(previous, dict):
        ends = info.get("overlap_ends_at")
        when = (
            datetime.fromtimestamp(float(ends), tz=UTC).isoformat(timespec="seconds")
            if isinstance(ends, int | float)
            else "?"
        )
        print(f"previous CA:  {previous['fingerprint']} (trusted until {when})")
    print(f"trust bundle: {ca.trust_bundle_path()} ({info['trust_bundle_digest']})")
    return 0


def run_rotate(args: argparse.Namespace) -> int:
    ca = _ca(args)
    try:
        rotation = ca.rotate(now=time.time(), overlap_seconds=args.overlap)
        info = ca.describe(now=time.time())
    except GridctlError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    ends = datetime.fromtimestamp(rotation.overlap_ends_at, tz=UTC).isoformat(timespec="seconds")
    print(f"new fleet CA {info['fingerprint']}; the previous one stays trusted until {ends}")
    print("restart the controller to serve from the new CA; joined nodes renew on their own")
    return 0


def run_join_token(args: argparse.Namespace) -> int:
    out: Path = args.out
    if out.exists() and not args.force:
        print(f"error: {out} exists (use --force to replace it)", file=sys.stderr)
        return 1
    if not args.controller.startswith("https://"):
        print(
            "error: --controller must be https:// (machines join over TLS from the fleet CA)",
            file=sys.stderr,
        )
        return 1
    try:
        if args.token_file is not None:
            body = {"controller": args.controller, "ttl_seconds": args.ttl}
            if args.host_id:
                body["host_id"] = args.host_id
            with ControllerClient(
                args.controller, token_file=args.token_file, ca_file=getattr(args, "ca_file", None)
            ) as client:
                bundle = client.call_admin("POST", "/allocator/join-tokens", json=body)
        else:
            from gridctl.controller.joining import FleetIdentity

            identity = FleetIdentity(args.state or default_controller_state(), clock=time.time)
            bundle = identity.join_bundle(args.controller, ttl=args.ttl, host_id=args.host_id)
            identity.membership.close()
    except (ControllerError, GridctlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return int(getattr(exc, "exit_code", 1))
    write_secret_file(out, json.dumps(bundle, indent=2, sort_keys=True) + "\n")
    expires = datetime.fromtimestamp(float(bundle["expires_at"]), tz=UTC).isoformat(
        timespec="seconds"
    )
    target = f" for host {args.host_id}" if args.host_id else ""
    print(f"wrote join bundle{target} to {out} (mode 0600, one use, expires {expires})")
    print(f"CA fingerprint {bundle['ca_sha256']}")
    return 0
