"""``gridctl controller``: the reconciler daemon and the router, in the foreground."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gridctl.cli.ca_cmd import parse_duration
from gridctl.client import DEFAULT_CONTROLLER
from gridctl.controller.collector import settle as settle_collector
from gridctl.controller.reading import DEFAULT_INTERVAL_SECONDS, SourceOptions
from gridctl.credentials import DEFAULT_TTL_SECONDS
from gridctl.errors import GridctlError
from gridctl.logs import add_log_format_argument
from gridctl.logs import configure as configure_logging
from gridctl.wallclock import wall_clock

if TYPE_CHECKING:
    from gridctl.controller.stores.postgres import PostgresLocation


def parse_listen(value: str) -> tuple[str, int]:
    """``ADDR:PORT`` with IPv6 in brackets (``[::1]:8443``)."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise argparse.ArgumentTypeError(f"--listen must be HOST:PORT, not {value!r}")
    if ":" in host and not host.startswith("["):
        raise argparse.ArgumentTypeError(
            f"an IPv6 --listen address needs brackets: [{host}]:{port}"
        )
    return host.strip("[]") or "127.0.0.1", int(port)


def parse_interval(value: str) -> float:
    """``30s``, ``2m``, ``500ms`` or plain seconds, at least 100 ms."""
    units = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    text = value.strip()
    for suffix in ("ms", "s", "m", "h"):
        if text.endswith(suffix):
            number, scale = text[: -len(suffix)], units[suffix]
            break
    else:
        number, scale = text, 1.0
    try:
        seconds = float(number) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--interval must be like 30s or 2m, not {value!r}"
        ) from None
    if not 0.1 <= seconds <= 86400:
        raise argparse.ArgumentTypeError(f"--interval {value!r} must be between 100ms and 24h")
    return seconds


def source_options(args: argparse.Namespace) -> SourceOptions:
    """The desired-source flags; raises ``ValueError`` naming the flag that cannot work."""
    if args.verify_commits != (args.allowed_signers is not None):
        raise ValueError("--verify-commits and --allowed-signers FILE go together")
    if args.repo is not None and args.watch is not None:
        raise ValueError("--repo and --watch are alternatives: pass one")
    if args.worktree and args.watch is None:
        raise ValueError("--worktree needs --watch DIR")
    if args.path and args.repo is None:
        raise ValueError("--path goes with --repo (with --watch, DIR is the directory)")
    return SourceOptions(
        worktree=bool(args.worktree),
        repo_url=args.repo,
        ref=args.ref,
        path=args.path,
        interval=args.interval,
        allowed_signers=args.allowed_signers.resolve() if args.allowed_signers else None,
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "controller",
        help="run the reconciler daemon and the OpenAI-compatible router",
        description=(
            "Follow desired state in git (the tree of the commit a ref names, never the "
            "working tree; all-or-nothing reloads), accept node registrations and heartbeats, "
            "plan and reconcile on every change and periodically, deliver fenced commands, and "
            "serve /v1 requests to ready engines. --watch DIR follows the branch checked out "
            "in DIR's repository; --repo URL clones a remote into the state directory and "
            "fetches it every --interval. Without either, profiles are managed with "
            "PUT/DELETE /allocator/models/{id}."
        ),
    )
    parser.add_argument(
        "--watch",
        type=Path,
        metavar="DIR",
        help="desired-state directory inside a git repository: its committed tree is the "
        "source of truth",
    )
    parser.add_argument(
        "--worktree",
        action="store_true",
        help="with --watch: follow the files on disk instead of commits (local experiments; "
        "labelled 'worktree' in status)",
    )
    parser.add_argument(
        "--repo", metavar="URL", help="a git repository URL (file://, a bare path) to clone"
    )
    parser.add_argument(
        "--ref",
        metavar="REF",
        help="branch or ref to follow (default: the checked-out branch; the remote's HEAD)",
    )
    parser.add_argument(
        "--path", default="", metavar="PATH", help="with --repo: the directory inside it"
    )
    parser.add_argument(
        "--interval",
        type=parse_interval,
        default=DEFAULT_INTERVAL_SECONDS,
        metavar="DURATION",
        help="poll the ref this often besides watching it: 30s, 2m, 500ms (default 30s)",
    )
    parser.add_argument(
        "--verify-commits",
        action="store_true",
        help="accept only commits with a good SSH signature by an --allowed-signers key",
    )
    parser.add_argument(
        "--allowed-signers",
        type=Path,
        metavar="FILE",
        help="ssh allowed-signers file (gpg.ssh.allowedSignersFile) for --verify-commits",
    )
    parser.add_argument(
        "--state",
        type=Path,
        required=True,
        metavar="STATE_DIR",
        help="durable controller state: database, operator token, signing key",
    )
    parser.add_argument(
        "--no-context",
        action="store_true",
        help="do not record this controller as the current context (`gridctl context`)",
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
        help="periodic reconciliation interval (default 2); an input that changes the plan "
        "ticks sooner, and a quiet fleet of more than SECONDS x 1,000 hosts ticks every "
        "second per 1,000 hosts, at most every quarter of heartbeat_stale_seconds",
    )
    parser.add_argument(
        "--plan-in-process",
        action="store_true",
        help="plan on the tick thread instead of in a worker process (the worker keeps "
        "planning from delaying heartbeats on large fleets; this saves its memory on "
        "small ones)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        default=None,
        help="shared PostgreSQL state for highly available controllers "
        "(postgresql://USER@HOST:PORT/DB, no password in the URL); default: SQLite in --state",
    )
    parser.add_argument(
        "--store-password-file",
        type=Path,
        default=None,
        metavar="FILE",
        help="file holding the PostgreSQL password (or use PGPASSFILE / PGPASSWORD)",
    )
    parser.add_argument(
        "--advertise",
        metavar="URL",
        default=None,
        help="base URL other machines reach this controller at: nodes are sent here while it "
        "holds authority, and join bundles name it (default: from --listen)",
    )
    tls = parser.add_argument_group(
        "TLS and membership",
        "Off loopback the controller serves HTTPS only: with a certificate from the fleet CA "
        "(created in STATE_DIR/pki on first start) unless --tls-cert/--tls-key bring your own.",
    )
    tls.add_argument("--tls", action="store_true", help="serve HTTPS on loopback too")
    tls.add_argument("--tls-cert", type=Path, metavar="PEM", help="your own certificate chain")
    tls.add_argument("--tls-key", type=Path, metavar="PEM", help="its private key")
    tls.add_argument(
        "--tls-ca",
        type=Path,
        metavar="PEM",
        help="the CA that issued --tls-cert (joining nodes pin it)",
    )
    tls.add_argument(
        "--engine-tls-ca",
        type=Path,
        metavar="PEM",
        help="an extra CA (a private intranet CA) trusted for external engines",
    )
    tls.add_argument(
        "--node-credential-ttl",
        type=parse_duration,
        default=float(DEFAULT_TTL_SECONDS),
        metavar="DURATION",
        help="lifetime of node credentials issued at join and renewal (default 30d); "
        "nodes renew after half of it",
    )
    tls.add_argument(
        "--router-auth",
        choices=("auto", "required", "open"),
        default="auto",
        help="router API keys on /v1/*: auto requires them off loopback (default)",
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="log at INFO level (json logs always do)"
    )
    add_log_format_argument(parser)
    parser.set_defaults(func=run)


def shared_store(args: argparse.Namespace) -> PostgresLocation | None:
    """The PostgreSQL location ``--store`` names, or None for the embedded SQLite."""
    if args.store is None:
        if args.store_password_file is not None:
            raise ValueError("--store-password-file needs --store")
        return None
    try:
        from gridctl.controller.stores.postgres import PostgresLocation
    except ImportError as exc:
        raise ValueError(
            f"--store needs the PostgreSQL driver: pip install 'gridctl[ha]' ({exc})"
        ) from exc
    from gridctl.errors import PermanentError

    if args.store_password_file is not None and not args.store_password_file.is_file():
        raise ValueError(f"--store-password-file {args.store_password_file}: no such file")
    try:
        return PostgresLocation(args.store, args.store_password_file)
    except PermanentError as exc:
        raise ValueError(str(exc)) from exc


def run(args: argparse.Namespace) -> int:
    from gridctl.controller.serving import ControllerService, ServiceOptions, TlsOptions

    # a json log feeds a pipeline, which filters by level itself: it gets INFO too
    verbose = args.verbose or args.log_format == "json"
    configure_logging(args.log_format, logging.INFO if verbose else logging.WARNING)
    say = _announcer(args.log_format)
    if args.watch is not None and not args.watch.is_dir():
        print(f"error: --watch {args.watch}: not a directory", file=sys.stderr)
        return 1

    host, port = args.listen
    try:
        source = source_options(args)
        shared = shared_store(args)
        service = ControllerService(
            ServiceOptions(
                state_dir=args.state,
                watch_dir=args.watch,
                host=host,
                port=port,
                tick_interval=args.tick_interval,
                plan_in_worker=not args.plan_in_process,
                source=source,
                store=shared,
                advertise_url=args.advertise,
                tls=TlsOptions(
                    cert=args.tls_cert,
                    key=args.tls_key,
                    ca=args.tls_ca,
                    force=args.tls,
                    engine_ca=args.engine_tls_ca,
                ),
                node_credential_ttl=args.node_credential_ttl,
                router_auth=args.router_auth,
                clock=wall_clock(),
                monotonic=time.monotonic,
            )
        )
        if service.tls_enabled:
            service.serving_certificate()  # fail here, not inside the server, if it cannot
    except (ValueError, OSError, GridctlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    where = f"store {shared.describe()}" if shared is not None else f"state {args.state}"
    say(f"gridctl controller on {service.url} ({where})")
    if args.state is not None and not args.no_context:
        _record_context(service.url, Path(args.state), service.tls_enabled, say)
    if service.identity is not None and service.tls_enabled:
        say(f"fleet CA {service.identity.pinned_fingerprint()}")
    if service.source is not None:
        say(f"desired state: {describe_source(service.source.status())}")
    settle_collector()  # everything is imported and loaded: freeze it, raise the thresholds
    service.run()
    return 0


Announce = Callable[..., None]  # (line, *, warning=False)


def _announcer(log_format: str) -> Announce:
    """Startup lines: printed as ever in text mode, log records (JSON) in json mode, so
    every line of a json controller's output parses."""
    if log_format != "json":

        def show(line: str, *, warning: bool = False) -> None:
            print(line, file=sys.stderr if warning else sys.stdout, flush=True)

        return show
    announce = logging.getLogger("gridctl.controller.startup")
    announce.setLevel(logging.INFO)  # shown without --verbose, as the printed lines are

    def record(line: str, *, warning: bool = False) -> None:
        announce.log(logging.WARNING if warning else logging.INFO, "%s", line)

    return record


def _record_context(url: str, state: Path, tls: bool, say: Announce | None = None) -> None:
    """Make this controller the current context, so plain `gridctl status` finds it."""
    say = say or _announcer("text")
    from gridctl import contexts
    from gridctl.credentials import OPERATOR_CAPABILITY_FILE

    ca = state / "pki" / "ca.pem"
    context = contexts.Context(
        name=contexts.context_name_for(url),
        controller=url,
        token_file=str((state / OPERATOR_CAPABILITY_FILE).absolute()),
        ca_file=str(ca.absolute()) if tls and ca.is_file() else None,
        state_root=str(state.absolute()),
    )
    try:
        contexts.record(context)
    except (OSError, contexts.ContextError) as exc:
        say(f"warning: context not recorded: {exc}", warning=True)
        return
    say(f"context {context.name} is current (`gridctl context show`)")


def describe_source(status: dict[str, object]) -> str:
    if status.get("source") == "worktree":
        return f"{status.get('directory')} ({status.get('note')})"
    where = f"{status.get('repository')} {status.get('ref')} path {status.get('path')}"
    if status.get("error"):
        return f"{where}: {status['error']}"
    return f"{where} at {str(status.get('revision') or 'nothing valid yet')[:12]}"
