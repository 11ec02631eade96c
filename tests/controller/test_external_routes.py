"""External engines through the real controller in-process, against real loopback engines.

Native readiness: an external route is routable only when the engine lists the
registered model and a one-token request answers 2xx; a 200 from /health or from
a model list without the model is not enough. Removal: ``DELETE
/allocator/external/{name}`` retires the route, its persisted record and its
inventory, refuses an unknown name (404), a managed host (409) and, without
``force``, a model's last routable replica (409); requests in flight finish.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.cli.status_cmd import render_status
from gridctl.controller.externals import INFERENCE_RECHECK_SECONDS
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.membership import Membership
from tests.controller.openai_engine import OpenAIEngine
from tests.controller.simnodes import Clock

pytestmark = pytest.mark.anyio

MODEL = "m"


class Rig:
    """The controller with real engine transports, and an operator's HTTP client."""

    def __init__(self, tmp_path: Path) -> None:
        self.state = tmp_path / "ctl"
        self.clock = Clock()
        self.service = ControllerService(ServiceOptions(state_dir=self.state, clock=self.clock))
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=self.service.build_app()), base_url="http://ctl"
        )
        self.admin = {"X-Grid-Allocator-Token": self.service.operator_token}

    async def join(self, name: str, engine: OpenAIEngine, **extra: Any) -> httpx.Response:
        body = {"endpoint": engine.endpoint, "model_id": MODEL, "kind": "vllm", **extra}
        return await self.client.put(f"/allocator/external/{name}", headers=self.admin, json=body)

    async def remove(self, name: str, **params: str) -> httpx.Response:
        return await self.client.delete(
            f"/allocator/external/{name}", headers=self.admin, params=params
        )

    async def probe(self) -> None:
        await self.service.probe_once(self.service.upstream)

    def routable_on(self, name: str) -> bool:
        routes = self.service.registry.routable(MODEL, self.clock())
        return any(r.host_id == name for r in routes)

    async def residency(self, name: str) -> dict[str, Any]:
        status = (await self.client.get("/allocator/status")).json()
        (host,) = [h for h in status["hosts"] if h["host_id"] == name]
        (row,) = host["residencies"]
        return dict(row)


@pytest.fixture
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    rig = Rig(tmp_path)
    async with rig.client:
        yield rig
    await rig.service.upstream.aclose()


@pytest.fixture
def engine() -> Any:
    engine = OpenAIEngine(models=["other"]).start()
    yield engine
    engine.stop()


async def test_a_200_without_the_model_is_not_routable(rig: Rig, engine: OpenAIEngine) -> None:
    assert (await rig.join("vendor", engine)).status_code == 200
    await rig.probe()  # /health and /v1/models answer 200, without the model
    assert not rig.routable_on("vendor")
    row = await rig.residency("vendor")
    assert row["routable"] is False
    assert row["not_routable_reason"] == "model 'm' not listed by the engine"
    assert engine.probes == 0  # no inference is asked of an engine that lacks the model
    models = (await rig.client.get("/v1/models")).json()
    assert MODEL not in [m["id"] for m in models["data"]]
    shown = render_status((await rig.client.get("/allocator/status")).json())
    assert "  m not routable: model 'm' not listed by the engine" in shown.splitlines()

    engine.models.append(MODEL)
    await rig.probe()
    assert rig.routable_on("vendor") and engine.probes == 1
    row = await rig.residency("vendor")
    assert row["routable"] is True and row["not_routable_reason"] is None

    engine.models.remove(MODEL)  # the engine unloaded it: the route goes at once
    await rig.probe()
    assert not rig.routable_on("vendor")
    assert (await rig.residency("vendor"))["not_routable_reason"] == (
        "model 'm' not listed by the engine"
    )


@pytest.mark.parametrize(
    ("serves", "path"), [("chat", "/v1/chat/completions"), ("completions", "/v1/completions")]
)
async def test_a_failing_one_token_probe_is_not_routable(
    rig: Rig, engine: OpenAIEngine, serves: str, path: str
) -> None:
    engine.models.append(MODEL)
    engine.status = 503
    assert (await rig.join("vendor", engine, serves=serves)).status_code == 200
    await rig.probe()
    assert not rig.routable_on("vendor")
    reason = (await rig.residency("vendor"))["not_routable_reason"]
    assert reason == f"one-token probe POST {path} answered 503"
    engine.status = 200
    await rig.probe()
    assert rig.routable_on("vendor") and engine.probes == 1


async def test_the_inference_probe_is_rate_limited(rig: Rig, engine: OpenAIEngine) -> None:
    engine.models.append(MODEL)
    assert (await rig.join("vendor", engine)).status_code == 200
    for _ in range(3):
        await rig.probe()
    assert rig.routable_on("vendor") and engine.probes == 1  # the list is read every pass
    rig.clock.now += INFERENCE_RECHECK_SECONDS
    await rig.probe()
    assert engine.probes == 2


async def test_an_engine_that_stops_answering_loses_its_route_with_its_lease(
    rig: Rig, engine: OpenAIEngine
) -> None:
    engine.models.append(MODEL)
    assert (await rig.join("vendor", engine)).status_code == 200
    await rig.probe()
    assert rig.routable_on("vendor")
    engine.stop()  # no answer is not a refusal: the route is not renewed, not cut
    await rig.probe()
    reason = rig.service.registry.not_routable_reason("vendor", MODEL)
    assert reason is not None and reason.startswith("GET /v1/models: ")
    assert rig.routable_on("vendor")  # until its lease runs out
    rig.clock.now += rig.service.registry.route_lease_seconds + 1
    assert not rig.routable_on("vendor")
    assert (await rig.residency("vendor"))["not_routable_reason"] == reason


async def test_registration_refuses_an_unknown_api(rig: Rig, engine: OpenAIEngine) -> None:
    bad = await rig.join("vendor", engine, serves="embeddings")
    assert bad.status_code == 400 and bad.json()["error"]["pointer"] == "/serves"
    assert rig.service.registry.host("vendor") is None


async def test_removal_retires_route_record_and_inventory(
    rig: Rig, engine: OpenAIEngine, tmp_path: Path
) -> None:
    engine.models.append(MODEL)
    assert (await rig.join("vendor", engine)).status_code == 200
    await rig.probe()
    assert rig.routable_on("vendor")

    unguarded = await rig.client.delete("/allocator/external/vendor")
    assert unguarded.status_code == 401
    unknown = await rig.remove("nobody")
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"].startswith("no external engine named 'nobody'")
    bad = await rig.remove("vendor", force="yes")
    assert bad.status_code == 400 and bad.json()["error"]["pointer"] == "/force"
    last = await rig.remove("vendor")
    assert last.status_code == 409 and "only routable replica of 'm'" in last.text
    assert rig.routable_on("vendor")  # a refusal changes nothing

    engine.hold()  # a request in flight when the route is removed
    chat = asyncio.create_task(
        rig.client.post(
            "/v1/chat/completions",
            json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
        )
    )
    for _ in range(2000):
        if engine.active:
            break
        await asyncio.sleep(0.005)
    assert engine.active == 1
    removed = await rig.remove("vendor", force="true")
    assert removed.status_code == 200
    assert removed.json() == {"removed": "vendor", "model_ids": [MODEL]}
    engine.release()
    answer = await chat
    assert answer.status_code == 200 and engine.served == 1  # it finished on the engine

    assert rig.service.registry.host("vendor") is None
    status = (await rig.client.get("/allocator/status")).json()
    assert [h["host_id"] for h in status["hosts"]] == []
    assert any(e["event"] == "external_removed" for e in status["history"])
    await rig.probe()
    assert (await rig.remove("vendor")).status_code == 404
    offline = Membership(rig.state)
    assert "vendor" not in offline.externals()
    offline.close()
    rig.service.store.close()
    again = ControllerService(rig.service.options)  # a restart does not bring it back
    assert again.registry.host("vendor") is None
    again.store.close()


async def test_a_managed_host_is_not_removed_as_an_external_engine(rig: Rig) -> None:
    from tests.controller.simnodes import SimNode

    assert rig.service.identity is not None
    token, _ = rig.service.identity.issue("host-a", ["127.0.0.1"])
    node = SimNode(host_id="host-a", client=rig.client, token=token, clock=rig.clock)
    assert (await node.register()).status_code == 200
    refused = await rig.remove("host-a")
    assert refused.status_code == 409 and "managed host" in refused.text
    assert rig.service.registry.host("host-a") is not None


KEY = "sk-engine-0123456789"


async def test_an_engine_that_wants_a_key_is_routable_only_with_it(
    rig: Rig, engine: OpenAIEngine
) -> None:
    engine.models.append(MODEL)
    engine.api_key = KEY
    keyless = await rig.join("vendor", engine)
    assert keyless.status_code == 200 and keyless.json()["api_key"] == "none"
    await rig.probe()
    assert not rig.routable_on("vendor")
    reason = (await rig.residency("vendor"))["not_routable_reason"]
    assert reason.startswith("GET /v1/models answered 401: the engine wants an API key")

    joined = await rig.join("vendor", engine, api_key=KEY)
    assert joined.status_code == 200 and joined.json()["api_key"] == "set"
    assert KEY not in joined.text
    await rig.probe()
    assert rig.routable_on("vendor") and engine.probes == 1
    chat = await rig.client.post(
        "/v1/chat/completions",
        json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert chat.status_code == 200 and engine.served == 1  # the router sent the key too

    again = await rig.join("vendor", engine, max_concurrency=2)  # no key named: kept
    assert again.status_code == 200 and again.json()["api_key"] == "kept"
    rig.clock.now += INFERENCE_RECHECK_SECONDS
    await rig.probe()
    assert rig.routable_on("vendor") and engine.probes == 2
    status = (await rig.client.get("/allocator/status")).text
    assert KEY not in status

    rig.service.store.close()
    restarted = ControllerService(rig.service.options)  # the key survives a restart
    restarted.build_app()
    try:
        await restarted.probe_once(restarted.upstream)
        assert [r.host_id for r in restarted.registry.routable(MODEL, rig.clock())] == ["vendor"]
    finally:
        await restarted.upstream.aclose()
        restarted.store.close()


@pytest.mark.parametrize("bad", ["has space", "", "x" * 513, 42, "tab\there", "é"])
async def test_a_malformed_key_is_refused_and_changes_nothing(
    rig: Rig, engine: OpenAIEngine, bad: object
) -> None:
    refused = await rig.join("vendor", engine, api_key=bad)
    assert refused.status_code == 400 and refused.json()["error"]["pointer"] == "/api_key"
    assert rig.service.registry.host("vendor") is None
    offline = Membership(rig.state)
    try:
        assert "vendor" not in offline.externals()
    finally:
        offline.close()
