"""The multi-model engine under the real node daemon, driven by the real controller over HTTP.

Two residencies (Gemma under two model ids) are warmed on the ``llama.cpp-router`` runtime:
one router process holds both and the node advertises its endpoint for each. A SIGKILL of the
daemon is followed by adoption of that same router for both residencies; unloading one model
leaves the other answering, and the router stops with the last one.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.node.conftest import GEMMA_SHA256, GEMMA_SOURCE, MODEL_ID
from tests.node.controller_harness import wait_until
from tests.node.test_daemon_e2e import (
    HOST,
    gridctl,
    node_setup,  # noqa: F401 - the fixture, taken by name below
    started_failure,
    status,
)

pytestmark = pytest.mark.slow
ROUTER = "llama.cpp-router"
SECOND = "gemma-twin"


def _complete(endpoint: str, key: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{endpoint}/v1/completions",
        json={"model": model, "prompt": "Hello", "max_tokens": 2},
        headers={"Authorization": f"Bearer {key}"},
        timeout=60,
    )


def _by_model(state_dir: Path) -> dict[str, dict[str, Any]]:
    return {r["model_id"]: r for r in status(state_dir)["residencies"]}


def test_one_router_holds_two_models_across_a_daemon_restart(
    request: pytest.FixtureRequest,
) -> None:
    fake, state_dir, start_args = request.getfixturevalue("node_setup")
    started = gridctl(*start_args)
    assert started.returncode == 0, started_failure(started, state_dir, fake)
    assert ROUTER in fake.registrations[-1]["resources"]["runtimes"]

    loads = [
        fake.command(
            "load", model, HOST, f"load-{model}",
            artifact_sha256=GEMMA_SHA256, artifact_source=GEMMA_SOURCE, artifact_size_mb=242,
        )
        for model in (MODEL_ID, SECOND)
    ]  # fmt: skip
    warms = [
        fake.command(
            "warm", model, HOST, f"warm-{model}", artifact_sha256=GEMMA_SHA256,
            dependencies=[f"load-{MODEL_ID}", f"load-{SECOND}"], runtime=ROUTER,
        )
        for model in (MODEL_ID, SECOND)
    ]  # fmt: skip
    fake.enqueue(*loads, *warms)
    for model in (MODEL_ID, SECOND):
        ack = wait_until(lambda m=model: fake.terminal_ack(f"warm-{m}"), 240, f"warm {model}")
        assert ack["status"] == "succeeded", ack
    rows = {
        model: wait_until(
            lambda m=model: (r := fake.last_residency(m)) and r.get("endpoint") and r, 30, model
        )
        for model in (MODEL_ID, SECOND)
    }
    assert rows[MODEL_ID]["endpoint"] == rows[SECOND]["endpoint"]
    assert {r["runtime"] for r in rows.values()} == {ROUTER}
    key = fake.last_inventory()["allocator"]["engine_api_key"]
    endpoint = rows[MODEL_ID]["endpoint"]
    for model in (MODEL_ID, SECOND):
        answer = _complete(endpoint, key, model)
        assert answer.status_code == 200 and answer.json()["model"] == model
    local = _by_model(state_dir)
    router_pid = local[MODEL_ID]["pid"]
    assert local[SECOND]["pid"] == router_pid

    # SIGKILL the daemon: the router survives; the new daemon adopts it for both residencies
    daemon = status(state_dir)["daemon"]
    os.kill(daemon["pid"], signal.SIGKILL)
    wait_until(lambda: not status(state_dir)["daemon"]["running"], 60, "daemon gone")
    registrations = len(fake.registrations)
    restarted = gridctl(*start_args)
    assert restarted.returncode == 0, started_failure(restarted, state_dir, fake)
    wait_until(lambda: len(fake.registrations) > registrations, 60, "re-registration")
    adopted = _by_model(state_dir)
    for model in (MODEL_ID, SECOND):
        row = adopted[model]
        assert row["pid"] == router_pid and row["state"] == "ready" and not row["fenced"], row

    # unloading one model leaves the other answering from the same process
    fake.enqueue(fake.command("drain", SECOND, HOST, "drain-twin"))
    assert wait_until(lambda: fake.terminal_ack("drain-twin"), 60)["status"] == "succeeded"
    fake.enqueue(fake.command("unload", SECOND, HOST, "unload-twin"))
    unload = wait_until(lambda: fake.terminal_ack("unload-twin"), 90)
    assert unload["status"] == "succeeded", unload
    assert Path(f"/proc/{router_pid}").exists()
    assert _complete(endpoint, key, MODEL_ID).status_code == 200
    assert _complete(endpoint, key, SECOND).status_code != 200
    wait_until(lambda: fake.last_residency(SECOND)["state"] == "cached", 60, "twin cached")
    assert fake.last_residency(MODEL_ID)["state"] == "ready"

    # the router stops with its last model
    fake.enqueue(fake.command("drain", MODEL_ID, HOST, "drain-last"))
    assert wait_until(lambda: fake.terminal_ack("drain-last"), 60)["status"] == "succeeded"
    fake.enqueue(fake.command("unload", MODEL_ID, HOST, "unload-last"))
    assert wait_until(lambda: fake.terminal_ack("unload-last"), 90)["status"] == "succeeded"
    t0 = time.monotonic()
    wait_until(lambda: not Path(f"/proc/{router_pid}").exists(), 60, "router gone")
    print(f"router {router_pid} gone {time.monotonic() - t0:.2f}s after its last unload")
