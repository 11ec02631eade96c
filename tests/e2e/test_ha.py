"""Highly available controllers on real processes: PostgreSQL, three controllers, two nodes.

One fleet lives through every failure in turn: SIGKILL of the leader while it
converges a scale-up (a follower takes term + 1 within the lease plus one tick,
requests through a surviving router keep succeeding, the model converges),
SIGSTOP of the next leader past its lease (the third takes over; resumed, the
old one issues nothing and every node rejects its term), and a PostgreSQL
restart (recommend with a warning while unreachable, automatic after). The
failover time is printed.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from openai import OpenAI

from gridctl.controller.store import ControllerStore
from gridctl.controller.stores.postgres import PostgresBackend, PostgresLocation
from tests.e2e.harness import (
    ENGINE_THREADS,
    GEMMA,
    ROOT,
    VERIFY,
    DesiredRepo,
    free_port,
    profile_yaml,
    wait_for,
)
from tests.pgcluster import PgCluster, pg_cluster  # noqa: F401  (a session fixture)

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]

LEASE_SECONDS = 4.0
TICK_SECONDS = 1.0
POLICY = """\
# yaml-language-server: $schema=../schemas/controller-policy.schema.json
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: ha
spec:
  mode: automatic
  controller_lease_seconds: {lease}
  max_concurrent_mutations: 2
  mutation_cooldown_seconds: 1
  failure_backoff_base_seconds: 2
  failure_backoff_max_seconds: 10
  observation_timeout_seconds: 10
"""


@dataclass
class HaFleet:
    root: Path
    repo: DesiredRepo
    location: PostgresLocation
    ports: list[int]
    controllers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    nodes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    children: set[tuple[int, float]] = field(default_factory=set)

    @property
    def urls(self) -> list[str]:
        return [f"http://127.0.0.1:{p}" for p in self.ports]

    @property
    def state(self) -> Path:
        return self.root / "controller"

    def _controller(self, i: int) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "gridctl", "controller", "--watch", str(self.repo.path)]
        args += ["--state", str(self.state), "--listen", f"127.0.0.1:{self.ports[i]}"]
        args += ["--store", self.location.url, "--tick-interval", str(TICK_SECONDS)]
        args += ["--store-password-file", str(self.location.password_file)]
        log = (self.root / f"controller-{i}.log").open("ab")
        return subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> None:
        from gridctl.credentials import (
            issue_node_credential,
            load_or_create_signing_key,
            write_secret_file,
        )
        from gridctl.fleetrun import PORTS_PER_HOST, partition_capacity

        for i in range(len(self.ports)):  # one at a time: the first creates the credentials
            self.controllers.append(self._controller(i))
            wait_for(f"controller {i}", lambda i=i: self.status(i), deadline=60)
        key = load_or_create_signing_key(self.state)
        base = 31000 + (os.getpid() % 50) * 100
        for n in (1, 2):
            host = f"local-{n}"
            node_dir = self.root / host
            node_dir.mkdir(parents=True)
            token = node_dir / "node.token"
            write_secret_file(token, issue_node_credential(key, host, now=time.time()) + "\n")
            first = base + (n - 1) * PORTS_PER_HOST
            args = [sys.executable, "-m", "gridctl", "node", "start", "--foreground"]
            args += ["--controller", ",".join(self.urls), "--token-file", str(token)]
            args += ["--host-id", host, "--state-dir", str(node_dir), "--tags", "local,cpu"]
            args += ["--capacity-mb", str(max(1400, partition_capacity(2)))]
            args += ["--external-mb", "0", "--reserved-mb", "0", "--heartbeat-seconds", "1"]
            args += ["--failure-domain", f"zone-{n}"]
            args += ["--port-range", f"{first}-{first + PORTS_PER_HOST - 1}"]
            args += ["--engine-threads", str(ENGINE_THREADS)]
            log = (self.root / f"{host}.log").open("ab")
            self.nodes.append(
                subprocess.Popen(args, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
            )

    def status(self, i: int) -> dict[str, Any]:
        response = httpx.get(self.urls[i] + "/allocator/status", timeout=5, verify=VERIFY)
        response.raise_for_status()
        data: dict[str, Any] = response.json()
        return data

    def leader(self, among: list[int] | None = None) -> tuple[int, int] | None:
        """(index, term) of the controller that holds authority, if one does."""
        for i in among if among is not None else range(len(self.ports)):
            try:
                ctl = self.status(i)["controller"]
            except (httpx.HTTPError, ValueError):
                continue
            if ctl["holds_authority"]:
                return i, int(ctl["term"])
        return None

    def routable(self, i: int, model: str) -> list[str]:
        return sorted(
            h["host_id"]
            for h in self.status(i)["hosts"]
            for r in h["residencies"]
            if r["model_id"] == model and r.get("routable")
        )

    def store(self) -> ControllerStore:
        return ControllerStore(None, backend=PostgresBackend(self.location))

    def remember_children(self) -> None:
        for proc in psutil.process_iter(["cmdline"]):
            cmd = proc.info.get("cmdline") or []
            if cmd and "llama-server" in cmd[0] and any(str(self.root) in c for c in cmd):
                self.children.add((proc.pid, proc.create_time()))

    def stop(self) -> None:
        self.remember_children()
        for proc in self.controllers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
        for proc in self.nodes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.nodes + self.controllers:
            if proc in self.controllers and proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
        for pid, born in self.children:
            try:
                child = psutil.Process(pid)
                if abs(child.create_time() - born) < 0.01:
                    child.kill()
            except psutil.Error:
                pass

    def logs(self) -> str:
        return "\n".join(
            f"== {p.name}\n{p.read_text(errors='replace')[-3000:]}"
            for p in sorted(self.root.glob("*.log"))
        )


@pytest.fixture
def ha(tmp_path: Path, pg_cluster: PgCluster) -> Iterator[HaFleet]:  # noqa: F811
    repo = DesiredRepo(tmp_path / "desired")
    repo.write("policy.yaml", POLICY.format(lease=LEASE_SECONDS))
    repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    repo.commit("ha fleet")
    location = PostgresLocation(pg_cluster.create_database(), pg_cluster.password_file)
    fleet = HaFleet(tmp_path, repo, location, [free_port() for _ in range(3)])
    try:
        fleet.start()
        yield fleet
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        if pg_cluster_is_down(pg_cluster):
            pg_cluster.start()
        fleet.stop()


def pg_cluster_is_down(cluster: PgCluster) -> bool:
    return not (cluster.data / "postmaster.pid").exists()


def chat(url: str, model: str = GEMMA) -> str:
    client = OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=60)
    reply = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Say hello."}], max_tokens=8
    )
    return reply.choices[0].message.content or ""


class Traffic:
    """Requests through one router, one after another, until stopped; failures kept."""

    def __init__(self, url: str) -> None:
        self.url, self.ok = url, 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                chat(self.url)
                self.ok += 1
            except Exception as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
            self._stop.wait(0.2)

    def __enter__(self) -> Traffic:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=90)


def _takeover(fleet: HaFleet, among: list[int], above: int, started: float) -> tuple[int, float]:
    """The new leader's index and how long after ``started`` (wall clock) it took authority,
    by its own ``authority_acquired`` event (no polling delay in the number)."""

    def taken() -> int | None:
        found = fleet.leader(among)
        return found[0] if found is not None and found[1] > above else None

    index = wait_for("a follower to take authority", taken, deadline=60, interval=0.05)
    (event,) = [
        e
        for e in fleet.status(index)["history"]
        if e["event"] == "authority_acquired" and e["message"] == f"term {above + 1}"
    ]
    return index, float(event["at"]) - started


def _replay_rejections(fleet: HaFleet, old_term: int, old_id: str) -> tuple[int, int]:
    """Every command a node ever received, restamped with the old term and a fresh id, as a
    late response from the old leader would arrive: returns (replayed, rejected)."""
    from gridctl.node.daemon import DATABASE
    from gridctl.node.intake import CommandIntake
    from gridctl.node.statestore import NodeStateStore

    replayed = rejected = 0
    for n in (1, 2):
        store = NodeStateStore(fleet.root / f"local-{n}" / DATABASE)
        intake = CommandIntake(store, f"local-{n}")
        assert store.fence_memory().highest_term > old_term
        for receipt in [r for r in store.receipts(limit=1024) if r.command]:
            command = {**receipt.command, "action_id": "replay-" + secrets.token_hex(8)}
            command.update(controller_term=old_term, controller_id=old_id)
            replayed += 1
            if intake.admit(command, remaining_ttl=LEASE_SECONDS, request_duration=0.01) is None:
                again = store.receipt(command["action_id"])
                rejected += int(again is not None and again.reason == "stale_term")
        store.close()
    return replayed, rejected


def test_failover_fencing_and_a_database_restart(
    ha: HaFleet,
    pg_cluster: PgCluster,  # noqa: F811
) -> None:
    fleet = ha
    first, term = wait_for("a leader", fleet.leader, deadline=60)
    wait_for("gemma routable", lambda: fleet.routable(first, GEMMA), deadline=240)
    for i in range(3):  # every router serves, followers included (their registries are fed)
        wait_for(f"router {i} answers", lambda i=i: chat(fleet.urls[i]).strip(), deadline=60)

    # --- SIGKILL the leader while it converges a scale-up -----------------------------------
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=2, max_replicas=2))
    fleet.repo.commit("two replicas")
    wait_for(
        "the leader to issue the second replica",
        lambda: fleet.status(first)["pending_commands"],
        deadline=60,
        interval=0.05,
    )
    survivors = [i for i in range(3) if i != first]
    with Traffic(fleet.urls[survivors[0]]) as traffic:
        killed_at = time.time()
        fleet.controllers[first].send_signal(signal.SIGKILL)
        second, failover = _takeover(fleet, survivors, term, killed_at)
        assert fleet.leader(survivors) == (second, term + 1)
        wait_for(
            "two routable replicas",
            lambda: len(fleet.routable(second, GEMMA)) == 2,
            deadline=300,
        )
    print(f"\nMEASURED failover after SIGKILL: {failover:.2f}s (lease {LEASE_SECONDS:g}s)")
    assert failover <= LEASE_SECONDS + TICK_SECONDS  # the lease TTL plus one tick
    assert traffic.ok > 0 and traffic.failures == [], traffic.failures
    history = fleet.store().history()
    runs = Counter(
        (h.kind.value, h.host_id, h.model_id) for h in history if h.status.value == "succeeded"
    )
    assert runs and max(runs.values()) == 1, runs  # no action ran twice

    # --- SIGSTOP the next leader past its lease --------------------------------------------
    old_id = fleet.status(second)["controller"]["controller_id"]
    third_candidates = [i for i in survivors if i != second]
    stopped_at = time.time()
    fleet.controllers[second].send_signal(signal.SIGSTOP)
    third, stop_failover = _takeover(fleet, third_candidates, term + 1, stopped_at)
    print(f"MEASURED failover after SIGSTOP: {stop_failover:.2f}s")
    # new work for both nodes in the new term
    fleet.repo.write("gemma-b.yaml", profile_yaml("gemma-b", min_replicas=2, max_replicas=2))
    fleet.repo.commit("a second model")
    wait_for("gemma-b on both", lambda: len(fleet.routable(third, "gemma-b")) == 2, deadline=300)
    fleet.controllers[second].send_signal(signal.SIGCONT)
    resumed_at = time.time()
    seen: list[dict[str, Any]] = []

    def points_at_third() -> bool:
        back = fleet.status(second)  # raises (and is polled again) until it answers
        seen.append(back["controller"])
        return bool(back["controller"]["leader_url"] == fleet.urls[third])

    # until its next renewal attempt reads the lease row it names no leader, never itself
    wait_for("the old leader to name the new one", points_at_third, deadline=60, interval=0.05)
    assert not any(c["holds_authority"] for c in seen), seen
    assert all(c["leader_url"] in (None, fleet.urls[third]) for c in seen), seen
    ticks = wait_for(
        "two ticks of the resumed controller",
        lambda: (s := fleet.status(second))["now"] > resumed_at + 3 * TICK_SECONDS and s,
        deadline=60,
    )
    assert ticks["mode"]["effective"] != "automatic"
    late = [
        e
        for e in fleet.status(second)["history"]
        if e["at"] >= resumed_at and e["event"] in ("issued", "delivered")
    ]
    assert late == []  # the resumed controller issued and delivered nothing

    # --- PostgreSQL restart under the running fleet ----------------------------------------
    pg_cluster.stop()
    down = wait_for(
        "recommend while the store is unreachable",
        lambda: (s := fleet.status(third))["mode"]["effective"] == "recommend" and s,
        deadline=60,
    )
    assert any("unreachable" in w or "renewal failed" in w for w in down["warnings"])
    assert chat(fleet.urls[third]).strip()  # serving continues
    pg_cluster.start()
    wait_for(
        "automatic again",
        lambda: any(fleet.status(i)["mode"]["effective"] == "automatic" for i in (second, third)),
        deadline=120,
    )
    assert chat(fleet.urls[third]).strip()

    # --- after the fleet stops: every node rejects the old term; nothing ran twice ---------
    fleet.stop()
    replayed, rejected = _replay_rejections(fleet, term + 1, old_id)
    print(f"MEASURED old-term replays rejected: {rejected}/{replayed}")
    assert replayed > 0 and rejected == replayed
    history = fleet.store().history()
    runs = Counter(
        (h.kind.value, h.host_id, h.model_id) for h in history if h.status.value == "succeeded"
    )
    assert max(runs.values()) == 1, runs
