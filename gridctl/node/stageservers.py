"""Starting and stopping llama.cpp's RPC stage server, bound to loopback only.

``ggml-rpc-server`` has no authentication and no encryption: whoever reaches its
port can write into the host's memory through it. So it is always started with
``-H 127.0.0.1`` on a free loopback port, and only ``gridctl.node.rpctunnel``'s
mutually authenticated TLS listener reaches it from elsewhere. Readiness is the
kernel's word (the child's listening socket, via psutil), never a probe
connection, which the server would count as a client. Stopping takes the whole
process tree: terminate, wait (bounded), kill what is left.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

from gridctl.errors import PermanentError, TransientError
from gridctl.node.runtimes.launching import child_environment

LOOPBACK = "127.0.0.1"
READY_SECONDS = 30.0
STOP_GRACE_SECONDS = 5.0
PORT_ATTEMPTS = 5


@dataclass(frozen=True)
class RunningStageServer:
    """A started ``ggml-rpc-server``: its process, loopback port and log file."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid


def free_loopback_port() -> int:
    """A port nothing listens on at 127.0.0.1 right now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        return int(probe.getsockname()[1])


def listening_addresses(pid: int) -> list[tuple[str, int]]:
    """Every (address, port) the process ``pid`` listens on; empty when it is gone."""
    try:
        sockets = psutil.Process(pid).net_connections(kind="inet")
    except psutil.Error:
        return []
    return [
        (str(s.laddr[0]), int(s.laddr[1]))
        for s in sockets
        if s.status == psutil.CONN_LISTEN and s.laddr
    ]


def stage_server_argv(binary: Path, port: int, threads: int) -> list[str]:
    return [str(binary), "-H", LOOPBACK, "-p", str(port), "-t", str(threads)]


def _log_tail(log_path: Path, lines: int = 10) -> str:
    text = log_path.read_text(errors="replace") if log_path.exists() else ""
    return " | ".join(text.splitlines()[-lines:])


def _launch(binary: Path, port: int, threads: int, log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as log:
        return subprocess.Popen(
            stage_server_argv(binary, port, threads),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=child_environment(),
            start_new_session=True,
        )


def start_stage_server(
    binary: Path, log_path: Path, *, threads: int = 1, ready_seconds: float = READY_SECONDS
) -> RunningStageServer:
    """Start the stage server on a free loopback port and wait until it listens there.

    A port taken between the pick and the bind makes the child exit; another port
    is tried (bounded). Raises ``TransientError`` when it never listened.
    """
    if not binary.is_file():
        raise PermanentError(f"stage server {binary} does not exist")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    last = "not started"
    for _ in range(PORT_ATTEMPTS):
        port = free_loopback_port()
        child = _launch(binary, port, threads, log_path)
        deadline = time.monotonic() + ready_seconds
        while child.poll() is None and time.monotonic() < deadline:
            if (LOOPBACK, port) in listening_addresses(child.pid):
                return RunningStageServer(child, port, log_path)
            time.sleep(0.02)
        last = f"exit {child.poll()}: {_log_tail(log_path)}"
        stop_process_tree(child)
    raise TransientError(f"the stage server did not listen on {LOOPBACK} ({last})", 5.0)


def stop_process_tree(process: subprocess.Popen[bytes], grace: float = STOP_GRACE_SECONDS) -> None:
    """Terminate ``process`` and every descendant; kill what outlives ``grace``; reap."""
    try:
        root = psutil.Process(process.pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        tree = []
    for member in tree:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.terminate()
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for member in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(alive, timeout=grace)
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=grace)
