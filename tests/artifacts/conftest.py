"""Fixtures for artifact tests: generated weights in an HF layout and a real server process."""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
OWNER, REPO, FILE = "acme", "tiny-model", "weights/tiny.Q4.gguf"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(check: Callable[[], bool], *, deadline: float = 60.0, what: str = "") -> None:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what or check}")


@dataclass
class Weights:
    root: Path  # the served directory (HF layout)
    data: bytes
    sha256: str
    source: str = f"hf://{OWNER}/{REPO}/{FILE}"

    @property
    def path(self) -> Path:
        return self.root / OWNER / REPO / FILE


def make_weights(root: Path, size: int, *, seed: int = 7) -> Weights:
    # Deterministic bytes (a repeated digest stream): no global randomness in tests.
    block = hashlib.sha256(f"seed-{seed}".encode()).digest() * 2048  # 64 KiB
    data = (block * (size // len(block) + 1))[:size]
    data = b"GGUF" + data[4:]
    target = root / OWNER / REPO / FILE
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data)
    return Weights(root, data, hashlib.sha256(data).hexdigest())


@dataclass
class ServerProcess:
    process: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def lines(self, needle: str) -> list[str]:
        return [line for line in self.log().splitlines() if needle in line]


@pytest.fixture
def artifact_server(tmp_path: Path) -> Iterator[Callable[..., ServerProcess]]:
    """Start ``tests.artifacts.drill_server`` (or ``gridctl artifacts serve``) processes."""
    started: list[ServerProcess] = []

    def start(root: Path, *extra: str, cli: bool = False) -> ServerProcess:
        port = free_port()
        log_path = tmp_path / f"server-{port}.log"
        if cli:
            argv = [sys.executable, "-m", "gridctl", "artifacts", "serve", str(root)]
            argv += ["--listen", f"127.0.0.1:{port}", *extra]
        else:
            argv = [sys.executable, "-m", "tests.artifacts.drill_server", str(root)]
            argv += ["--port", str(port), *extra]
        with open(log_path, "wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
        server = ServerProcess(proc, f"http://127.0.0.1:{port}", log_path)
        started.append(server)

        def ready() -> bool:
            assert proc.poll() is None, server.log()
            try:
                httpx.get(f"{server.url}/-/-/resolve/main/probe", timeout=1.0)
            except httpx.TransportError:
                return False
            return True

        wait_until(ready, what="artifact server to listen")
        return server

    yield start
    for server in started:
        if server.process.poll() is None:
            server.process.send_signal(signal.SIGTERM)
            try:
                server.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.process.kill()
                server.process.wait(timeout=10)


def fetch_cli(
    weights: Weights,
    into: Path,
    endpoint: str,
    *extra: str,
    size_mb: int = 64,
    token_file: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GRIDCTL_HF_ENDPOINT": endpoint}
    env.pop("GRIDCTL_HF_TOKEN_FILE", None)
    if token_file is not None:
        env["GRIDCTL_HF_TOKEN_FILE"] = str(token_file)
    argv = [sys.executable, "-m", "gridctl", "artifacts", "fetch", weights.source]
    argv += ["--sha256", weights.sha256, "--size-mb", str(size_mb), "--into", str(into), *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=300, check=False)
