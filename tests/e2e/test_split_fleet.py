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
    if split is None:
        return None
    for host in status["hosts"]:
        for row in host["residencies"]:
            if row["model_id"] == GEMMA and row.get("split_term") and row.get("routable"):
                return split, status
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
    # nothing holds a whole replica: the only Gemma engine is the coordinator's
    assert [
        h
        for h in status["hosts"]
        for r in h["residencies"]
        if r["model_id"] == GEMMA and r["state"] == "ready"
    ] == [by_host[coordinator]]

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
