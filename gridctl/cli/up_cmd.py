"""``gridctl up`` (foreground) and ``gridctl fleet up|status|watch|down`` (detached).

Both run the embedded default: the controller on ``policies/`` and N logical
node daemons on this machine, serving through the OpenAI-compatible router.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from gridctl import contexts
from gridctl.cli import demo_cmd
from gridctl.cli.status_cmd import issue_line
from gridctl.client import ControllerClient, ControllerError, default_state_root
from gridctl.fleetrun import (
    MAX_MACHINES,
    FleetRun,
    FleetSettings,
    FleetStartError,
    alive,
    load_run,
    settings_match,
    start_fleet,
    stop_fleet,
)
from gridctl.logs import add_log_format_argument
from gridctl.printable import one_line


def _machines(value: str) -> int:
    n = int(value)
    if not 1 <= n <= MAX_MACHINES:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_MACHINES}")
    return n


def _engine_threads(value: str) -> int:
    n = int(value)
    if n < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return n


def _fleet_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--machines",
        type=_machines,
        default=2,
        metavar="N",
        help=f"logical hosts to start, 1-{MAX_MACHINES} (default 2)",
    )
    parser.add_argument(
        "--watch",
        default="policies",
        metavar="DIR",
        help="desired-state directory in a git repository; its commits are followed "
        "(default policies)",
    )
    parser.add_argument(
        "--worktree",
        action="store_true",
        help="follow the files on disk instead of commits (local experiments)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="where state and logs go (default ~/.local/state/gridctl/up)",
    )
    parser.add_argument("--port", type=int, default=22100, help="controller port (default 22100)")
    parser.add_argument(
        "--engine-port-base",
        type=int,
        default=23000,
        metavar="PORT",
        help="first engine port; each logical host gets 50 (default 23000)",
    )
    parser.add_argument(
        "--engine-threads",
        type=_engine_threads,
        default=0,
        metavar="N",
        help="threads of each engine child (default: an equal share of this machine's cores "
        "per logical host)",
    )
    add_log_format_argument(parser)  # of the controller's and the nodes' logs


def _settings(args: argparse.Namespace) -> FleetSettings:
    root = args.state_dir or default_state_root() / "up"
    return FleetSettings(
        machines=args.machines,
        watch_dir=str(Path(args.watch).resolve()),
        worktree=args.worktree,
        state_root=str(Path(root).resolve()),
        port=args.port,
        engine_port_base=args.engine_port_base,
        engine_threads=args.engine_threads,
        log_format=args.log_format,
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = sub.add_parser(
        "up",
        help="run the embedded default in the foreground (Ctrl-C stops everything)",
        description="Start the controller on the desired-state directory and N logical node "
        "daemons on this machine with partitioned memory, separate host ids, "
        "failure domains, state dirs, credentials and port ranges. Prints the "
        "OpenAI base URL and follows residency transitions; Ctrl-C drains and "
        "stops everything.",
    )
    _fleet_args(up)
    up.set_defaults(func=run_up)

    fleet = sub.add_parser("fleet", help="the embedded default, detached")
    fsub = fleet.add_subparsers(dest="fleet_command", metavar="ACTION")
    fup = fsub.add_parser("up", help="start detached (idempotent for matching settings)")
    _fleet_args(fup)
    fup.set_defaults(func=run_fleet_up)
    fstatus = fsub.add_parser("status", help="processes and controller summary")
    fstatus.add_argument("--state-dir", type=Path, default=None)
    fstatus.add_argument("--json", action="store_true")
    fstatus.set_defaults(func=run_fleet_status)
    fwatch = fsub.add_parser(
        "watch", help="follow residency transitions (Ctrl-C leaves the fleet running)"
    )
    fwatch.add_argument("--state-dir", type=Path, default=None)
    fwatch.set_defaults(func=run_fleet_watch)
    fdown = fsub.add_parser("down", help="drain and stop the detached fleet")
    fdown.add_argument("--state-dir", type=Path, default=None)
    fdown.set_defaults(func=run_fleet_down)
    demo_cmd.register(fsub)

    def fleet_help(_args: argparse.Namespace) -> int:
        fleet.print_help()
        return 2

    fleet.set_defaults(func=fleet_help)


def record_context(run: FleetRun) -> contexts.Context | None:
    """Make this fleet the current context: plain `gridctl status`, `node drain --host`,
    `dash` and the rest then find it without flags."""
    root = Path(run.settings.state_root)
    context = contexts.Context(
        name=contexts.context_name_for(run.base_url),
        controller=run.base_url,
        token_file=str(run.token_file),
        state_root=str(root),
        node_state_dirs={p.name: str(root / p.name) for p in run.processes if p.role == "node"},
    )
    try:
        contexts.record(context)
    except (OSError, contexts.ContextError) as exc:
        print(f"warning: context not recorded: {exc}", file=sys.stderr)
        return None
    return context


def _announce(run: FleetRun) -> None:
    context = record_context(run)
    print(f"controller: {run.base_url}")
    print(f"OpenAI base URL: {run.base_url}/v1")
    print(f"operator token: {run.token_file}")
    if context is not None:
        print(f"context: {context.name} (current; commands find this fleet without flags)")
    print("dashboard: gridctl dash")
    print("chat: gridctl chat 'What is the capital of France?' (or -m MODEL)")
    print(f"logs: {Path(run.settings.state_root) / 'logs'}")
    print(
        "for other shells or tools: "
        f"export GRIDCTL_CONTROLLER={run.base_url} GRIDCTL_TOKEN_FILE={run.token_file}",
        flush=True,
    )


class Follower:
    """Prints residency transitions and command outcomes from successive status documents."""

    def __init__(self, *, replay: bool = True, controller_started: float | None = None) -> None:
        # replay=False (``fleet watch`` joining a running fleet): the first document only
        # primes what was seen, so old events are not printed as if they happened now
        self.replay = replay
        self.primed = False
        # ``gridctl up``: time.monotonic() when the controller was spawned; the stamps count
        # from it and the first routable replica prints "controller start -> model routable"
        self.controller_started = controller_started
        self.routable_after: float | None = None
        self.transfer_marks: dict[tuple[str, str], int] = {}
        self.states: dict[tuple[str, str], str] = {}
        self.seen_events: set[tuple[float, str, str]] = set()
        self.started = time.monotonic() if controller_started is None else controller_started
        self.revision: str | None = None
        self.rejected_seen: set[tuple[str, float]] = set()

    def follow(self, doc: dict[str, Any]) -> list[str]:
        stamp = f"[{time.monotonic() - self.started:6.1f}s]"
        if not self.replay and not self.primed:
            lines = self._prime(doc, stamp)
        else:
            lines = [
                *self._states(doc, stamp),
                *self._revisions(doc, stamp),
                *self._transfers(doc, stamp),
                *self._events(doc, stamp),
                *self._first_routable(doc, stamp),
            ]
        # node-reported states, messages and sources: printed, never acted on by the terminal
        return [one_line(line) for line in lines]

    def _states(self, doc: dict[str, Any], stamp: str) -> list[str]:
        """A line per residency whose state changed (every one, the first time)."""
        lines = []
        current: dict[tuple[str, str], str] = {}
        for host in doc.get("hosts", []):
            for r in host["residencies"]:
                state = r["state"] + (" (routable)" if r.get("routable") else "")
                current[(host["host_id"], r["model_id"])] = state
        for key in sorted(set(current) | set(self.states)):
            before, after = self.states.get(key), current.get(key, "gone")
            if before != after and not (before is None and after == "gone"):
                lines.append(f"{stamp} {key[1]} on {key[0]}: {before or 'absent'} -> {after}")
        self.states = dict(current)
        return lines

    def _first_routable(self, doc: dict[str, Any], stamp: str) -> list[str]:
        """Once, for ``gridctl up``: how long from the controller's start to a routable model."""
        if self.controller_started is None or self.routable_after is not None:
            return []
        routable = sorted(
            (r["model_id"], host["host_id"])
            for host in doc.get("hosts", [])
            for r in host["residencies"]
            if r.get("routable")
        )
        if not routable:
            return []
        self.routable_after = time.monotonic() - self.controller_started
        model, host = routable[0]
        return [
            f"{stamp} controller start -> model routable: {self.routable_after:.2f} s "
            f"({model} on {host})"
        ]

    @property
    def awaiting_first_routable(self) -> bool:
        return self.controller_started is not None and self.routable_after is None

    def _events(self, doc: dict[str, Any], stamp: str) -> list[str]:
        """Command outcomes and retirements not printed before."""
        lines = []
        for event in doc.get("history", []):
            name = event.get("event", "")
            if not any(
                name.endswith(s)
                for s in ("_succeeded", "_failed", "_rejected", "issued", "profile_retired")
            ):
                continue
            seen = (float(event["at"]), name, str(event.get("action_id") or event.get("model_id")))
            if seen in self.seen_events:
                continue
            self.seen_events.add(seen)
            where = f" on {event['host_id']}" if event.get("host_id") else ""
            lines.append(
                f"{stamp} {name}: {event.get('model_id') or ''}{where} "
                f"{event.get('message') or ''}".rstrip()
            )
        return lines

    def _prime(self, doc: dict[str, Any], stamp: str) -> list[str]:
        """Join a running fleet: its residencies and transfers as they are now, and its
        past events and rejections taken in without being replayed as news."""
        self.primed = True
        self._revisions(doc, stamp)
        self._events(doc, stamp)
        revision = str((doc.get("desired") or {}).get("revision") or "none")[:19]
        hosts = len(doc.get("hosts") or [])
        earlier = len(doc.get("history") or [])
        return [
            *self._states(doc, stamp),
            *self._transfers(doc, stamp),
            f"{stamp} watching: revision {revision} in force, {hosts} host(s); "
            f"{earlier} earlier event(s) not replayed (`gridctl status` lists them)",
        ]

    def _revisions(self, doc: dict[str, Any], stamp: str) -> list[str]:
        """A line when a new revision is in force; the errors of each rejected one."""
        desired = doc.get("desired") or {}
        lines = []
        revision = desired.get("revision")
        if revision and revision != self.revision:
            lines.append(f"{stamp} desired revision {str(revision)[:19]} in force")
            self.revision = revision
        for rejected in desired.get("rejected") or []:
            key = (str(rejected.get("revision")), float(rejected.get("at") or 0))
            if key in self.rejected_seen:
                continue
            self.rejected_seen.add(key)
            lines.append(
                f"{stamp} revision {key[0][:19]} rejected; "
                f"{str(revision or '-')[:19]} stays in force:"
            )
            lines.extend(f"  {issue_line(e)}" for e in rejected.get("errors") or [])
        return lines

    def _transfers(self, doc: dict[str, Any], stamp: str) -> list[str]:
        """One progress line per running transfer whenever its byte count moved."""
        lines, marks = [], {}
        for host in doc.get("hosts", []):
            for t in host.get("transfers", []):
                key = (host["host_id"], str(t.get("artifact_sha256")))
                marks[key] = int(t.get("bytes_done") or 0)
                if self.transfer_marks.get(key) != marks[key]:
                    lines.append(f"{stamp} {transfer_line(host['host_id'], t)}")
        self.transfer_marks = marks
        return lines


# until the first replica is routable `up` reads the status this often: the moment it
# reports is otherwise late by half the interval on average (a status read of a small
# fleet costs the controller about a millisecond)
FIRST_ROUTABLE_POLL_SECONDS = 0.05


def progress_bar(done: int, total: int | None, width: int = 24) -> str:
    if not total:
        return "[" + "?" * width + "]"
    filled = min(width, width * done // total)
    return "[" + "#" * filled + "." * (width - filled) + "]"


def transfer_line(host_id: str, t: dict[str, Any]) -> str:
    """``gemma on local-1: fetch [######..] 42% 105.0/241.4 MB 12.3 MB/s from SOURCE``."""
    done, total = int(t.get("bytes_done") or 0), t.get("bytes_total")
    mib = 1024 * 1024
    percent = f"{100 * done // total}%" if total else "?%"
    size = f"{done / mib:.1f}/{total / mib:.1f} MB" if total else f"{done / mib:.1f} MB"
    rate = float(t.get("rate_bytes_per_second") or 0.0) / mib
    return (
        f"{t.get('model_id')} on {host_id}: fetch {progress_bar(done, total)} {percent} "
        f"{size} {rate:.1f} MB/s from {t.get('source')}"
    )


def _follow_until(
    client: ControllerClient,
    stop: list[bool],
    interval: float = 1.0,
    run: FleetRun | None = None,
    follower: Follower | None = None,
) -> None:
    follower = follower or Follower()
    while not stop[0]:
        # until the first replica is routable, look often: that moment is what `up` reports
        wait = interval
        if follower.awaiting_first_routable:
            wait = min(interval, FIRST_ROUTABLE_POLL_SECONDS)
        try:
            for line in follower.follow(client.status()):
                print(line, flush=True)
        except ControllerError as exc:
            print(f"(controller unreachable: {exc})", flush=True)
        for line in run.reap() if run is not None else []:
            print(f"warning: {line}", flush=True)
        until = time.monotonic() + wait
        while not stop[0] and (left := until - time.monotonic()) > 0:
            time.sleep(min(0.1, left))  # a Ctrl-C is seen within 0.1 s


def run_up(args: argparse.Namespace) -> int:
    settings = _settings(args)
    existing = load_run(Path(settings.state_root))
    if existing is not None and any(alive(existing).values()):
        print(
            f"error: a fleet is already running from {settings.state_root}; "
            "stop it with `gridctl fleet down`",
            file=sys.stderr,
        )
        return 1
    try:
        run = start_fleet(settings, detached=False)
    except (ValueError, TimeoutError, FleetStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _announce(run)
    stop = [False]

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop[0] = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    with ControllerClient(run.base_url, token_file=run.token_file) as client:
        _follow_until(
            client, stop, run=run, follower=Follower(controller_started=run.controller_started)
        )
    print("stopping: nodes drain and unload their engines, then the controller stops", flush=True)
    problems = stop_fleet(run)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    print("stopped")
    return 0


def run_fleet_up(args: argparse.Namespace) -> int:
    settings = _settings(args)
    existing = load_run(Path(settings.state_root))
    if existing is not None and all(alive(existing).values()):
        if settings_match(existing, settings):
            print("fleet already running with these settings")
            _announce(existing)
            return 0
        print(
            "error: a fleet with different settings is running; `gridctl fleet down` first",
            file=sys.stderr,
        )
        return 1
    if existing is not None:
        stop_fleet(existing)
    try:
        run = start_fleet(settings, detached=True)
    except (ValueError, TimeoutError, FleetStartError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    _announce(run)
    return 0


def _existing(args: argparse.Namespace) -> FleetRun | None:
    """The fleet of ``--state-dir``, else of the current context, else the default one."""
    root = args.state_dir
    if root is None:
        try:
            context = contexts.current_context()
        except contexts.ContextError:
            context = None
        recorded = context.state_root if context is not None else None
        root = Path(recorded) if recorded else default_state_root() / "up"
    run = load_run(Path(root))
    if run is None:
        print(f"no fleet recorded under {root}", file=sys.stderr)
    return run


def run_fleet_status(args: argparse.Namespace) -> int:
    run = _existing(args)
    if run is None:
        return 1
    processes = alive(run)
    summary: dict[str, Any] = {
        "controller": run.base_url,
        "processes": processes,
        "state_root": run.settings.state_root,
    }
    try:
        with ControllerClient(run.base_url, token_file=run.token_file) as client:
            doc = client.status()
        summary["mode"] = doc["mode"]["effective"]
        summary["hosts"] = {h["host_id"]: h["state"] for h in doc["hosts"]}
        summary["models"] = {
            m["model_id"]: f"{m['health']} {m['ready']}/{m['desired']}" for m in doc["models"]
        }
    except ControllerError as exc:
        summary["error"] = str(exc)
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        for name, up in processes.items():
            print(f"{name:<12} {'running' if up else 'stopped'}")
        for key in ("mode", "hosts", "models", "error"):
            value = summary.get(key)
            if isinstance(value, dict):
                value = ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "-"
            if key in summary:
                print(f"{key}: {value}")
    return 0 if all(processes.values()) else 1


def run_fleet_watch(args: argparse.Namespace) -> int:
    run = _existing(args)
    if run is None:
        return 1
    stop = [False]
    signal.signal(signal.SIGINT, lambda *_: stop.__setitem__(0, True))
    with ControllerClient(run.base_url, token_file=run.token_file) as client:
        _follow_until(client, stop, follower=Follower(replay=False))
    print("stopped watching; the fleet keeps running")
    return 0


def run_fleet_down(args: argparse.Namespace) -> int:
    run = _existing(args)
    if run is None:
        return 1
    for problem in stop_fleet(run):
        print(f"warning: {problem}", file=sys.stderr)
    print("fleet stopped")
    return 0
