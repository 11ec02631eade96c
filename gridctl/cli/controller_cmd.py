"""``gridctl controller``: the reconciler daemon and the router, in the foreground."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from gridctl.client import DEFAULT_CONTROLLER


def parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"--listen must be HOST:PORT, not {value!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "controller",
        help="run the reconciler daemon and the OpenAI-compatible router",
        description=(
            "Watch DIR for desired state (all-or-nothing reloads), accept node registrations "
            "and heartbeats, plan and reconcile on every change and periodically, deliver "
            "fenced commands, and serve /v1 requests to ready engines. Without --watch, "
            "profiles are managed with PUT/DELETE /allocator/models/{id}."
        ),
    )
    parser.add_argument(
        "--watch", type=Path, metavar="DIR", help="desired-state directory (the source of truth)"
    )
    parser.add_argument(
        "--state",
        type=Path,
        required=True,
        metavar="STATE_DIR",
        help="durable controller state: database, operator token, signing key",
    )
    default_listen = DEFAULT_CONTROLLER.removeprefix("http://")
    parser.add_argument(
        "--listen",
        type=parse_listen,
        default=parse_listen(default_listen),
        metavar="HOST:PORT",
        help=f"address to serve on (default {default_listen})",
    )
    parser.add_argument(
        "--tick-interval",
        type=float,
        default=2.0,
        metavar="SECONDS",
        help="periodic reconciliation interval (default 2)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from gridctl.controller.serving import ControllerService, ServiceOptions

    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.watch is not None and not args.watch.is_dir():
        print(f"error: --watch {args.watch}: not a directory", file=sys.stderr)
        return 1
    host, port = args.listen
    try:
        service = ControllerService(
            ServiceOptions(
                state_dir=args.state,
                watch_dir=args.watch,
                host=host,
                port=port,
                tick_interval=args.tick_interval,
            )
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"gridctl controller on http://{host}:{port} (state {args.state})", flush=True)
    service.run()
    return 0
