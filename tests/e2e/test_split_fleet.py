"""A model no host can hold runs split across three machines, each its own namespace.

Each host offers 550 MB, less than the Gemma profile's 640 MB plus the admission
headroom, so no host can hold a whole replica; together they can. A commit makes the
profile splittable: the planner places a 3-stage split, the controller claims each stage
(a fenced ``split_claim``), each stage host starts its ``ggml-rpc-server`` on loopback
behind a mutual-TLS tunnel on its advertised address and reports it, and after the
startup quorum the coordinator host warms ``llama-server --rpc`` through its forwarders.
The router serves it as one replica: the official ``openai`` client gets a chat answer
and a stream. Status shows the topology: the plan's stages and layer ranges, and each
stage host's term. All real processes, TLS from the fleet CA, in network namespaces.
"""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.e2e.harness import GEMMA, profile_yaml, wait_for
from tests.e2e.test_multimachine import World, start_world, stop_world
from tests.netfleet import NetFleet

pytestmark = pytest.mark.e2e

LAYERS = 18  # the Gemma GGUF's block count
SPLIT = f"""\
  split:
    max_stages: 3
    layers: {LAYERS}
    native_context: 32768
"""


@pytest.fixture
def split_world(netfleet: NetFleet, tmp_path: Path) -> Iterator[World]:
    profile = profile_yaml(GEMMA, min_replicas=1, max_replicas=1, extra=SPLIT)
    world = start_world(
        netfleet, tmp_path, {f"{GEMMA}.yaml": profile}, hosts=("a", "b", "c"), capacity_mb=550
    )
    try:
        yield world
    finally:
        stop_world(world)


def planned_split(world: World) -> dict[str, Any] | None:
    for split in (world.status().get("plan") or {}).get("splits") or ():
        if split["model_id"] == GEMMA:
            return dict(split)
    return None


def serving_split(world: World) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The planned split and the status once its coordinator's engine is routable."""
    status = world.status()
    plan = status.get("plan") or {}
    split = next((s for s in plan.get("splits") or () if s["model_id"] == GEMMA), None)
    if split is None or routable_term(status) is None:
        return None
    return split, status


def routable_term(status: dict[str, Any]) -> int | None:
    """The coordinator term of the split's engine once it is routable."""
    for host in status["hosts"]:
        for row in host["residencies"]:
            if row["model_id"] == GEMMA and row.get("split_term") and row.get("routable"):
                return int(row["split_term"])
    return None


def test_a_model_no_host_holds_is_served_split_across_three_hosts(split_world: World) -> None:
    world = split_world
    split, status = wait_for("the split serving", lambda: serving_split(world), deadline=420)
    stages = split["stages"]
    assert len(stages) == 3
    assert stages[0]["layer_start"] == 0
    assert stages[-1]["layer_end"] == LAYERS
    for left, right in itertools.pairwise(stages):
        assert left["layer_end"] == right["layer_start"]
    assert sum(s["memory_mb"] for s in stages) >= 640
    coordinator = split["coordinator_host_id"]
    assert coordinator == stages[0]["host_id"]

    # status: each stage host reports its stage under one term, the coordinator its engine
    by_host = {h["host_id"]: h for h in status["hosts"]}
    terms = set()
    for index, stage in enumerate(stages):
        (row,) = [
            r for r in by_host[stage["host_id"]].get("split_stages") or () if r["model_id"] == GEMMA
        ]
        assert (row["stage_index"], row["stage_count"]) == (index, 3)
        assert (row["layer_start"], row["layer_end"]) == (stage["layer_start"], stage["layer_end"])
        host = world.hosts[stage["host_id"].removeprefix("host-")]
        assert row["endpoint"].startswith(f"{host.ip}:"), row
        terms.add(row["coordinator_term"])
    (engine,) = [r for r in by_host[coordinator]["residencies"] if r["model_id"] == GEMMA]
    assert terms == {engine["split_term"]} == {1}
    # nothing holds a whole replica: the only Gemma engine, in any state, is the
    # coordinator's (its controller-side state may still read "warming" while the
    # node already reports it ready and routable)
    assert [
        h["host_id"] for h in status["hosts"] for r in h["residencies"] if r["model_id"] == GEMMA
    ] == [coordinator]
    assert engine["routable"] and engine["reported_state"] == "ready", engine

    # the coordinator's engine reaches its stages through loopback forwarders only
    name = coordinator.removeprefix("host-")
    marker = f"{world.tmp / name}/"
    (child,) = [
        p
        for p in psutil.process_iter(["cmdline"])
        if "llama-server" in " ".join(p.info["cmdline"] or [])
        and marker in " ".join(p.info["cmdline"] or [])
    ]
    argv = child.cmdline()
    rpc = argv[argv.index("--rpc") + 1].split(",")
    assert len(rpc) == 3 and all(a.startswith("127.0.0.1:") for a in rpc), argv

    # the official client, through the router: a chat answer and a stream
    answer = world.chat()
    assert answer["text"].strip() and answer["stream"].strip(), answer
    assert GEMMA in answer["models"]


POLICY = """\
apiVersion: gridctl/v1
kind: ControllerPolicy
metadata:
  name: e2e
spec:
  mode: automatic
  heartbeat_stale_seconds: 5
  mutation_cooldown_seconds: 1
"""

# chat requests until told to stop, about two a second (a caller that waits between
# questions: a closed loop with no pause would hold a core for the whole test and slow
# the re-formations it watches); every answer the router gives with 200 must be a
# whole one (a non-empty completion), whatever happens to the split meanwhile
TRAFFIC = """
import json, ssl, sys, time
from pathlib import Path
import httpx
args = json.loads(sys.stdin.read())
ctx = ssl.create_default_context(cafile=args["ca"])
ok, failed, empty = 0, 0, 0
end = time.monotonic() + args["seconds"]
with httpx.Client(verify=ctx, timeout=60) as client:
    while time.monotonic() < end and not Path(args["stop"]).exists():
        try:
            r = client.post(args["base"] + "/chat/completions",
                            headers={"Authorization": "Bearer " + args["key"]},
                            json={"model": args["model"], "max_tokens": 4,
                                  "messages": [{"role": "user", "content": "Hello"}]})
        except httpx.HTTPError:
            failed += 1
            time.sleep(0.2)
            continue
        if r.status_code != 200:
            failed += 1
            time.sleep(0.2)
            continue
        text = r.json()["choices"][0]["message"].get("content") or ""
        ok += 1
        empty += 0 if text.strip() else 1
        time.sleep(0.5)
Path(args["out"]).write_text(json.dumps({"ok": ok, "failed": failed, "empty": empty}))
"""


@pytest.fixture
def four_host_world(netfleet: NetFleet, tmp_path: Path) -> Iterator[World]:
    profile = profile_yaml(GEMMA, min_replicas=1, max_replicas=1, extra=SPLIT)
    world = start_world(
        netfleet,
        tmp_path,
        {f"{GEMMA}.yaml": profile, "policy.yaml": POLICY},
        hosts=("a", "b", "c", "d"),
        capacity_mb=550,
    )
    try:
        yield world
    finally:
        stop_world(world)


def serving_term(world: World, term: int) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The split once its coordinator engine of ``term`` is routable."""
    found = serving_split(world)
    if found is None:
        return None
    split, status = found
    for host in status["hosts"]:
        for row in host["residencies"]:
            if row["model_id"] == GEMMA and row.get("split_term") == term and row.get("routable"):
                return split, status
    return None


def serving_first_term(world: World) -> tuple[dict[str, Any], dict[str, Any], int] | None:
    """The split, the status and its term once a coordinator engine is routable."""
    found = serving_split(world)
    if found is None:
        return None
    split, status = found
    term = routable_term(status)
    return None if term is None else (split, status, term)


def stage_terms(status: dict[str, Any]) -> dict[str, int]:
    return {
        h["host_id"]: row["coordinator_term"]
        for h in status["hosts"]
        for row in h.get("split_stages") or ()
        if row["model_id"] == GEMMA
    }


def stage_servers(world: World, name: str) -> list[psutil.Process]:
    node = psutil.Process(world.nodes[name].pid)
    return [p for p in node.children(recursive=True) if "rpc-server" in p.name()]


def test_a_killed_stage_re_forms_the_split_under_the_next_term(four_host_world: World) -> None:
    world = four_host_world
    # the first term that serves: 1, unless a host joined while the first claims were in
    # flight and the split was planned again before any stage had reported its claim
    first = wait_for("the split serving", lambda: serving_first_term(world), deadline=420)
    split, status, term = first
    stages = [s["host_id"] for s in split["stages"]]
    assert stage_terms(status) == dict.fromkeys(stages, term)
    assert world.chat()["text"].strip()

    stop, out = world.tmp / "traffic.stop", world.tmp / "traffic.json"
    traffic = world.ctl.popen([sys.executable, "-c", TRAFFIC], stdin=subprocess.PIPE)
    assert traffic.stdin is not None
    traffic.stdin.write(
        json.dumps(
            {
                "ca": world.ca,
                "base": world.url + "/v1",
                "key": world.router_key,
                "model": GEMMA,
                "stop": str(stop),
                "out": str(out),
                "seconds": 600,
            }
        ).encode()
    )
    traffic.stdin.close()

    # --- SIGKILL of a stage's rpc-server on a living host: the next term, on the same hosts
    victim = stages[1].removeprefix("host-")
    (server,) = stage_servers(world, victim)
    server.send_signal(signal.SIGKILL)
    split2, status2 = wait_for(
        "the split re-formed under the next term",
        lambda: serving_term(world, term + 1),
        deadline=300,
    )
    assert [s["host_id"] for s in split2["stages"]] == stages
    assert stage_terms(status2) == dict.fromkeys(stages, term + 1)
    assert world.chat()["text"].strip()

    # --- SIGKILL of a stage's node daemon: re-formed on the hosts left, under the term after
    dead = stages[2]
    world.nodes[dead.removeprefix("host-")].send_signal(signal.SIGKILL)
    split3, status3 = wait_for(
        "the split re-formed under the term after",
        lambda: serving_term(world, term + 2),
        deadline=300,
    )
    assert dead not in [s["host_id"] for s in split3["stages"]]
    assert len(split3["stages"]) == 3
    formed = [s["host_id"] for s in split3["stages"]]
    assert {h: t for h, t in stage_terms(status3).items() if h in formed} == dict.fromkeys(
        formed, term + 2
    )
    assert world.chat()["text"].strip()

    stop.touch()
    assert traffic.wait(timeout=120) == 0
    served = json.loads(out.read_text())
    print(f"requests through two re-formations: {served}")
    assert served["ok"] >= 1 and served["empty"] == 0, served  # never a half-formed answer

    # --- one host more gone: two hosts cannot hold it, and the plan says why
    last = split3["stages"][1]["host_id"]
    world.nodes[last.removeprefix("host-")].send_signal(signal.SIGKILL)

    def unsatisfied() -> str | None:
        status = world.status()
        rows = [u for u in status["plan"].get("unsatisfied") or () if u["model_id"] == GEMMA]
        if rows and not status["plan"].get("splits"):
            return str(rows[0]["message"])
        return None

    why = wait_for("the split reported unsatisfied", unsatisfied, deadline=120)
    assert "split:" in why, why
