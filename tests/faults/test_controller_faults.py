"""Controller faults on real processes: one `gridctl controller`, two node daemons, Gemma.

The fleet is shared by the module (each test starts from one routable replica and
leaves it so); the nodes reach the controller through a relay (``relay.py``) that
is transparent unless a test makes it lose a response. Each test injects one
fault and then checks the spec's invariants: no command ran twice, the healthy
last replica (its engine process, by pid and birth time) survived, nothing was
half-applied.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.credentials import (
    NODE_TOKEN_HEADER,
    OPERATOR_TOKEN_HEADER,
    issue_node_credential,
    load_or_create_signing_key,
)
from tests.e2e.harness import GEMMA, profile_yaml, wait_for
from tests.faults.fleet import FaultFleet, make_fault_fleet
from tests.faults.relay import DropResponse, Relay, running_relay

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, gemma_cache: Path
) -> Iterator[tuple[FaultFleet, Relay]]:
    fleet = make_fault_fleet(tmp_path_factory.mktemp("controller-faults"))
    fleet.controller_env["GRIDCTL_CLOCK_OFFSET_FILE"] = str(fleet.root / "controller.offset")
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    fleet.repo.commit("one gemma replica")
    try:
        fleet.start_controller()
        with running_relay(fleet.url) as relay:
            for host in ("local-1", "local-2"):
                fleet.add_node(host, controller_url=relay.url, artifact_dir=gemma_cache).start()
            converge(fleet, 1)
            yield fleet, relay
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.stop()


def converge(fleet: FaultFleet, replicas: int, deadline: float = 240) -> None:
    """Wait until ``replicas`` copies are routable, nothing is pending, and exactly that
    many engines run."""

    def done() -> bool:
        status = fleet.status()
        pending = [p for p in status["pending_commands"] if p["model_id"] == GEMMA]
        engines = sum(len(p) for p in fleet.engines().values())
        return len(fleet.routable()) == replicas and not pending and engines == replicas

    try:
        wait_for(f"{replicas} routable replica(s), settled", done, deadline=deadline)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{decision(fleet)}\n{fleet.logs()}") from exc


def decision(fleet: FaultFleet) -> str:
    """What the controller last decided for the model, and the times it decided with:
    the target and its reasons, every proposed action and why it is held, and each
    residency's times beside the controller's clock."""
    try:
        status = fleet.status()
    except Exception as exc:  # the controller may be what is stuck
        return f"== status unavailable: {exc}"
    plan = status.get("plan") or {}
    rows = {
        "now": status.get("now"),
        "targets": plan.get("targets"),
        "assignments": plan.get("assignments"),
        "unsatisfied": plan.get("unsatisfied"),
        "model": [m for m in status.get("models") or () if m.get("model_id") == GEMMA],
        "reconciliation": status.get("reconciliation"),
        "last_tick": status.get("last_tick"),
        "revisions": status.get("revisions"),
        "delivery_safety_error": status.get("delivery_safety_error"),
        "warnings": status.get("warnings"),
        "pending": status.get("pending_commands"),
        "withdrawn": status.get("withdrawn_destructive"),
        "residencies": {
            h["host_id"]: [
                {k: r.get(k) for k in ("state", "loaded_at", "last_used_at", "routable")}
                for r in h["residencies"]
            ]
            for h in status.get("hosts") or ()
        },
    }
    return "== controller decision\n" + json.dumps(rows, indent=1, default=str)[:20000]


def scale(fleet: FaultFleet, replicas: int) -> str:
    fleet.repo.write(
        "gemma.yaml", profile_yaml(GEMMA, min_replicas=replicas, max_replicas=replicas)
    )
    return fleet.repo.commit(f"{replicas} gemma replica(s)")


def the_engine(fleet: FaultFleet) -> tuple[str, tuple[int, float]]:
    (host, (engine,)), *rest = fleet.engines().items()
    assert rest == []
    return host, engine


def alive(engine: tuple[int, float]) -> bool:
    import psutil

    try:
        proc = psutil.Process(engine[0])
        same = abs(proc.create_time() - engine[1]) < 0.01
        return same and proc.status() != psutil.STATUS_ZOMBIE  # a zombie is dead
    except psutil.Error:
        return False


def log_after(path: Path, marker: str, needle: str) -> bool:
    text = path.read_text(errors="replace")
    at = text.find(marker)
    return at >= 0 and needle in text[at:]


@contextlib.contextmanager
def write_lock(database: Path) -> Iterator[sqlite3.Connection]:
    """Hold the controller database's write lock, as a second writer process would."""
    conn = sqlite3.connect(database, timeout=30, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    finally:
        conn.execute("ROLLBACK")
        conn.close()


def status_hangs(fleet: FaultFleet) -> bool:
    """The controller's store is held by a writer that waits for the lock (every store
    read queues behind it), so a status request does not answer within 3 s."""
    try:
        fleet.status(timeout=3)
    except httpx.TimeoutException:
        return True
    return False


def restore(fleet: FaultFleet, relay: Relay) -> None:
    """Back to the steady state every test starts from: the controller running in
    automatic mode, no relay fault, one routable replica."""
    relay.clear()
    (fleet.root / "controller.offset").write_text("0")
    if fleet.controller is None or fleet.controller.poll() is not None:
        fleet.start_controller()
    else:
        fleet.controller.send_signal(signal.SIGCONT)
    if fleet.status()["mode"]["override"] is not None:
        clear_mode(fleet)
    scale(fleet, 1)
    converge(fleet, 1)
    # a clock moved back to the truth lands past the lease's expiry: automatic returns
    # at the next renewal (a third of the lease), not at once
    wait_for(
        "the controller in automatic mode",
        lambda: fleet.status()["mode"]["effective"] == "automatic",
        deadline=60,
    )


def clear_mode(fleet: FaultFleet) -> None:
    cleared = httpx.put(
        fleet.url + "/allocator/mode",
        json={"clear": True},
        headers={OPERATOR_TOKEN_HEADER: fleet.token},
        timeout=30,
    )
    assert cleared.status_code == 200, cleared.text


@pytest.fixture(autouse=True)
def steady(fleet: tuple[FaultFleet, Relay]) -> Iterator[None]:
    restore(*fleet)
    yield
    fleet[1].clear()


# --- SIGKILL mid-tick -----------------------------------------------------------------


def test_sigkill_controller_mid_tick(fleet: tuple[FaultFleet, Relay]) -> None:
    """Killed while a tick that planned a new replica waits to persist it: nothing of
    that tick is in the store, and after the restart the replica is issued once."""
    f, _relay = fleet
    host, engine = the_engine(f)
    before = {a["action_id"]: a["state"] for a in f.actions()}
    with write_lock(f.database) as held:
        revision = scale(f, 2)
        wait_for(
            "the new revision in force",
            lambda: log_after(
                f.controller_log, f"desired revision {revision} in force", "in force"
            ),
            deadline=60,
        )
        # a tick on the new revision reached its first write and was refused...
        wait_for(
            "a tick blocked on the store",
            lambda: log_after(f.controller_log, revision, "tick failed"),
            deadline=60,
        )
        # ... and the next one (begun after the revision was in force) is blocked now
        wait_for("the next tick blocked mid-way", lambda: status_hangs(f), deadline=60)
        f.kill_controller()
        rows = held.execute("SELECT action_id, state FROM actions").fetchall()
    assert dict(rows) == before  # nothing of the killed tick was persisted
    assert alive(engine)
    f.start_controller()
    converge(f, 2)
    f.assert_no_command_ran_twice()
    assert alive(engine)  # the first replica was never touched
    new = [a for a in f.actions() if a["action_id"] not in before]
    assert sorted(a["kind"] for a in new) == ["load", "warm"], new
    assert {a["host_id"] for a in new} == {"local-1", "local-2"} - {host}


# --- SIGKILL mid-delivery -------------------------------------------------------------


def test_sigkill_controller_mid_delivery(fleet: tuple[FaultFleet, Relay]) -> None:
    """Killed after it durably marked a command delivered and built the response, before
    the node got it: the restarted controller delivers the same action again, and it
    runs exactly once."""
    f, relay = fleet
    _host, engine = the_engine(f)
    lost: list[dict[str, Any]] = []
    paths: list[str] = []

    def lose_and_kill(path: str, body: dict[str, Any]) -> None:
        commands = (body.get("allocator") or {}).get("commands") or []
        if commands and not lost:
            lost.extend(commands)
            paths.append(path)
            f.kill_controller()
            raise DropResponse

    relay.on_answer = lose_and_kill
    scale(f, 2)
    wait_for("a delivery lost with the controller", lambda: lost, deadline=120, interval=0.1)
    relay.clear()
    marked = {a["action_id"]: a for a in f.actions()}
    for command in lost:  # the marker was durable before the response left
        assert marked[command["action_id"]]["delivered_at"] is not None
    target = f.nodes[paths[0].split("/")[2]]  # /nodes/{host}/heartbeat
    assert not set(target.receipts()) & {c["action_id"] for c in lost}  # the node never saw it
    f.start_controller()
    converge(f, 2)
    receipts = target.receipts()
    for command in lost:  # redelivered under the same id after the restart, run once
        assert receipts[command["action_id"]]["status"] == "succeeded", receipts
    f.assert_no_command_ran_twice()
    assert alive(engine)


# --- SIGSTOP past the lease -----------------------------------------------------------


def test_sigstop_controller_past_its_lease(fleet: tuple[FaultFleet, Relay]) -> None:
    """Frozen with a command issued but not delivered, for longer than its lease: on
    SIGCONT it renews before delivering, the node admits the command within a valid
    authority, and it runs once."""
    f, relay = fleet
    _host, engine = the_engine(f)
    held: list[str] = []

    def hold(path: str, body: dict[str, Any]) -> dict[str, Any]:
        allocator = body.get("allocator") or {}
        if allocator.get("commands"):
            held.extend(c["action_id"] for c in allocator["commands"])
            allocator["commands"] = []  # delivered by the controller, lost on the way
        return body

    relay.on_response = hold
    scale(f, 2)
    wait_for("a delivered command", lambda: held, deadline=120, interval=0.1)
    assert f.controller is not None
    expires = f.status()["controller"]["lease_expires_at"]
    f.controller.send_signal(signal.SIGSTOP)
    try:
        relay.clear()
        wait_for(
            "the lease to run out while frozen",
            lambda: time.time() > expires + 2 * f.lease_seconds,
            deadline=60,
        )
    finally:
        f.controller.send_signal(signal.SIGCONT)
    converge(f, 2)
    f.assert_no_command_ran_twice()
    for node in f.nodes.values():
        refused = [r for r in node.receipts().values() if r["status"] == "rejected"]
        assert all(r["reason"] in ("expired_ttl", "stale_term") for r in refused), refused
    events = [e["event"] for e in f.status()["history"]]
    assert "authority_acquired" in events or f.status()["controller"]["holds_authority"]
    assert alive(engine)


# --- a corrupt controller database ----------------------------------------------------


def test_corrupt_controller_database(fleet: tuple[FaultFleet, Relay]) -> None:
    """A corrupt store is quarantined; the controller starts clean in recommend mode with
    a visible warning, issues nothing, and the serving replica stays; clearing the
    override converges without reloading what already runs."""
    f, _relay = fleet
    host, engine = the_engine(f)
    f.kill_controller()
    f.remember_issued()  # what the old store issued, for the invariants below
    with f.database.open("r+b") as db:
        db.write(b"this is not a database" * 8)
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.truncate(f.database.with_name(f.database.name + suffix), 0)
    f.start_controller()
    status = f.status()
    assert status["mode"]["effective"] == "recommend", status["mode"]
    assert any("corrupt" in w and "moved to" in w for w in status["warnings"]), status["warnings"]
    moved = [
        p
        for p in f.state.glob("controller.sqlite3.invalid-*")
        if not p.name.endswith(("-wal", "-shm"))
    ]
    assert len(moved) == 1 and moved[0].read_bytes().startswith(b"this is not a database")
    wait_for("the node's replica reported again", lambda: f.routable() == [host], deadline=60)
    assert f.chat().strip()
    ticks = wait_for(
        "three ticks in recommend",
        lambda: (s := f.status())["last_tick"] and s["last_tick"]["at"] > status["now"] + 3 and s,
        deadline=60,
    )
    assert ticks["pending_commands"] == [] or all(
        p["kind"] not in ("drain", "unload") for p in ticks["pending_commands"]
    )
    assert [a for a in f.actions() if a["delivered_at"] is not None] == []  # issued nothing
    clear_mode(f)
    wait_for("automatic", lambda: f.status()["mode"]["effective"] == "automatic", deadline=60)
    converge(f, 1)
    assert alive(engine)  # the running replica was adopted, not reloaded
    assert [a for a in f.actions() if a["kind"] in ("load", "warm")] == []


# --- an invalid commit during convergence ---------------------------------------------


def test_invalid_commit_during_convergence(fleet: tuple[FaultFleet, Relay]) -> None:
    """A broken commit while a scale-up converges is rejected whole, with file, line and
    field; the last good revision stays in force and converges; the next good commit
    is picked up."""
    f, _relay = fleet
    _host, engine = the_engine(f)
    good = scale(f, 2)
    wait_for(
        "the scale-up in flight",
        lambda: any(p["model_id"] == GEMMA for p in f.status()["pending_commands"]),
        deadline=60,
        interval=0.1,
    )
    f.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=3, max_replicas=2))
    f.repo.write("broken.yaml", "apiVersion: gridctl/v1\nkind: ModelProfile\nmetadata: [\n")
    bad = f.repo.commit("a broken commit")
    desired = wait_for(
        "the rejection",
        lambda: (d := f.status()["desired"])["rejected_revision"] == bad and d,
        deadline=60,
    )
    assert desired["revision"] == good
    text = " ".join(str(e) for e in desired["rejected"])
    assert "broken.yaml" in text, desired["rejected"]
    converge(f, 2)  # the good revision converged under the rejected one
    profile = next(p for p in f.status()["profiles"] if p["name"] == GEMMA)
    assert (profile["min_replicas"], profile["max_replicas"]) == (2, 2)  # nothing half-applied
    f.repo.remove("broken.yaml")
    fixed = scale(f, 1)
    wait_for("the next good commit", lambda: f.status()["desired"]["revision"] == fixed)
    converge(f, 1)
    f.assert_no_command_ran_twice()
    assert alive(engine) or len(f.routable()) == 1


# --- wall-clock jumps -----------------------------------------------------------------


def serve_on(fleet: FaultFleet, host: str) -> None:
    """Move the one replica to ``host`` (pinned there until it serves alone, then
    unpinned), so a drill can start from either host."""
    if set(fleet.engines()) == {host}:
        return
    pinned = profile_yaml(GEMMA, min_replicas=1, max_replicas=1, extra=f"  pins: [{host}]\n")
    fleet.repo.write("gemma.yaml", pinned)
    fleet.repo.commit(f"gemma pinned to {host}")
    wait_for(
        f"the replica to serve from {host} alone",
        lambda: set(fleet.engines()) == {host} and fleet.routable() == [host],
        deadline=240,
    )
    converge(fleet, 1)
    scale(fleet, 1)  # unpinned: the replica stays where it is
    converge(fleet, 1)


@pytest.mark.parametrize("start", ["local-1", "local-2"])
@pytest.mark.parametrize("offset", [3600.0, -3600.0], ids=["plus-1h", "minus-1h"])
def test_controller_wall_clock_jump(
    fleet: tuple[FaultFleet, Relay], offset: float, start: str
) -> None:
    """The controller's wall clock steps an hour: hosts do not go stale or future for
    good, the serving replica stays (whichever host it is on: a scale-down keeps the
    longest-loaded replica), and a scale-up and back still converge, each action once."""
    f, _relay = fleet
    serve_on(f, start)
    host, engine = the_engine(f)
    assert host == start
    (other,) = {"local-1", "local-2"} - {host}
    offset_file = f.root / "controller.offset"
    offset_file.write_text(repr(offset))
    try:
        wait_for(
            "the controller's clock to move",
            lambda: abs(f.status()["now"] - time.time() - offset) < 60,
            deadline=30,
        )
        before = {a["action_id"] for a in f.actions()}
        scale(f, 2)
        converge(f, 2)
        scale(f, 1)
        converge(f, 1)
        assert alive(engine)
        new = [a for a in f.actions() if a["action_id"] not in before]
        done = Counter((a["kind"], a["host_id"]) for a in new if a["state"] == "succeeded")
        said = "\n".join(json.dumps(a, default=str) for a in new) + "\n" + decision(f)
        assert done[("warm", other)] == 1 and done[("drain", other)] == 1, said
        assert done[("unload", other)] == 1 and max(done.values()) == 1, said
        assert {a["host_id"] for a in new} == {other}, said  # the serving host untouched
        f.assert_no_command_ran_twice()
    finally:
        offset_file.write_text("0")
    converge(f, 1)


# --- credentials ----------------------------------------------------------------------


def test_expired_and_wrong_host_credentials(fleet: tuple[FaultFleet, Relay]) -> None:
    """An expired node credential, another host's credential, no credential and a node
    credential on an operator route are all refused with 401/403, and none of them
    changes any state; a node daemon started with an expired credential stops with a
    clear error and never registers."""

    f, relay = fleet
    _host, engine = the_engine(f)
    key = load_or_create_signing_key(f.state)
    now = time.time()
    expired = issue_node_credential(key, "local-1", now=now - 7200, ttl_seconds=3600)
    other = issue_node_credential(key, "local-2", now=now)
    before_actions = f.actions()
    before_hosts = {h["host_id"]: h["residencies"] for h in f.status()["hosts"]}
    lie = {
        "node_id": "local-1",
        "load": {"active_tasks": 0, "queue_depth": 0},
        "resources": {},
        "allocator": {"state": "quarantined", "residencies": []},
        "request_commands": True,
        "acknowledgements": [
            {"action_id": a["action_id"], "status": "failed", "message": "forged"}
            for a in before_actions
        ],
    }
    attempts = {
        "expired": {NODE_TOKEN_HEADER: expired},
        "wrong host": {NODE_TOKEN_HEADER: other},
        "none": {},
    }
    for name, headers in attempts.items():
        for method, path in (("POST", "/nodes/local-1/heartbeat"), ("PUT", "/nodes/local-1")):
            answer = httpx.request(method, f.url + path, json=lie, headers=headers, timeout=30)
            assert answer.status_code in (401, 403), (name, path, answer.status_code, answer.text)
            assert "error" in answer.json() or "detail" in answer.json(), answer.text
    mode = httpx.put(
        f.url + "/allocator/mode",
        json={"mode": "observe"},
        headers={NODE_TOKEN_HEADER: other},
        timeout=30,
    )
    assert mode.status_code in (401, 403), mode.text
    assert httpx.put(
        f.url + "/allocator/mode", json={"mode": "observe"}, timeout=30
    ).status_code in (
        401,
        403,
    )
    # nothing changed: actions, hosts' reported residencies, mode
    assert f.actions() == before_actions
    status = f.status()
    assert status["mode"]["effective"] == "automatic"
    assert {h["host_id"]: h["residencies"] for h in status["hosts"]}.keys() == before_hosts.keys()
    assert f.host("local-1")["state"] != "quarantined"  # type: ignore[index]
    # a real node daemon with an expired credential keeps retrying, never registered
    token = issue_node_credential(key, "local-3", now=now - 7200, ttl_seconds=3600)
    node = f.add_node("local-3", controller_url=relay.url, token=token)
    node.start()
    try:
        wait_for(
            "the node's refusal",
            lambda: re.search(r"registration refused: HTTP 401", node.log.read_text()),
            deadline=90,
        )
        assert f.host("local-3") is None
    finally:
        node.kill()
        del f.nodes["local-3"]
    assert alive(engine)
