"""Node faults on real processes: one `gridctl controller`, two node daemons, Gemma engines.

The module shares one fleet; every test starts from one routable replica and a
steady clock. Each test injects one fault into a node daemon or its engine
child and checks the invariants afterwards: no command ran twice, the healthy
last replica (its engine process, by pid and birth time) survived, and the fleet
converged back without a second engine on any host.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.e2e.harness import GEMMA, profile_yaml, wait_for
from tests.faults.fleet import FaultFleet, Node, make_fault_fleet, read_only

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]
HOSTS = ("local-1", "local-2")
STALE_SECONDS = 6.0


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory, gemma_cache: Path) -> Iterator[FaultFleet]:
    fleet = make_fault_fleet(tmp_path_factory.mktemp("node-faults"), stale=STALE_SECONDS)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    fleet.repo.commit("one gemma replica")
    try:
        fleet.start_controller()
        for host in HOSTS:
            env = {**os.environ, "GRIDCTL_CLOCK_OFFSET_FILE": str(fleet.root / f"{host}.offset")}
            fleet.add_node(host, artifact_dir=gemma_cache, env=env).start()
        yield fleet
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.stop()


def converge(fleet: FaultFleet, replicas: int, deadline: float = 240) -> None:
    def done() -> bool:
        pending = [p for p in fleet.status()["pending_commands"] if p["model_id"] == GEMMA]
        engines = sum(len(p) for p in fleet.engines().values())
        return len(fleet.routable()) == replicas and not pending and engines == replicas

    try:
        wait_for(f"{replicas} routable replica(s), settled", done, deadline=deadline)
    except AssertionError as exc:
        seen = {
            "routable": fleet.routable(),
            "engines": fleet.engines(),
            "pending": fleet.status()["pending_commands"],
            "residencies": fleet.residencies(),
        }
        raise AssertionError(f"{exc}\n{seen}\n{fleet.logs()}") from exc


def scale(fleet: FaultFleet, replicas: int) -> str:
    profile = profile_yaml(GEMMA, min_replicas=replicas, max_replicas=replicas)
    fleet.repo.write("gemma.yaml", profile)
    return fleet.repo.commit(f"{replicas} gemma replica(s)")


def engines_by_host(fleet: FaultFleet) -> dict[str, tuple[int, float]]:
    found = fleet.engines()
    assert all(len(p) == 1 for p in found.values()), found
    return {host: pids[0] for host, pids in found.items()}


def alive(engine: tuple[int, float]) -> bool:
    try:
        proc = psutil.Process(engine[0])
        same = abs(proc.create_time() - engine[1]) < 0.01
        return same and proc.status() != psutil.STATUS_ZOMBIE  # a zombie is dead
    except psutil.Error:
        return False


def residency_state(node: Node) -> str | None:
    try:
        with contextlib.closing(read_only(node.database)) as conn:
            row = conn.execute(
                "SELECT state FROM residencies WHERE model_id = ?", (GEMMA,)
            ).fetchone()
    except sqlite3.Error:
        return None
    return None if row is None else str(row[0])


@pytest.fixture(autouse=True)
def steady(fleet: FaultFleet) -> Iterator[None]:
    for node in fleet.nodes.values():
        (fleet.root / f"{node.host_id}.offset").write_text("0")
        if node.proc is None or node.proc.poll() is not None:
            node.start()
        else:
            node.proc.send_signal(signal.SIGCONT)
    scale(fleet, 1)
    converge(fleet, 1)
    yield


def test_sigkill_engine_child(fleet: FaultFleet) -> None:
    """The engine dies: the node reports it failed, the controller starts a new one with
    a new action (the old warm is never re-run), and the model serves again."""
    (host, engine), *_ = engines_by_host(fleet).items()
    warmed = {a["action_id"] for a in fleet.actions() if a["kind"] == "warm"}
    os.kill(engine[0], signal.SIGKILL)
    wait_for(
        "the failure reported",
        lambda: all(r["state"] != "ready" or not r.get("routable") for r in fleet.residencies()),
        deadline=60,
        interval=0.1,
    )
    converge(fleet, 1)
    (new_host, new_engine), *_ = engines_by_host(fleet).items()
    assert new_engine != engine and not alive(engine)
    again = [a for a in fleet.actions() if a["kind"] == "warm" and a["action_id"] not in warmed]
    assert [a["state"] for a in again] == ["succeeded"], again
    fleet.assert_no_command_ran_twice()
    assert fleet.chat().strip()
    print(f"engine {engine[0]} on {host} killed; {new_engine[0]} serves on {new_host}")


def test_sigkill_node_mid_drain(fleet: FaultFleet) -> None:
    """Scaling 2 -> 1, the node holding the copy being drained is SIGKILLed while it
    reports draining: the other (the last healthy replica) is never drained, the
    restarted node adopts its child and the unload completes once."""
    scale(fleet, 2)
    converge(fleet, 2)
    before = engines_by_host(fleet)
    earlier = {a["action_id"] for a in fleet.actions()}
    scale(fleet, 1)
    draining = wait_for(
        "a copy draining",
        lambda: next((n for n in fleet.nodes.values() if residency_state(n) == "draining"), None),
        deadline=120,
        interval=0.02,
    )
    draining.kill()
    (survivor,) = set(before) - {draining.host_id}
    assert alive(before[survivor]) and alive(before[draining.host_id])  # the child outlives it
    draining.start()
    converge(fleet, 1)
    assert engines_by_host(fleet) == {survivor: before[survivor]}  # never lost
    destructive = [
        a
        for a in fleet.actions()
        if a["kind"] in ("drain", "unload") and a["action_id"] not in earlier
    ]
    assert {a["host_id"] for a in destructive} == {draining.host_id}, destructive
    fleet.assert_no_command_ran_twice()
    done = Counter(a["kind"] for a in destructive if a["state"] == "succeeded")
    assert done["unload"] >= 1


def test_dropped_heartbeats_node_paused_past_stale(fleet: FaultFleet) -> None:
    """The serving node's daemon is frozen past the stale threshold: its copy stops
    counting, the controller replaces it on the other host without touching it (its
    engine keeps running), and after SIGCONT the surplus copy goes, one replica always
    alive."""
    ((host, engine),) = engines_by_host(fleet).items()
    (other,) = set(HOSTS) - {host}
    node = fleet.nodes[host]
    earlier = {a["action_id"] for a in fleet.actions()}  # earlier drills' drains stay out
    node.signal(signal.SIGSTOP)
    try:
        wait_for(
            "the host stale",
            lambda: (h := fleet.host(host)) is not None and h["stale"],
            deadline=60,
        )
        wait_for("a replacement routable", lambda: fleet.routable() == [other], deadline=180)
        assert alive(engine)
        touched = [
            a
            for a in fleet.actions()
            if a["host_id"] == host and a["delivered_at"] and a["action_id"] not in earlier
        ]
        assert all(a["kind"] in ("load", "warm") for a in touched)  # nothing destructive
    finally:
        node.signal(signal.SIGCONT)
    samples: list[int] = []

    def settled() -> bool:
        samples.append(sum(alive(e) for e in engines_by_host(fleet).values()))
        pending = [p for p in fleet.status()["pending_commands"] if p["model_id"] == GEMMA]
        return len(fleet.routable()) == 1 and not pending and len(fleet.engines()) == 1

    wait_for("one replica again", settled, deadline=240)
    assert min(samples) >= 1  # a live copy at every sample
    fleet.assert_no_command_ran_twice()


def test_corrupt_node_database(fleet: FaultFleet) -> None:
    """The serving node is SIGKILLed and its database corrupted: the restarted node
    quarantines it and starts clean, stops the engine child no record names any more
    (instead of leaving it holding memory and a port beside the next engine), and the
    fleet converges to one replica."""
    ((host, engine),) = engines_by_host(fleet).items()
    node = fleet.nodes[host]
    node.kill()
    with node.database.open("r+b") as db:
        db.write(b"this is not a database" * 8)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.truncate(node.database.with_name(node.database.name + suffix), 0)
    node.start()
    wait_for(
        "the quarantine",
        lambda: [p for p in node.state_dir.glob("node.sqlite3.invalid-*") if "-wal" not in p.name],
        deadline=60,
    )
    wait_for(
        "the orphaned engine stopped",
        lambda: (
            f"orphaned engine pid {engine[0]} ({GEMMA}) has no record: stopped"
            in node.log.read_text()
        ),
        deadline=60,
    )
    assert not alive(engine)  # not left holding memory beside the engine started next
    converge(fleet, 1)
    assert sum(len(p) for p in fleet.engines().values()) == 1
    fleet.assert_no_command_ran_twice()


@pytest.mark.parametrize("offset", [3600.0, -3600.0], ids=["plus-1h", "minus-1h"])
def test_node_wall_clock_jump(fleet: FaultFleet, offset: float) -> None:
    """Both nodes' wall clocks step an hour: commands are admitted on the monotonic TTL
    (no valid command refused), a scale-up and back converge, each action once, and
    the serving replica is untouched."""
    ((host, engine),) = engines_by_host(fleet).items()
    for other in HOSTS:  # the scale-down may keep either copy: both were healthy
        (fleet.root / f"{other}.offset").write_text(repr(offset))
    wait_for(
        "the nodes' heartbeats under the stepped clock",
        lambda: all((h := fleet.host(n)) is not None and not h["stale"] for n in HOSTS),
        deadline=30,
    )
    before = {a["action_id"] for a in fleet.actions()}
    scale(fleet, 2)
    converge(fleet, 2)
    both = engines_by_host(fleet)
    assert both[host] == engine
    scale(fleet, 1)
    converge(fleet, 1)
    ((kept, survivor),) = engines_by_host(fleet).items()
    assert both[kept] == survivor  # one of the two copies kept running throughout
    new = [a for a in fleet.actions() if a["action_id"] not in before]
    assert {a["state"] for a in new} == {"succeeded"}, new
    for node in fleet.nodes.values():
        refused = [r for r in node.receipts().values() if r["status"] == "rejected"]
        assert refused == [], refused
    fleet.assert_no_command_ran_twice()
