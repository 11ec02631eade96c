"""The controller benchmark's simulated hosts are real hosts on the wire: a heartbeat
body is what ``gridctl.node.reports`` builds at that moment and passes the wire schema,
and the lean client speaks HTTP/1.1 keep-alive to the real controller app (one
connection per host, a new one after the server closes an idle one) while its hosts
register, run the commands they get and acknowledge them until the fleet converged."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest
import uvicorn

from gridctl.config.schemas import validator
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.node import reports

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def bench_modules() -> tuple[ModuleType, ModuleType, ModuleType]:
    """``simhosts``, ``loadgen`` and the driver: the benchmarks import each other by plain
    name, as scripts do; the driver's generic file name is loaded under another."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))
    key = "gridctl_controller_benchmark"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, BENCHMARKS / "controller.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return importlib.import_module("simhosts"), importlib.import_module("loadgen"), sys.modules[key]


simhosts, loadgen, driver = bench_modules()


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def schema_errors(relative: str, body: bytes) -> list[str]:
    return [e.message for e in validator(relative).iter_errors(json.loads(body))]


def test_a_heartbeat_is_what_the_node_builds_at_that_moment_and_passes_the_schema() -> None:
    clock = Clock(1_700_000_000.0)
    host = simhosts.SimHost("sim-00001", "token", "http://127.0.0.1:9/e", 1, clock=clock)
    for n, (kind, model) in enumerate(
        [("load", "a"), ("warm", "a"), ("load", "b"), ("warm", "b"), ("drain", "b")]
    ):
        clock.now += 1.5
        assert host.execute({"action_id": f"act-{n}", "kind": kind, "model_id": model})
    assert not host.execute({"action_id": "act-0", "kind": "load", "model_id": "a"})
    assert schema_errors("wire/registration.schema.json", host.registration()) == []
    seen: set[bytes] = set()
    for step in (0.0, 7.25, 12.3456):
        clock.now += step
        for control in (False, True):
            body = host.heartbeat(request_commands=control)
            reference = host.reference_heartbeat(clock.now, request_commands=control)
            assert body == json.dumps(reference).encode()
            assert schema_errors("wire/heartbeat.schema.json", body) == []
            seen.add(body)
    assert len(seen) == 6  # the ages grow with the clock, the kinds differ
    sent = json.loads(body)
    assert [a["action_id"] for a in sent["acknowledgements"]] == [f"act-{n}" for n in range(5)]
    rows = {r["model_id"]: r for r in sent["allocator"]["residencies"]}
    assert rows["b"]["state"] == "draining" and rows["a"]["state"] == "ready"
    assert rows["a"]["loaded_age_seconds"] == round(clock.now - (1_700_000_000.0 + 3.0), 3)
    host.acknowledged(list(host.receipts))
    body = host.heartbeat(request_commands=False)
    assert json.loads(body)["acknowledgements"] == []
    assert body == json.dumps(host.reference_heartbeat(clock.now, request_commands=False)).encode()


def test_a_host_renews_its_lease_and_sends_its_inventory_as_the_node_agent_does() -> None:
    clock = Clock(1_700_000_000.0)
    host = simhosts.SimHost("sim-00001", "token", "http://127.0.0.1:9/e", 1, clock=clock)
    host.execute({"action_id": "act-0", "kind": "load", "model_id": "a"})
    registration = json.loads(host.registration())
    host.answered({})  # the controller took the registration
    digest = registration["inventory_digest"]
    clock.now += 5.0
    for control in (False, True):
        body = host.heartbeat(request_commands=control)
        assert not host.sent_full
        reference = reports.lease(
            host.host_id,
            digest,
            receipts=host.receipts,
            request_commands=control,
            active_tasks=0,
            queue_depth=0,
        )
        assert body == json.dumps(reference).encode()
        assert schema_errors("wire/heartbeat.schema.json", body) == []
        host.answered({})
    host.execute({"action_id": "act-1", "kind": "warm", "model_id": "a"})  # a change
    full = json.loads(host.heartbeat(request_commands=False))
    assert host.sent_full and full["inventory_digest"] != digest and "allocator" in full
    host.answered({})
    assert "allocator" not in json.loads(host.heartbeat(request_commands=False))
    host.answered({"send_full_inventory": True})  # a controller that lost it asks
    assert "allocator" in json.loads(host.heartbeat(request_commands=False))
    host.answered({})
    clock.now += host.refresh_seconds  # the periodic full inventory
    assert "allocator" in json.loads(host.heartbeat(request_commands=False))


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(app: Any, port: int, **config: Any) -> Iterator[str]:
    """``app`` under uvicorn on loopback in a thread of the test."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **config)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise AssertionError(f"{url} did not start")
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)


async def converged(url: str, hosts: int) -> bool:
    async with httpx.AsyncClient(base_url=url) as client:
        status = (await client.get("/allocator/status")).json()
    progress = driver.Progress.of(status)
    return progress.converged(hosts) and progress.ready == 1


@pytest.mark.slow
def test_hosts_keep_one_connection_to_the_real_controller_until_the_fleet_converged(
    tmp_path: Path,
) -> None:
    watch, state = tmp_path / "desired", tmp_path / "state"
    driver.write_desired(watch, models=1, replicas=1)
    port = free_port()
    service = ControllerService(
        ServiceOptions(
            state_dir=state, watch_dir=watch, port=port, tick_interval=0.5, probe_interval=0.5
        )
    )
    engine_port = free_port()
    health = f"http://127.0.0.1:{engine_port}/e"
    # a short server keep-alive, so the test sees the server close an idle connection
    with (
        served(driver.engine_app(), engine_port),
        served(service.build_app(), port, lifespan="on", timeout_keep_alive=2) as url,
    ):
        creds = driver.credentials(state, 2, 0)
        clients = [
            loadgen.HostClient(simhosts.SimHost(c["host_id"], c["token"], health, i), url)
            for i, c in enumerate(creds)
        ]
        tally = loadgen.Tally()

        async def scenario() -> tuple[int, int]:
            rounds = 0
            deadline = time.monotonic() + 90
            while not await converged(url, len(clients)):
                assert time.monotonic() < deadline, "the fleet did not converge"
                acted = [(await c.round(tally)).acted for c in clients]
                rounds += 1
                if not any(acted):
                    await asyncio.sleep(0.2)  # the next tick or probe, polled
            for client in clients:  # an idle connection the server closes
                await asyncio.wait_for(client.conn.wait_closed_by_peer(), 30)
            for client in clients:
                await client.round(tally)
            return rounds, sum(len(c.host.executed) for c in clients)

        rounds, executed = asyncio.run(scenario())
    assert tally.errors == {}
    assert executed >= 2  # a load and a warm, acknowledged (nothing pending above)
    assert tally.served == 2 * len(clients) * (rounds + 1)
    assert all(not c.host.receipts for c in clients)
    # every request of a round before the idle close went over the first connection
    assert [c.conn.connects for c in clients] == [2, 2]
    assert tally.resent == 0


def test_a_host_paces_its_rounds_as_the_node_agent_does() -> None:
    def after(outcome: Any, backoff: float = 0.0) -> tuple[float, float]:
        return loadgen.next_round(outcome, 100.0, 101.0, backoff)

    assert after(loadgen.Outcome(False)) == (105.0, 0.0)  # the 5 s period
    assert after(loadgen.Outcome(True)) == (101.0, 0.0)  # at once after a command ran
    waits, backoff = [], 0.0
    for _ in range(6):
        start, backoff = after(loadgen.refused(503), backoff)
        waits.append(start - 101.0)
    assert waits == [2.0, 4.0, 8.0, 16.0, 30.0, 30.0]  # the agent's capped doubling
    assert after(loadgen.refused(401), 4.0) == (131.0, 4.0)  # a refusal waits 30 s
    deferred = b'{"error": {"message": "behind", "retry_after_seconds": 12.5}}'
    assert after(loadgen.refused(503, deferred)) == (113.5, 12.5)  # the controller's time
    assert after(loadgen.refused(503, deferred), 16.0) == (131.0, 30.0)  # capped as ever
    forgotten = loadgen.Outcome(False, loadgen.FORGOTTEN_RETRY_SECONDS)
    assert after(forgotten) == (101.5, 0.5)
