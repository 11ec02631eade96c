"""Migrating a model from an external engine to a managed replica with zero failed requests.

The spec's path: an external route serves model M; the operator configures M's
profile, a managed replacement (a simulated node speaking the real wire protocol,
its engine a real loopback OpenAI server) reaches READY and routable, then the
operator retires the external route. A bounded loop of requests through the
router, made with the official ``openai`` client naming M, runs the whole time
and must see no failure. The real controller runs in-process (ASGI) with its real
engine transports.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from openai import AsyncOpenAI, OpenAIError

from gridctl.controller.serving import ControllerService, ServiceOptions
from tests.controller.openai_engine import OpenAIEngine
from tests.controller.simnodes import GEMMA_SHA, ONE_GEMMA, Clock, SimNode, watched_dir

pytestmark = pytest.mark.anyio

MODEL = "gemma"
MAX_REQUESTS = 400  # the loop's bound, whatever happens
WORKERS = 2
CONVERGE_ROUNDS = 20
AFTER_REMOVAL = 20  # requests the replacement must answer once the external route is gone


async def test_a_managed_replacement_retires_the_external_route_without_a_failed_request(
    tmp_path: Path,
) -> None:
    external = OpenAIEngine(models=[MODEL], delay=0.002).start()
    managed = OpenAIEngine(models=[MODEL], delay=0.002).start()
    clock = Clock()
    service = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "ctl", watch_dir=watched_dir(tmp_path, ONE_GEMMA), clock=clock
        )
    )
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl", timeout=30
    )
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    service.start_ticking()
    failures: list[str] = []
    answered = {"before": 0, "after": 0}
    removed = asyncio.Event()
    done = asyncio.Event()
    sent = 0

    async def loop(client: AsyncOpenAI) -> None:
        nonlocal sent
        while not done.is_set() and sent < MAX_REQUESTS:
            sent += 1
            try:
                reply = await client.chat.completions.create(
                    model=MODEL, messages=[{"role": "user", "content": "hello"}]
                )
                assert reply.choices[0].message.content == "hi", reply
            except (OpenAIError, AssertionError) as exc:
                failures.append(f"{type(exc).__name__}: {exc}")
                continue
            answered["after" if removed.is_set() else "before"] += 1
            if answered["after"] >= AFTER_REMOVAL:
                done.set()

    try:
        async with http:
            joined = await http.put(
                "/allocator/external/vendor",
                headers=admin,
                json={"endpoint": external.endpoint, "model_id": MODEL, "kind": "vllm"},
            )
            assert joined.status_code == 200
            await service.probe_once(service.upstream)
            assert [r.host_id for r in service.registry.routable(MODEL, clock())] == ["vendor"]

            client = AsyncOpenAI(
                base_url="http://ctl/v1", api_key="unused", http_client=http, max_retries=0
            )
            workers = [asyncio.create_task(loop(client)) for _ in range(WORKERS)]
            while answered["before"] < 10 and not failures and sent < MAX_REQUESTS:
                await asyncio.sleep(0.01)  # the external route is carrying the load

            assert service.identity is not None
            token, _ = service.identity.issue("gpu-1", ["127.0.0.1"])
            node = SimNode(
                host_id="gpu-1",
                client=http,
                token=token,
                clock=clock,
                cached={MODEL: GEMMA_SHA},
                engine_url=managed.endpoint,
            )
            assert (await node.register()).status_code == 200
            premature = await http.delete("/allocator/external/vendor", headers=admin)
            assert premature.status_code == 409  # the replacement is not READY yet
            for _ in range(CONVERGE_ROUNDS):
                await node.heartbeat()
                await service.probe_once(service.upstream)
                hosts = [r.host_id for r in service.registry.routable(MODEL, clock())]
                if "gpu-1" in hosts:
                    break
            assert hosts == ["gpu-1", "vendor"], hosts
            assert [c["kind"] for c in node.executed] == ["warm"]

            retired = await http.delete("/allocator/external/vendor", headers=admin)
            assert retired.status_code == 200, retired.text
            removed.set()
            assert [r.host_id for r in service.registry.routable(MODEL, clock())] == ["gpu-1"]
            await asyncio.wait_for(asyncio.gather(*workers), timeout=60)
            await node.heartbeat()
            status = (await http.get("/allocator/status")).json()
    finally:
        service.stop_ticking()
        await service.upstream.aclose()
        external.stop()
        managed.stop()

    assert failures == [], failures[:5]
    assert answered["after"] >= AFTER_REMOVAL and sent <= MAX_REQUESTS
    assert external.served >= 10 and managed.served >= AFTER_REMOVAL
    assert [h["host_id"] for h in status["hosts"]] == ["gpu-1"]
    (row,) = [m for m in status["models"] if m["model_id"] == MODEL]
    assert row["ready"] == 1 and row["health"] == "Healthy", row
