"""``gridctl node start|stop|status|drain|pause|quarantine|resume`` (and ``qualify``).

``start`` runs the node daemon (detached unless ``--foreground``) and, when
detached, waits for the instance it started to register. ``stop`` proves the
daemon's identity (pid, process birth time, argv with its instance id) before
any signal, waits for its graceful drain, and never signals what it cannot
prove. ``drain``/``pause``/``quarantine``/``resume`` write a durable local
override into the state directory; the running daemon reports it as the host
state at its next heartbeat.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from gridctl import contexts
from gridctl.cli.drain_check import Stuck, cannot_complete_lines, stuck_replicas
from gridctl.client import ControllerClient, ControllerError
from gridctl.domain.states import HostState
from gridctl.errors import GridctlError
from gridctl.logs import add_log_format_argument
from gridctl.logs import configure as configure_logging
from gridctl.node import overrides
from gridctl.node.actuator import PortRange
from gridctl.node.agent import AGENT_STATUS_META
from gridctl.node.daemon import (
    DATABASE,
    NodeConfig,
    daemon_identity,
    read_daemon_record,
    run_daemon,
)
from gridctl.node.joining import NodeIdentity, read_join_bundle
from gridctl.node.processes import Liveness, check_identity, signal_proven, stop_proven
from gridctl.node.protecting import PROTECTION_META, load_node_policy
from gridctl.node.protection import ProtectionPolicy
from gridctl.node.runtimes.llamacpp import EngineSettings
from gridctl.node.statestore import NodeStateStore


def default_state_dir() -> Path:
    override = os.environ.get("GRIDCTL_NODE_STATE")
    if override:
        return Path(override)
    return Path.home() / ".local" / "state" / "gridctl" / "node"


def _state_arg(parser: argparse.ArgumentParser, *, by_host: bool = True) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help="node state directory (default: the current context's directory for --host, "
        "else $GRIDCTL_NODE_STATE or ~/.local/state/gridctl/node)",
    )
    if by_host:
        parser.add_argument(
            "--host",
            metavar="ID",
            default=None,
            help="a host of the current context's fleet (`gridctl up` records local-1, ...)",
        )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    node = sub.add_parser("node", help="run and control this machine's node daemon")
    node_sub = node.add_subparsers(dest="node_command", metavar="SUBCOMMAND")

    start = node_sub.add_parser("start", help="start the node daemon")
    start.add_argument(
        "--join",
        type=Path,
        metavar="FILE",
        help="join the fleet with a bundle from `gridctl join-token create` (once; the "
        "identity is kept in the state directory and reused by later starts)",
    )
    start.add_argument(
        "--advertise",
        metavar="ADDR",
        help="address other machines reach this host's engines on (IPv4 or IPv6); engines "
        "bind it and serve TLS with the engine certificate issued at join",
    )
    start.add_argument("--controller", help="controller base URL (default: from the join)")
    start.add_argument(
        "--token-file", type=Path, help="owner-only credential (default: from the join)"
    )
    start.add_argument("--host-id", help="stable id of this host (default: from the join bundle)")
    _state_arg(start, by_host=False)
    start.add_argument("--capacity-mb", type=int, default=None, help="model memory (MB)")
    start.add_argument("--reserved-mb", type=int, default=0, help="memory kept for the host")
    start.add_argument("--external-mb", type=int, default=None, help="fixed external use (MB)")
    start.add_argument("--failure-domain", default="default")
    start.add_argument("--tags", default="", help="comma-separated host tags")
    start.add_argument("--port-range", default="23000-23099", help="ports for engine children")
    start.add_argument("--heartbeat-seconds", type=float, default=5.0)
    start.add_argument("--engine-threads", type=int, default=2)
    start.add_argument("--engine-ctx", type=int, default=2048)
    start.add_argument("--engine-parallel", type=int, default=2)
    start.add_argument("--llama-server", type=Path, default=None, help="llama-server binary")
    start.add_argument(
        "--vllm-python",
        type=Path,
        default=None,
        help="the vLLM virtualenv's interpreter: offer the vllm runtime "
        "(default: $GRIDCTL_VLLM_PYTHON; neither: no vllm runtime)",
    )
    start.add_argument("--artifact-dir", type=Path, default=None, help="artifact cache")
    start.add_argument(
        "--artifact-listen",
        default=None,
        metavar="ADDR:PORT",
        help="serve this node's verified artifacts to fleet peers (loopback without TLS)",
    )
    start.add_argument(
        "--artifact-peer-ca",
        type=Path,
        default=None,
        help="CA certificate (PEM) that verifies https peers' artifact servers",
    )
    start.add_argument("--stop-idle-seconds", type=float, default=30.0)
    start.add_argument(
        "--policy", type=Path, default=None, help="NodePolicy YAML: host-protection thresholds"
    )
    start.add_argument(
        "--dedicated",
        action="store_true",
        help="always-on server: ignore user activity and battery",
    )
    start.add_argument("--foreground", action="store_true", help="run in this process")
    add_log_format_argument(start)
    start.add_argument("--start-timeout", type=float, default=60.0)
    start.add_argument("--instance-id", default=None, help=argparse.SUPPRESS)
    start.set_defaults(func=run_start)

    stop = node_sub.add_parser("stop", help="drain and stop the daemon and its children")
    _state_arg(stop)
    stop.add_argument("--timeout", type=float, default=90.0, help="graceful stop deadline")
    stop.set_defaults(func=run_stop)

    status = node_sub.add_parser("status", help="show the node's state")
    _state_arg(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=run_status)

    for kind, text in (
        ("drain", "stop new work here; existing work may finish"),
        ("pause", "reclaim this machine: no new work"),
        ("quarantine", "fence this host until explicitly resumed"),
    ):
        cmd = node_sub.add_parser(kind, help=text)
        _state_arg(cmd)
        cmd.add_argument("--reason", default="", help="why (shown in status)")
        cmd.add_argument("--for-seconds", type=float, default=None, help="expire automatically")
        cmd.add_argument(
            "--force",
            action="store_true",
            help="also stop this host's engines now, even a model's last replica (the owner's "
            "final say; the model's shortfall is reported)",
        )
        cmd.add_argument("--yes", action="store_true", help="confirm --force without asking")
        cmd.add_argument("--json", action="store_true", help="print the result as JSON")
        cmd.set_defaults(func=run_override, override=kind)
    resume = node_sub.add_parser("resume", help="clear the local override")
    _state_arg(resume)
    resume.add_argument("--json", action="store_true", help="print the result as JSON")
    resume.set_defaults(func=run_resume)

    from gridctl.cli import node_qualify  # imports this module: registered once it is loaded

    node_qualify.register(node_sub)

    def show_help(_args: argparse.Namespace) -> int:
        node.print_help()
        return 2

    node.set_defaults(func=show_help)


def _state_dir(args: argparse.Namespace) -> Path:
    if args.state_dir is None and getattr(args, "host", None):
        found = contexts.node_state_dir(args.host)
        if found is None:
            context = contexts.current_context()
            known = ", ".join(sorted(context.node_state_dirs)) if context else ""
            where = f"context {context.name}" if context else "no current context"
            raise GridctlError(
                f"host {args.host} has no node state directory in {where}"
                + (f" (its hosts: {known})" if known else "")
                + "; pass --state-dir DIR, or `gridctl context use NAME` for its fleet"
            )
        return found.absolute()
    return Path(args.state_dir or default_state_dir()).absolute()


def _need_state(state_dir: Path, args: argparse.Namespace | None = None) -> None:
    """Refuse a missing state directory, unless --state-dir named it (an override may be
    set before the node first starts)."""
    if args is not None and args.state_dir is not None:
        state_dir.mkdir(parents=True, exist_ok=True)
        return
    if not (state_dir / DATABASE).exists():
        context = contexts.current_context()
        hosts = ", ".join(sorted(context.node_state_dirs)) if context else ""
        suggestion = f" (context {context.name} has hosts {hosts})" if context and hosts else ""
        raise GridctlError(
            f"no node state in {state_dir}; pass --host ID{suggestion} or --state-dir DIR"
        )


# --- start ------------------------------------------------------------------------------


def _policy(args: argparse.Namespace) -> ProtectionPolicy:
    policy = load_node_policy(args.policy) if args.policy else ProtectionPolicy()
    return dataclasses.replace(policy, dedicated=True) if args.dedicated else policy


def _config(args: argparse.Namespace) -> NodeConfig:
    return NodeConfig(
        host_id=args.host_id,
        controller_url=args.controller,
        token_file=args.token_file.absolute(),
        state_dir=_state_dir(args),
        capacity_mb=args.capacity_mb,
        reserved_mb=args.reserved_mb,
        failure_domain=args.failure_domain,
        tags=tuple(t.strip() for t in args.tags.split(",") if t.strip()),
        port_range=PortRange.parse(args.port_range),
        external_mb=args.external_mb,
        heartbeat_seconds=args.heartbeat_seconds,
        engine=EngineSettings(
            threads=args.engine_threads, ctx_size=args.engine_ctx, parallel=args.engine_parallel
        ),
        stop_idle_timeout=args.stop_idle_seconds,
        binary=args.llama_server,
        vllm_python=_vllm_python(args.vllm_python),
        artifact_dir=args.artifact_dir,
        artifact_listen=args.artifact_listen,
        artifact_peer_ca=args.artifact_peer_ca,
        policy=_policy(args),
        advertise=args.advertise,
    )


def _vllm_python(path: Path | None) -> Path | None:
    """``--vllm-python`` as an absolute path; a path that is not an executable file is
    refused here, before the daemon starts, naming the flag."""
    if path is None:
        return None
    if not path.is_file() or not os.access(path, os.X_OK):
        raise GridctlError(f"--vllm-python {path}: not an executable file")
    return path.absolute()


def _resolve_identity(args: argparse.Namespace) -> None:
    """Join if asked, then fill --controller/--token-file/--host-id from the stored identity."""
    identity = NodeIdentity(_state_dir(args))
    if args.join is not None:
        if not args.advertise:
            raise GridctlError("--join needs --advertise ADDR (where other machines reach you)")
        bundle = read_join_bundle(args.join)
        if identity.exists():
            print(
                f"already joined as {identity.record().get('host_id')} "
                f"({identity.record_file}); the bundle is not used again",
                file=sys.stderr,
            )
        else:
            host_id = identity.join(bundle, [args.advertise], host_id=args.host_id)
            print(f"joined {bundle.controller} as host {host_id} (identity in {identity.dir})")
    if identity.exists():
        record = identity.record()
        if args.host_id and args.host_id != record.get("host_id"):
            raise GridctlError(
                f"--host-id {args.host_id} differs from the joined identity "
                f"{record.get('host_id')} in {identity.record_file}"
            )
        args.host_id = str(record["host_id"])
        args.controller = args.controller or str(record["controller"])
        args.token_file = args.token_file or identity.token_file
        advertised = record.get("advertise") or []
        if args.advertise is None and advertised:
            args.advertise = str(advertised[0])
    missing = [
        flag
        for flag, value in (
            ("--controller", args.controller),
            ("--token-file", args.token_file),
            ("--host-id", args.host_id),
        )
        if not value
    ]
    if missing:
        raise GridctlError(
            f"{', '.join(missing)} required (or join first: --join FILE --advertise ADDR)"
        )


def run_start(args: argparse.Namespace) -> int:
    try:
        _resolve_identity(args)
        config = _config(args)
    except (ValueError, GridctlError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.foreground:
        configure_logging(args.log_format, logging.INFO)
        logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per probe is noise
        try:
            return run_daemon(config, instance_id=args.instance_id or secrets.token_hex(8))
        except GridctlError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    return _start_detached(args, config)


def _start_detached(args: argparse.Namespace, config: NodeConfig) -> int:
    instance_id = secrets.token_hex(8)
    argv = [sys.executable, "-m", "gridctl", "node", "start", *_start_flags(args)]
    argv += ["--foreground", "--instance-id", instance_id]
    log_dir = config.state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    with open(log_dir / "daemon.log", "ab") as log:
        child = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + args.start_timeout
    while time.monotonic() < deadline:
        if child.poll() is not None:
            print(f"error: node daemon exited with {child.returncode}; see {log_dir}/daemon.log")
            return 1
        status = _agent_status(config.state_dir)
        if status.get("instance_id") == instance_id and status.get("registered"):
            print(
                f"node {config.host_id} started (pid {child.pid}), registered with "
                f"{config.controller_url}"
            )
            return 0
        time.sleep(0.2)
    print(
        f"error: node daemon (pid {child.pid}) did not register within {args.start_timeout:.0f}s; "
        f"it keeps retrying; see {log_dir}/daemon.log",
        file=sys.stderr,
    )
    return 1


def _start_flags(args: argparse.Namespace) -> list[str]:
    flags = [
        "--controller",
        args.controller,
        "--token-file",
        str(args.token_file.absolute()),
        "--host-id",
        args.host_id,
        "--state-dir",
        str(_state_dir(args)),
        "--port-range",
        args.port_range,
        "--failure-domain",
        args.failure_domain,
        "--reserved-mb",
        str(args.reserved_mb),
        "--heartbeat-seconds",
        str(args.heartbeat_seconds),
        "--engine-threads",
        str(args.engine_threads),
        "--engine-ctx",
        str(args.engine_ctx),
        "--engine-parallel",
        str(args.engine_parallel),
        "--stop-idle-seconds",
        str(args.stop_idle_seconds),
        "--log-format",
        args.log_format,
    ]
    if args.tags:
        flags += ["--tags", args.tags]
    if args.dedicated:
        flags.append("--dedicated")
    for name, value in (
        ("--capacity-mb", args.capacity_mb),
        ("--external-mb", args.external_mb),
        ("--llama-server", args.llama_server),
        ("--vllm-python", args.vllm_python.absolute() if args.vllm_python else None),
        ("--artifact-dir", args.artifact_dir),
        ("--artifact-listen", args.artifact_listen),
        ("--artifact-peer-ca", args.artifact_peer_ca.absolute() if args.artifact_peer_ca else None),
        ("--policy", args.policy.absolute() if args.policy else None),
        ("--advertise", args.advertise),
    ):
        if value is not None:
            flags += [name, str(value)]
    return flags


# --- stop -------------------------------------------------------------------------------


def run_stop(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    record = read_daemon_record(state_dir)
    code = 0
    if record is not None:
        identity = daemon_identity(record)
        if identity is None:
            print(
                f"error: {state_dir}/daemon.json cannot prove a daemon identity; inspect manually"
            )
            return 1
        liveness = check_identity(identity)
        if liveness is Liveness.UNPROVEN:
            print(f"error: pid {identity.pid} is not the recorded daemon; not signalling it")
            return 1
        if liveness is Liveness.PROVEN:
            print(f"stopping node daemon pid {identity.pid} (draining children)")
            signal_proven(identity, signal.SIGTERM)
            if not _wait_gone(identity, args.timeout):
                print(f"daemon pid {identity.pid} still running after {args.timeout:.0f}s; SIGKILL")
                signal_proven(identity, signal.SIGKILL)
                code = 1 if not _wait_gone(identity, 10.0) else 0
    # whatever the daemon left behind (it was killed, or is not running): stop proven children
    if (state_dir / DATABASE).exists():
        store = NodeStateStore(state_dir / DATABASE)
        try:
            for residency in store.residencies():
                if residency.identity is None or residency.fenced:
                    continue
                if stop_proven(residency.identity, grace=10.0):
                    print(f"stopped {residency.model_id} child pid {residency.pid}")
                else:
                    # never signal what cannot be proven ours, and never call that stopped
                    print(f"left pid {residency.pid} alone: identity not proven")
                    code = 1
        finally:
            store.close()
    print("node stopped" if code == 0 else "node stop incomplete")
    return code


def _wait_gone(identity: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check_identity(identity) is Liveness.DEAD:
            return True
        time.sleep(0.1)
    return check_identity(identity) is Liveness.DEAD


# --- status -----------------------------------------------------------------------------


def _agent_status(state_dir: Path) -> dict[str, Any]:
    if not (state_dir / DATABASE).exists():
        return {}
    store = NodeStateStore(state_dir / DATABASE)
    try:
        raw = store.get_meta(AGENT_STATUS_META)
    finally:
        store.close()
    try:
        data = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _protection(store: NodeStateStore) -> dict[str, Any] | None:
    """The running daemon's last protection decision (state, reasons, unknown sensors)."""
    try:
        data = json.loads(store.get_meta(PROTECTION_META) or "null")
        HostState(data["state"])
    except (ValueError, KeyError, TypeError):
        return None
    return data if isinstance(data, dict) else None


def status_document(state_dir: Path, now: float) -> dict[str, Any]:
    """Everything ``node status`` shows, without any secret."""
    record = read_daemon_record(state_dir)
    identity = daemon_identity(record) if record else None
    running = identity is not None and check_identity(identity) is Liveness.PROVEN
    store = NodeStateStore(state_dir / DATABASE)
    try:
        override = store.override()
        agent = json.loads(store.get_meta(AGENT_STATUS_META) or "{}")
        protection = _protection(store) if running else None
        protected = HostState(protection["state"]) if protection else HostState.ACCEPTING
        doc: dict[str, Any] = {
            "host_id": store.get_meta("host_id"),
            "state_dir": str(state_dir),
            "daemon": {
                "running": running,
                "pid": identity.pid if identity else None,
                "instance_id": record.get("instance_id") if record else None,
            },
            "host_state": overrides.host_state(override, now, protected).value,
            "override": overrides.describe(override, now),
            "protection": protection,
            "agent": agent if running else {**agent, "registered": False},
            "residencies": [
                {
                    "model_id": r.model_id,
                    "state": r.state.value,
                    "memory_mb": r.memory_mb,
                    "artifact_sha256": r.artifact_sha256,
                    "pid": r.pid,
                    "port": r.port,
                    "fenced": r.fenced,
                    "active_requests": r.active_requests,
                    "loaded_age_seconds": None
                    if r.loaded_at is None
                    else round(max(0.0, now - r.loaded_at), 1),
                    "message": r.message,
                }
                for r in store.residencies()
            ],
            "cached_models": [
                {"model_id": c.model_id, "artifact_sha256": c.sha256, "size_bytes": c.size_bytes}
                for c in store.cached_artifacts()
            ],
            "recent_receipts": [
                {
                    "action_id": r.action_id,
                    "kind": r.kind,
                    "model_id": r.model_id,
                    "status": r.status,
                    "reason": r.reason,
                    "duration_seconds": r.duration_seconds,
                    "acked": r.acked,
                }
                for r in store.receipts(limit=10)
            ],
            "warnings": store.warnings,
        }
    finally:
        store.close()
    return doc


def run_status(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    _need_state(state_dir)
    doc = status_document(state_dir, time.time())
    if args.json:
        print(json.dumps(doc, indent=2, sort_keys=True))
        return 0
    daemon = doc["daemon"]
    running = f"running (pid {daemon['pid']})" if daemon["running"] else "not running"
    print(f"node {doc['host_id']}: {running}, host state {doc['host_state']}")
    if doc["protection"] and doc["protection"]["reasons"]:
        p = doc["protection"]
        print(f"  protection: {p['state']} ({', '.join(p['reasons'])})")
    if doc["override"]:
        o = doc["override"]
        expiry = f", expires in {o['expires_in_seconds']}s" if o["expires_at"] else ""
        print(f"  override: {o['kind']} ({o['reason'] or 'no reason'}{expiry})")
    agent = doc["agent"]
    if agent:
        print(
            f"  controller {agent.get('controller')}: registered={agent.get('registered')} "
            f"heartbeats={agent.get('heartbeats')} last_error={agent.get('last_error')}"
        )
    for r in doc["residencies"]:
        where = f" pid {r['pid']} port {r['port']}" if r["pid"] else ""
        fenced = " FENCED" if r["fenced"] else ""
        print(f"  {r['model_id']}: {r['state']}{where}{fenced} {r['message']}")
    for warning in doc["warnings"]:
        print(f"  warning: {warning}")
    return 0


# --- overrides --------------------------------------------------------------------------


def _fleet_status() -> dict[str, Any] | None:
    """The current context's controller status (a public read), or None if unreachable."""
    try:
        with ControllerClient(timeout=5.0) as client:
            return client.status()
    except ControllerError:
        return None


def _confirm_force(args: argparse.Namespace, stuck: list[Stuck]) -> bool:
    if args.yes or not stuck:
        return True
    if not sys.stdin.isatty():
        raise GridctlError("--force would stop a last replica; confirm with --yes")
    names = ", ".join(s.model_id for s in stuck)
    answer = input(f"stop the last replica of {names} on this host? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def _force_stop(state_dir: Path) -> list[str]:
    """Stop this host's proven engine children; the daemon reports them gone."""
    stopped = []
    store = NodeStateStore(state_dir / DATABASE)
    try:
        for residency in store.residencies():
            if residency.identity is None or residency.fenced:
                continue
            if stop_proven(residency.identity, grace=10.0):
                stopped.append(residency.model_id)
    finally:
        store.close()
    return stopped


def run_override(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    _need_state(state_dir, args)
    try:
        override = overrides.make_override(
            args.override, args.reason, now=time.time(), for_seconds=args.for_seconds
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    store = NodeStateStore(state_dir / DATABASE)
    try:
        host_id = store.get_meta("host_id") or args.host or str(state_dir)
    finally:
        store.close()
    fleet = _fleet_status() if args.override in ("drain", "pause") else None
    stuck = stuck_replicas(fleet, host_id) if fleet is not None else []
    if args.force and not _confirm_force(args, stuck):
        print("not changed")
        return 1
    store = NodeStateStore(state_dir / DATABASE)
    try:
        store.set_override(override)
    finally:
        store.close()
    stopped = _force_stop(state_dir) if args.force else []
    state = overrides.OVERRIDE_STATES[args.override].value
    until = f" for {args.for_seconds:.0f}s" if args.for_seconds else " until resumed"
    shortfall = (
        [
            {
                "model_id": s.model_id,
                "ready": s.ready_elsewhere,
                "wanted": s.wanted,
                "shortfall": max(0, s.wanted - s.ready_elsewhere),
            }
            for s in stuck
        ]
        if args.force
        else []
    )
    if args.json:
        doc = {
            "host_id": host_id,
            "state_dir": str(state_dir),
            "host_state": state,
            "expires_in_seconds": args.for_seconds,
            "complete": not stuck or args.force,
            "cannot_complete": [s.as_json() for s in stuck] if not args.force else [],
            "forced": bool(args.force),
            "stopped": stopped,
            "shortfall": shortfall,
            "controller_checked": fleet is not None,
        }
        print(json.dumps(doc, indent=2))
        return 0
    print(f"host {host_id} {state}{until}")
    if args.force:
        for model in stopped:
            print(f"stopped {model} on {host_id} (forced)")
        for row in shortfall:
            print(
                f"shortfall: {row['model_id']} has {row['ready']} of {row['wanted']} wanted "
                f"replicas ready ({row['shortfall']} short) until another host can take it"
            )
    else:
        for line in cannot_complete_lines(host_id, args.override, stuck):
            print(line)
    if fleet is None and args.override in ("drain", "pause"):
        print("note: the controller was not reachable, so whether this completes is not known")
    return 0


def run_resume(args: argparse.Namespace) -> int:
    state_dir = _state_dir(args)
    _need_state(state_dir, args)
    store = NodeStateStore(state_dir / DATABASE)
    try:
        store.set_override(None)
        host_id = store.get_meta("host_id")
    finally:
        store.close()
    if args.json:
        print(json.dumps({"host_id": host_id, "host_state": "accepting", "override": None}))
    else:
        print(f"host {host_id or state_dir} accepting (override cleared)")
    return 0
