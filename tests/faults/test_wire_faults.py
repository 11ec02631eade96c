"""Wire faults on real processes: a node and the controller talk through a lying relay.

Commands (in heartbeat answers) and acknowledgements (in heartbeat bodies) are
duplicated, reordered and replayed stale by ``relay.py`` between one real node
daemon and the real controller. Every test brings up a new model (another
identity serving the same Gemma file) through the fault and checks: each
action finished once, the controller's record of each action is its first
terminal outcome, nothing ran out of order or under an old term. A second
controller on the same state directory is here too (it needs no engine of its
own).
"""

from __future__ import annotations

import json
import secrets
import signal
import subprocess
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gridctl.node.records import Receipt
from tests.e2e.harness import GEMMA, ROOT, free_port, profile_yaml, wait_for
from tests.faults.fleet import FaultFleet, make_fault_fleet
from tests.faults.relay import Relay, running_relay

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(900)]
HOST = "local-1"
Body = dict[str, Any]


@pytest.fixture(scope="module")
def fleet(
    tmp_path_factory: pytest.TempPathFactory, gemma_cache: Path
) -> Iterator[tuple[FaultFleet, Relay]]:
    # two mutations per host: a heartbeat answer can carry two commands (the reordering drill)
    fleet = make_fault_fleet(tmp_path_factory.mktemp("wire-faults"), per_host=2)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=1, max_replicas=1))
    fleet.repo.commit("one gemma replica")
    try:
        fleet.start_controller()
        with running_relay(fleet.url) as relay:
            node = fleet.add_node(
                HOST, controller_url=relay.url, artifact_dir=gemma_cache, capacity_mb=6400
            )
            node.start()
            bring_up(fleet, GEMMA)
            yield fleet, relay
    except BaseException:
        print(fleet.logs())
        raise
    finally:
        fleet.stop()


@pytest.fixture(autouse=True)
def clean_relay(fleet: tuple[FaultFleet, Relay]) -> Iterator[None]:
    fleet[1].clear()
    yield
    fleet[1].clear()


def add_model(fleet: FaultFleet, model: str) -> None:
    fleet.repo.write(f"{model}.yaml", profile_yaml(model, min_replicas=1, max_replicas=1))
    fleet.repo.commit(f"add {model}")


def bring_up(fleet: FaultFleet, model: str, deadline: float = 240) -> None:
    def done() -> bool:
        pending = [p for p in fleet.status()["pending_commands"] if p["model_id"] == model]
        return fleet.routable(model) == [HOST] and not pending

    try:
        wait_for(f"{model} routable and settled", done, deadline=deadline)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{fleet.logs()}") from exc


def model_actions(fleet: FaultFleet, model: str) -> list[dict[str, Any]]:
    return [a for a in fleet.actions() if a["model_id"] == model]


def terminal_events(fleet: FaultFleet, model: str) -> Counter[str]:
    """Terminal outcomes the controller recorded per action id (its history events)."""
    return Counter(
        e["action_id"]
        for e in fleet.status()["history"]
        if e.get("model_id") == model
        and e.get("action_id")
        and e["event"].endswith(("_succeeded", "_failed", "_rejected", "_cancelled"))
    )


def commands_of(body: Body) -> list[Body]:
    allocator = body.get("allocator")
    if not isinstance(allocator, dict):
        return []
    commands = allocator.get("commands")
    return commands if isinstance(commands, list) else []


def set_commands(body: Body, commands: list[Body]) -> Body:
    body.setdefault("allocator", {})["commands"] = commands
    return body


def test_duplicated_commands_and_acknowledgements(fleet: tuple[FaultFleet, Relay]) -> None:
    """Every command arrives twice in its answer and again in later answers; every
    acknowledgement is sent twice and again in later heartbeats: each action runs once
    and the controller records one outcome for each."""
    f, relay = fleet
    model = "gemma-dup"
    seen_commands: list[Body] = []
    seen_acks: list[Body] = []
    lock = threading.Lock()

    def duplicate_commands(path: str, body: Body) -> Body:
        with lock:
            fresh = commands_of(body)
            seen_commands.extend(c for c in fresh if c not in seen_commands)
            return (
                set_commands(body, fresh + fresh + list(seen_commands)) if seen_commands else body
            )

    def duplicate_acks(path: str, body: Body) -> Body:
        acks = body.get("acknowledgements")
        if not isinstance(acks, list):
            return body
        with lock:
            seen_acks.extend(a for a in acks if a not in seen_acks)
            body["acknowledgements"] = acks + acks + list(seen_acks)
        return body

    relay.on_response, relay.on_request = duplicate_commands, duplicate_acks
    add_model(f, model)
    bring_up(f, model)
    relay.clear()
    actions = model_actions(f, model)
    assert sorted(a["kind"] for a in actions) == ["load", "warm"], actions
    assert {a["state"] for a in actions} == {"succeeded"}
    assert len(seen_commands) == 2 and len(seen_acks) >= 2  # the relay did duplicate
    events = terminal_events(f, model)
    assert set(events) == {a["action_id"] for a in actions} and max(events.values()) == 1, events
    f.assert_no_command_ran_twice()


def test_reordered_commands_and_acknowledgements(fleet: tuple[FaultFleet, Relay]) -> None:
    """Two models at once on one host (two mutations per host, so answers carry two
    commands): each answer's commands arrive in reverse order, and every
    acknowledgement that is not terminal is held back and delivered only after the
    action's terminal one (a late "running" after "succeeded"): both converge, each
    model's load and warm run once (a command reversed behind one of a later plan
    generation is refused by the node's fence, never runs, and is issued again), and no
    action's recorded outcome goes back to running."""
    f, relay = fleet
    models = ("gemma-r1", "gemma-r2")
    held: dict[str, Body] = {}
    late: list[str] = []
    replayed: list[str] = []  # of ``late``, the progress acks the node never sent
    reversed_answers: list[int] = []
    lock = threading.Lock()

    def reverse(path: str, body: Body) -> Body:
        commands = commands_of(body)
        if len(commands) > 1:
            reversed_answers.append(len(commands))
        return set_commands(body, commands[::-1]) if commands else body

    def hold_progress(path: str, body: Body) -> Body:
        acks = body.get("acknowledgements")
        if not isinstance(acks, list):
            return body
        out = []
        with lock:
            for ack in acks:
                action = str(ack.get("action_id"))
                if ack.get("status") in ("accepted", "running"):
                    held[action] = ack  # not yet
                    continue
                out.append(ack)
                if action in late:
                    continue  # a terminal one sent again: its progress already came late
                # the terminal one goes first, then the stale progress; an action that ran
                # between two heartbeats reported none, so the relay replays the one the
                # node writes when it starts running (as a delayed packet would arrive)
                progress = held.pop(action, None)
                if progress is None:
                    replayed.append(action)
                    progress = Receipt(action, "", "", "running", "running").acknowledgement()
                out.append(progress)
                late.append(action)
        body["acknowledgements"] = out
        return body

    relay.on_response, relay.on_request = reverse, hold_progress
    for model in models:
        f.repo.write(f"{model}.yaml", profile_yaml(model, min_replicas=1, max_replicas=1))
    f.repo.commit("two models at once")
    for model in models:
        bring_up(f, model)
    relay.clear()
    for model in models:
        actions = model_actions(f, model)
        ran = sorted(a["kind"] for a in actions if a["state"] == "succeeded")
        assert ran == ["load", "warm"], json.dumps(actions, indent=1)
        # a command reversed behind one of a later plan generation is refused by the
        # node's generation fence (it never runs) and issued again
        others = {a["state"] for a in actions if a["state"] != "succeeded"}
        assert others <= {"rejected"}, json.dumps(actions, indent=1)
    assert reversed_answers, "no answer carried two commands to reverse"
    ran = {a["action_id"] for m in models for a in model_actions(f, m) if a["state"] == "succeeded"}
    assert ran <= set(late), (ran, late)  # every action's progress came after its outcome
    f.assert_no_command_ran_twice()
    print(
        f"reversed answers: {reversed_answers}; late progress acks: {len(late)}, "
        f"{len(late) - len(replayed)} of them held back from the node"
    )


def test_stale_commands_and_acknowledgements(fleet: tuple[FaultFleet, Relay]) -> None:
    """Long after they ran, the old commands are delivered again, the old term's
    commands arrive under fresh ids after a controller restart, and stale
    acknowledgements claim the finished warm failed: the node runs nothing again and
    rejects the old term, the controller keeps the first outcome and the model serves."""
    f, relay = fleet
    model = "gemma-stale"
    add_model(f, model)
    bring_up(f, model)
    old = [dict(c) for c in relay.seen_commands if c.get("model_id") == model]
    assert sorted(c["kind"] for c in old) == ["load", "warm"]
    old_term = int(old[0]["controller_term"])
    node = f.nodes[HOST]
    before = node.receipts()

    # 1. the same commands again, and a forged late failure of the warm
    warm = next(c for c in old if c["kind"] == "warm")
    replays: list[int] = []

    def replay_old(path: str, body: Body) -> Body:
        if not (path.endswith("/heartbeat") and "allocator" in body):
            return body
        replays.append(1)
        return set_commands(body, commands_of(body) + old)

    def stale_acks(path: str, body: Body) -> Body:
        if isinstance(body.get("acknowledgements"), list):
            body["acknowledgements"] += [
                {"action_id": warm["action_id"], "status": "failed", "message": "stale"},
                {"action_id": old[0]["action_id"], "status": "running", "message": "stale"},
            ]
        return body

    relay.on_response, relay.on_request = replay_old, stale_acks
    wait_for("five stale answers", lambda: len(replays) >= 5, deadline=60)
    relay.clear()
    assert {a["state"] for a in model_actions(f, model)} == {"succeeded"}
    assert node.receipts() == before  # nothing new ran or was recorded
    assert f.routable(model) == [HOST]

    # 2. the controller restarts (a new term) and the node runs a command of it; then the
    #    old term's commands come back under new ids, as a late answer of the old term
    f.kill_controller()
    f.start_controller()
    wait_for(
        "the new term",
        lambda: (c := f.status()["controller"])["holds_authority"] and c["term"] > old_term,
        deadline=60,
    )
    forged = [{**c, "action_id": "replay-" + secrets.token_hex(8), "dependencies": []} for c in old]
    sent: list[int] = []

    def inject_forged(path: str, body: Body) -> Body:
        commands = commands_of(body)
        if "allocator" in body and body["allocator"].get("controller_lease_ttl_seconds"):
            sent.append(1)
            return set_commands(body, commands + forged)
        return body

    wait_for("the node back on the new term", lambda: f.routable(model) == [HOST], deadline=60)
    add_model(f, model + "-b")  # the node admits commands of the new term
    bring_up(f, model + "-b")
    relay.on_response = inject_forged
    try:
        wait_for(
            "the forged commands refused",
            lambda: all(
                node.receipts().get(c["action_id"], {}).get("reason") == "stale_term"
                for c in forged
            ),
            deadline=60,
        )
    except AssertionError as exc:
        mine = {a: r for a, r in node.receipts().items() if a.startswith("replay-")}
        raise AssertionError(f"{exc}: sent {len(sent)}, receipts {mine}") from exc
    relay.clear()
    assert {r["status"] for a, r in node.receipts().items() if a.startswith("replay-")} == {
        "rejected"
    }
    bring_up(f, model)
    f.assert_no_command_ran_twice()


def test_two_controllers_on_one_state_directory(fleet: tuple[FaultFleet, Relay]) -> None:
    """A second controller process on the same state directory and desired state never
    holds authority while the first renews it, issues and delivers nothing, and writes
    no action; the first keeps its term; killing the second changes nothing."""
    f, _relay = fleet
    first = f.status()["controller"]
    assert first["holds_authority"]
    before = f.actions()
    port = free_port()
    log = (f.root / "controller-b.log").open("ab")
    second = subprocess.Popen(
        f.controller_argv(port), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT
    )
    f.extra_controllers.append(second)
    url = f"http://127.0.0.1:{port}"
    import httpx

    def status_b() -> Body:
        answer = httpx.get(url + "/allocator/status", timeout=15)
        answer.raise_for_status()
        data: Body = answer.json()
        return data

    try:
        started = wait_for("the second controller", status_b, deadline=90)
        wait_for(
            "five ticks of the second controller",
            lambda: (s := status_b())["last_tick"] and s["last_tick"]["at"] > started["now"] + 5,
            deadline=90,
        )
        b = status_b()
        assert not b["controller"]["holds_authority"]
        assert b["mode"]["effective"] != "automatic"
        assert [e for e in b["history"] if e["event"] in ("issued", "delivered")] == []
        now = f.status()["controller"]
        assert now["holds_authority"] and now["term"] == first["term"]
        assert now["controller_id"] == first["controller_id"]
        assert f.actions() == before
        print(json.dumps({"second": b["controller"], "warnings": b["warnings"][:3]}))
    finally:
        second.send_signal(signal.SIGKILL)
        second.wait(timeout=30)
    after = f.status()["controller"]
    assert after["holds_authority"] and after["term"] == first["term"]
    bring_up(f, GEMMA)
