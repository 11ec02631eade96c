"""Start and stop the embedded default: one controller and N logical node daemons here.

Each logical host gets its own host id, failure domain, state directory,
credential, port range and a share of this machine's real memory — never more
in total than the machine can actually give. Processes are children of the
caller (``gridctl up``) or detached with a run file (``gridctl fleet``).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import psutil

from gridctl.credentials import (
    issue_node_credential,
    load_or_create_signing_key,
    write_secret_file,
)

MAX_MACHINES = 32
PORT_BASE = 23000
PORTS_PER_HOST = 50
NODE_CAPACITY_CEILING_MB = 4096
RUN_FILE = "fleet.json"
# the controller's first startup line (gridctl.cli.controller_cmd), once its service is built
CONTROLLER_ANNOUNCEMENT = b"gridctl controller on "


@dataclass
class FleetSettings:
    machines: int
    watch_dir: str
    state_root: str
    host: str = "127.0.0.1"
    port: int = 22100
    capacity_mb: int = 0  # per logical host, computed when 0
    engine_threads: int = 0  # per engine of a logical host, computed when 0
    engine_port_base: int = PORT_BASE
    worktree: bool = False  # the controller follows files on disk, not commits
    log_format: str = "text"  # the controller's and nodes' --log-format

    def key(self) -> dict[str, object]:
        return {k: v for k, v in asdict(self).items() if k not in ("capacity_mb", "engine_threads")}


@dataclass
class ProcessRecord:
    role: str
    name: str
    pid: int
    create_time: float
    log: str


@dataclass
class FleetRun:
    settings: FleetSettings
    processes: list[ProcessRecord] = field(default_factory=list)
    # handles of processes this process started (not persisted); used to reap exits
    children: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)
    # time.monotonic() when this process spawned the controller (not persisted): `gridctl up`
    # counts "controller start -> model routable" from it
    controller_started: float | None = field(default=None, repr=False)

    def reap(self) -> list[str]:
        """Reap children that exited; one line per exit, for the operator."""
        lines = []
        for name, child in list(self.children.items()):
            code = child.poll()
            if code is not None:
                del self.children[name]
                lines.append(f"{name} exited with code {code}; see its log")
        return lines

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.host}:{self.settings.port}"

    @property
    def token_file(self) -> Path:
        return Path(self.settings.state_root) / "controller" / "operator.token"


def partition_capacity(machines: int) -> int:
    """Memory per logical host: an equal share of what this machine can really give."""
    usable = int(psutil.virtual_memory().available / (1024 * 1024) * 0.6)
    return max(256, min(NODE_CAPACITY_CEILING_MB, usable // max(1, machines)))


def partition_threads(machines: int) -> int:
    """Engine threads per logical host: an equal share of the cores this process may use.

    Logical hosts share one machine's cores as they share its memory. An engine given
    more threads than its share spins at its threadpool's barriers while the other
    host's engine or its own node holds a core: on 2 cores, two engines of 2 threads
    each took 1.3-5.5 s to warm SmolLM2-135M where one thread each took 0.45-0.67 s
    (docs/up-timeline.md).
    """
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) // max(1, machines))


def _spawn(args: list[str], log_path: Path, detached: bool) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = log_path.open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "gridctl", *args],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=detached,
    )


def _record(role: str, name: str, proc: subprocess.Popen[bytes], log: Path) -> ProcessRecord:
    return ProcessRecord(role, name, proc.pid, psutil.Process(proc.pid).create_time(), str(log))


class FleetStartError(RuntimeError):
    """The fleet could not start; the message says why and what to do."""


def require_free_port(host: str, port: int) -> None:
    """Refuse to start when another process already listens on ``host:port``.

    Without this, the health check would find *that* process's controller and
    this fleet would follow another fleet's history as its own.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise FleetStartError(
                    f"{host}:{port}: address already in use (another fleet or program listens "
                    f"there); stop it or pass --port"
                ) from None
            raise FleetStartError(f"{host}:{port}: cannot bind: {exc.strerror}") from None


def log_tail(path: Path, lines: int = 12) -> list[str]:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def wait_healthy(
    url: str, deadline_seconds: float = 60.0, proc: subprocess.Popen[bytes] | None = None
) -> None:
    """Wait for ``/healthz``; when ``proc`` is given, fail at once if it exits first."""
    deadline = time.monotonic() + deadline_seconds
    last: Exception | None = None
    with httpx.Client(timeout=1.0) as client:  # one client: each new one reads a CA store
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise FleetStartError(f"the controller exited with code {proc.returncode}")
            try:
                if client.get(url + "/healthz").status_code == 200:
                    if proc is not None and proc.poll() is not None:
                        raise FleetStartError(f"the controller exited with code {proc.returncode}")
                    return
            except httpx.HTTPError as exc:
                last = exc
            time.sleep(0.1)
    raise TimeoutError(f"controller at {url} did not become healthy: {last}")


def start_fleet(settings: FleetSettings, *, detached: bool, say: object = print) -> FleetRun:
    """Start the controller and the logical nodes; returns when the controller is healthy.

    The nodes start when the controller announces its address (its imports done, its
    service built, about to listen), not after it answers: a node's own start (an
    interpreter and its imports, about 0.6 s) then overlaps the controller's last steps,
    and its first registration still finds the controller listening. Started any
    earlier, a node would find no controller and retry only after 2 s. Their
    credentials, signed with the controller's key (made here; the controller loads
    it), are written before the controller starts.
    """
    if not 1 <= settings.machines <= MAX_MACHINES:
        raise ValueError(f"--machines must be between 1 and {MAX_MACHINES}")
    root = Path(settings.state_root)
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)
    if not settings.capacity_mb:
        settings.capacity_mb = partition_capacity(settings.machines)
    if not settings.engine_threads:
        settings.engine_threads = partition_threads(settings.machines)
    require_free_port(settings.host, settings.port)
    run = FleetRun(settings)
    controller_dir = root / "controller"
    controller_dir.mkdir(parents=True, exist_ok=True)
    controller_dir.chmod(0o700)
    key = load_or_create_signing_key(controller_dir)
    node_tokens: dict[str, Path] = {}
    for i in range(1, settings.machines + 1):
        host_id = f"local-{i}"
        node_dir = root / host_id
        node_dir.mkdir(parents=True, exist_ok=True)
        token_file = node_dir / "node.token"
        write_secret_file(token_file, issue_node_credential(key, host_id, now=time.time()) + "\n")
        node_tokens[host_id] = token_file
    ctl_log = root / "logs" / "controller.log"
    earlier_log = ctl_log.stat().st_size if ctl_log.exists() else 0  # logs are appended to
    run.controller_started = time.monotonic()
    proc = _spawn(
        [
            "controller",
            "--watch",
            settings.watch_dir,
            "--state",
            str(controller_dir),
            "--listen",
            f"{settings.host}:{settings.port}",
            "--no-context",  # `gridctl up` records the fleet's context itself
            # at most MAX_MACHINES hosts: a plan takes milliseconds, and a planning worker
            # would be one more interpreter starting beside the nodes on a small machine
            "--plan-in-process",
            *(["--worktree"] if settings.worktree else []),
            "--log-format",
            settings.log_format,
        ],
        ctl_log,
        detached,
    )
    run.processes.append(_record("controller", "controller", proc, ctl_log))
    run.children["controller"] = proc
    assert callable(say)
    try:
        if wait_announced(ctl_log, proc, after=earlier_log):
            spawn_nodes(run, node_tokens, detached, say)
        wait_healthy(run.base_url, proc=proc)
    except (TimeoutError, FleetStartError) as exc:
        stop_fleet(run)
        proc.wait(timeout=30)
        tail = "\n".join(f"  {line}" for line in log_tail(ctl_log))
        raise FleetStartError(f"{exc}; last lines of {ctl_log}:\n{tail}") from None
    if len(run.processes) == 1:  # the controller never announced itself, yet answers
        spawn_nodes(run, node_tokens, detached, say)
    save_run(run)
    return run


def wait_announced(
    log_path: Path, proc: subprocess.Popen[bytes], *, after: int = 0, deadline: float = 60.0
) -> bool:
    """Wait for the controller's first startup line (``gridctl controller on URL``, in
    either log format) in its log past byte ``after``; False when it exited first or did
    not print it in time."""
    until = time.monotonic() + deadline
    while time.monotonic() < until and proc.poll() is None:
        try:
            with log_path.open("rb") as log:
                log.seek(after)
                if CONTROLLER_ANNOUNCEMENT in log.read():
                    return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


def spawn_nodes(
    run: FleetRun, node_tokens: dict[str, Path], detached: bool, say: object = print
) -> None:
    """Start every logical host, with its credential, and say so."""
    assert callable(say)
    settings = run.settings
    for i, (host_id, token_file) in enumerate(node_tokens.items(), start=1):
        _spawn_node(run, host_id, i, token_file, detached)
        first = settings.engine_port_base + (i - 1) * PORTS_PER_HOST
        threads = "thread" if settings.engine_threads == 1 else "threads"
        say(
            f"started logical host {host_id} ({settings.capacity_mb} MB, "
            f"{settings.engine_threads} engine {threads}, ports {first}-"
            f"{first + PORTS_PER_HOST - 1})"
        )


def _spawn_node(run: FleetRun, host_id: str, index: int, token_file: Path, detached: bool) -> None:
    """Start logical host ``index`` (from 1): its state dir, port block and failure domain."""
    settings = run.settings
    root = Path(settings.state_root)
    first = settings.engine_port_base + (index - 1) * PORTS_PER_HOST
    log = root / "logs" / f"{host_id}.log"
    proc = _spawn(
        [
            "node",
            "start",
            "--controller",
            run.base_url,
            "--token-file",
            str(token_file),
            "--host-id",
            host_id,
            "--state-dir",
            str(root / host_id),
            "--capacity-mb",
            str(settings.capacity_mb),
            "--external-mb",
            "0",
            "--heartbeat-seconds",
            "2",
            "--reserved-mb",
            "0",
            "--engine-threads",
            str(settings.engine_threads),
            "--failure-domain",
            f"zone-{chr(ord('a') + (index - 1) % 26)}",
            "--tags",
            "local,cpu",
            "--port-range",
            f"{first}-{first + PORTS_PER_HOST - 2}",
            "--artifact-listen",  # the last port of the host's block: its peer mirror
            f"127.0.0.1:{first + PORTS_PER_HOST - 1}",
            "--log-format",
            settings.log_format,
            "--foreground",
        ],
        log,
        detached,
    )
    run.processes.append(_record("node", host_id, proc, log))
    run.children[host_id] = proc


def save_run(run: FleetRun) -> None:
    path = Path(run.settings.state_root) / RUN_FILE
    data = {"settings": asdict(run.settings), "processes": [asdict(p) for p in run.processes]}
    path.write_text(json.dumps(data, indent=2))


def load_run(state_root: Path) -> FleetRun | None:
    path = state_root / RUN_FILE
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    return FleetRun(
        FleetSettings(**data["settings"]), [ProcessRecord(**p) for p in data["processes"]]
    )


def proven_process(record: ProcessRecord) -> psutil.Process | None:
    """The live process of ``record`` only if its birth time proves it is ours."""
    try:
        proc = psutil.Process(record.pid)
        if abs(proc.create_time() - record.create_time) > 0.01:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def alive(run: FleetRun) -> dict[str, bool]:
    return {p.name: proven_process(p) is not None for p in run.processes}


def stop_fleet(run: FleetRun, timeout: float = 60.0) -> list[str]:
    """Stop nodes first (they drain and unload their children), then the controller."""
    problems: list[str] = []
    for role in ("node", "controller"):
        procs = [(r, proven_process(r)) for r in run.processes if r.role == role]
        for record, proc in procs:
            if proc is None:
                continue
            try:
                proc.send_signal(signal.SIGTERM)
            except psutil.Error as exc:
                problems.append(f"{record.name}: {exc}")
        for record, proc in procs:
            if proc is None:
                continue
            try:
                proc.wait(timeout=timeout)
            except psutil.TimeoutExpired:
                problems.append(f"{record.name} did not stop within {timeout:.0f}s; killed")
                proc.kill()
            except psutil.Error:
                pass
    path = Path(run.settings.state_root) / RUN_FILE
    if path.exists():
        path.unlink()
    return problems


def settings_match(run: FleetRun, settings: FleetSettings) -> bool:
    return run.settings.key() == settings.key()
