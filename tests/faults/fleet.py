"""A real-process fleet for fault drills: one `gridctl controller`, node daemons, engines.

Unlike `gridctl up`, every process here is started and signalled one by one, so a
test can SIGKILL the controller, SIGSTOP a node or give one process a wall clock
an hour off (``GRIDCTL_CLOCK_OFFSET_FILE``, see ``gridctl/wallclock.py``). The
durable state is read back the way an operator would inspect it after an
incident: read-only SQLite connections to the controller's and each node's
database, and the node's own action log.

Every wait polls with a generous deadline; teardown resumes stopped processes,
stops nodes (which stop their children) and the controller, then kills by proven
identity (pid and birth time) any engine child and any process still naming this
fleet's directory.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from tests.e2e.harness import GEMMA, ROOT, VERIFY, DesiredRepo, free_port, wait_for

TICK_SECONDS = 1.0
HEARTBEAT_SECONDS = 1.0
ACTION_LINE = re.compile(r"action (\S+) (\w+) (succeeded|failed|cancelled|rejected)")
POLICY = """\
# yaml-language-server: $schema=../schemas/controller-policy.schema.json
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: faults
spec:
  mode: automatic
  controller_lease_seconds: {lease}
  max_concurrent_mutations: 2
  max_concurrent_mutations_per_host: {per_host}
  mutation_cooldown_seconds: 1
  failure_backoff_base_seconds: 1
  failure_backoff_max_seconds: 4
  observation_timeout_seconds: 10
  heartbeat_stale_seconds: {stale}
  # heartbeats come every second here: a silent host's routes end after 20 s instead of
  # a minute, and a restarted controller waits 10 s (not 60) before destructive work
  route_lease_seconds: 20
  destructive_min_route_lease_seconds: 10
  membership_recovery_grace_seconds: 10
"""


def read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection that never creates, migrates or locks a database for writing."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)


@dataclass
class Node:
    host_id: str
    state_dir: Path
    args: list[str]
    log: Path
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None

    @property
    def database(self) -> Path:
        return self.state_dir / "node.sqlite3"

    def start(self) -> None:
        with self.log.open("ab") as sink:
            self.proc = subprocess.Popen(
                self.args,
                cwd=ROOT,
                env=self.env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )

    def signal(self, signum: int) -> None:
        assert self.proc is not None and self.proc.poll() is None, f"{self.host_id} not running"
        self.proc.send_signal(signum)

    def kill(self) -> None:
        """SIGKILL, and wait until the process is gone (its children survive it)."""
        self.signal(signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout=30)

    def receipts(self) -> dict[str, dict[str, Any]]:
        """Every command this node ever recorded, by action id, from its own database."""
        with contextlib.closing(read_only(self.database)) as conn:
            rows = conn.execute(
                "SELECT action_id, kind, model_id, status, reason FROM receipts"
            ).fetchall()
        return {
            r[0]: {"kind": r[1], "model_id": r[2], "status": r[3], "reason": r[4]} for r in rows
        }

    def finished_actions(self) -> Counter[str]:
        """How many times each action id finished, from the node's log across restarts."""
        return Counter(m.group(1) for m in ACTION_LINE.finditer(self.log.read_text("utf-8")))


@dataclass
class FaultFleet:
    root: Path
    repo: DesiredRepo
    port: int = field(default_factory=free_port)
    lease_seconds: float = 4.0
    controller: subprocess.Popen[bytes] | None = None
    controller_env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    nodes: dict[str, Node] = field(default_factory=dict)
    children: set[tuple[int, float]] = field(default_factory=set)
    extra_controllers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    issued_earlier: set[str] = field(default_factory=set)  # by stores since quarantined

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def state(self) -> Path:
        return self.root / "controller"

    @property
    def database(self) -> Path:
        return self.state / "controller.sqlite3"

    @property
    def controller_log(self) -> Path:
        return self.root / "controller.log"

    @property
    def token(self) -> str:
        return (self.state / "operator.token").read_text().strip()

    # --- processes --------------------------------------------------------------------

    def controller_argv(self, port: int | None = None) -> list[str]:
        args = [sys.executable, "-m", "gridctl", "controller", "--watch", str(self.repo.path)]
        args += ["--state", str(self.state), "--listen", f"127.0.0.1:{port or self.port}"]
        return [*args, "--tick-interval", str(TICK_SECONDS), "--verbose"]

    def start_controller(self) -> None:
        with self.controller_log.open("ab") as sink:
            self.controller = subprocess.Popen(
                self.controller_argv(),
                cwd=ROOT,
                env=self.controller_env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        wait_for("the controller to answer", self.status, deadline=90)

    def kill_controller(self) -> None:
        assert self.controller is not None and self.controller.poll() is None
        self.controller.send_signal(signal.SIGKILL)
        self.controller.wait(timeout=30)

    def add_node(
        self,
        host_id: str,
        *,
        controller_url: str | None = None,
        artifact_dir: Path | None = None,
        capacity_mb: int = 1400,
        env: dict[str, str] | None = None,
        token: str | None = None,
        tags: str = "local,cpu",
        node_policy: str | None = None,
    ) -> Node:
        from gridctl.credentials import (
            issue_node_credential,
            load_or_create_signing_key,
            write_secret_file,
        )
        from tests.node.conftest import free_port_range

        node_dir = self.root / host_id
        node_dir.mkdir(parents=True, exist_ok=True)
        token_file = node_dir / "node.token"
        if token is None:
            key = load_or_create_signing_key(self.state)
            token = issue_node_credential(key, host_id, now=time.time())
        write_secret_file(token_file, token + "\n")
        ports = free_port_range()
        args = [sys.executable, "-m", "gridctl", "node", "start", "--foreground"]
        args += ["--controller", controller_url or self.url, "--token-file", str(token_file)]
        args += ["--host-id", host_id, "--state-dir", str(node_dir), "--tags", tags]
        args += ["--capacity-mb", str(capacity_mb), "--external-mb", "0", "--reserved-mb", "0"]
        args += ["--heartbeat-seconds", str(HEARTBEAT_SECONDS), "--failure-domain", host_id]
        args += ["--port-range", f"{ports.first}-{ports.last}", "--engine-threads", "1"]
        args += ["--engine-ctx", "1024", "--stop-idle-seconds", "5"]
        if artifact_dir is not None:
            args += ["--artifact-dir", str(artifact_dir)]
        if node_policy is not None:  # a NodePolicy spec, as YAML flow text
            policy_file = node_dir / "node-policy.yaml"
            policy_file.write_text(
                "apiVersion: gridctl/v1\nkind: NodePolicy\nmetadata: {name: fault}\n"
                f"spec: {node_policy}\n",
                encoding="utf-8",
            )
            args += ["--policy", str(policy_file)]
        node = Node(host_id, node_dir, args, self.root / f"{host_id}.log", env or dict(os.environ))
        self.nodes[host_id] = node
        return node

    # --- observation ------------------------------------------------------------------

    def status(self, timeout: float = 15) -> dict[str, Any]:
        response = httpx.get(self.url + "/allocator/status", timeout=timeout, verify=VERIFY)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def host(self, host_id: str) -> dict[str, Any] | None:
        return next((h for h in self.status()["hosts"] if h["host_id"] == host_id), None)

    def residencies(self, model: str = GEMMA) -> list[dict[str, Any]]:
        return [
            {**r, "host_id": h["host_id"]}
            for h in self.status()["hosts"]
            for r in h["residencies"]
            if r["model_id"] == model
        ]

    def routable(self, model: str = GEMMA) -> list[str]:
        return sorted(r["host_id"] for r in self.residencies(model) if r.get("routable"))

    def engines(self, model: str | None = None) -> dict[str, list[tuple[int, float]]]:
        """Live llama-server children of this fleet (of ``model``, by its ``-a`` alias, if
        given), by host: (pid, birth time)."""
        found: dict[str, list[tuple[int, float]]] = {}
        for host_id, alias, born in self._engine_rows():
            if model is None or alias == model:
                found.setdefault(host_id, []).append(born)
        return found

    def _engine_rows(self) -> list[tuple[str, str, tuple[int, float]]]:
        rows = []
        for proc in psutil.process_iter(["cmdline", "create_time"]):
            cmd = proc.info.get("cmdline") or []
            if not cmd or "llama-server" not in cmd[0] or "--api-key-file" not in cmd:
                continue
            key_file = cmd[cmd.index("--api-key-file") + 1]
            alias = cmd[cmd.index("-a") + 1] if "-a" in cmd else ""
            for host_id, node in self.nodes.items():
                if key_file.startswith(str(node.state_dir) + os.sep):
                    born = (proc.pid, float(proc.info["create_time"]))
                    rows.append((host_id, alias, born))
                    self.children.add(born)
        return rows

    def actions(self) -> list[dict[str, Any]]:
        """The controller's durable action rows (read-only)."""
        with contextlib.closing(read_only(self.database)) as conn:
            rows = conn.execute(
                "SELECT action_id, kind, host_id, model_id, state, delivered_at FROM actions"
            ).fetchall()
        keys = ("action_id", "kind", "host_id", "model_id", "state", "delivered_at")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    def remember_issued(self) -> None:
        """Keep the action ids of the current store (before a test destroys it)."""
        self.issued_earlier |= {a["action_id"] for a in self.actions()}

    def chat(self, model: str = GEMMA) -> str:
        from openai import OpenAI

        client = OpenAI(base_url=self.url + "/v1", api_key="unused", max_retries=0, timeout=60)
        reply = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
        )
        return reply.choices[0].message.content or ""

    def logs(self) -> str:
        parts = []
        for path in sorted(self.root.glob("*.log")):
            lines = path.read_text(errors="replace").splitlines()
            kept = [line for line in lines if "httpx: HTTP Request" not in line]
            parts.append(f"== {path.name}\n" + "\n".join(kept[-60:]))
        return "\n".join(parts)

    # --- invariants -------------------------------------------------------------------

    def assert_no_command_ran_twice(self) -> None:
        """Each action id finished at most once on every node (across restarts), no node
        finished an action the controller never issued, and no host runs two engines."""
        issued = {a["action_id"] for a in self.actions()} | self.issued_earlier
        for host_id, node in self.nodes.items():
            if not node.log.exists():
                continue
            twice = {a: n for a, n in node.finished_actions().items() if n > 1}
            assert twice == {}, f"{host_id} finished these actions more than once: {twice}"
            ran = {a for a, r in node.receipts().items() if r["status"] == "succeeded"}
            assert ran <= issued, f"{host_id} ran actions the controller never issued"
        per_model = Counter((host_id, alias) for host_id, alias, _born in self._engine_rows())
        twice_started = {k: n for k, n in per_model.items() if n > 1}
        assert twice_started == {}, f"more than one engine for one model on a host: {per_model}"

    # --- teardown ---------------------------------------------------------------------

    def stop(self) -> None:
        self.engines()  # remember every child for the identity-proven kill below
        procs = [n.proc for n in self.nodes.values() if n.proc is not None]
        controllers = [c for c in [self.controller, *self.extra_controllers] if c is not None]
        for proc in procs + controllers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for proc in controllers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid, born in self.children:
            with contextlib.suppress(psutil.Error):
                child = psutil.Process(pid)
                if abs(child.create_time() - born) < 0.01:
                    child.kill()
        mine = str(self.root)
        stragglers = [
            p
            for p in psutil.process_iter(["cmdline"])
            if p.pid != os.getpid() and any(mine in c for c in (p.info.get("cmdline") or []))
        ]
        for proc in stragglers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(stragglers, timeout=30)


def make_fault_fleet(
    root: Path, *, lease_seconds: float = 4.0, stale: float = 6.0, per_host: int = 1
) -> FaultFleet:
    """A fault fleet's desired state; ``per_host`` mutations may run on one host at once
    (more than one puts several commands in one heartbeat answer)."""
    repo = DesiredRepo(root / "desired")
    repo.write("policy.yaml", POLICY.format(lease=lease_seconds, stale=stale, per_host=per_host))
    repo.commit("fault drill policy")
    return FaultFleet(root=root, repo=repo, lease_seconds=lease_seconds)
