"""A 500 opens an engine's breaker only when the engine's own health confirms it.

The real controller app in-process; the engine behind ``httpx.MockTransport`` answers
500 to a request it cannot serve (an image part for a model without a projector, a
shape the router lets through) while its ``/health`` stays 200, or is really broken
and says so on ``/health``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.router.confirming import ConfirmingBreakers
from tests.controller.simnodes import GEMMA_SHA, ONE_GEMMA, SimNode, engine_handler, sim_service

pytestmark = pytest.mark.anyio

NORMAL = {"model": "gemma", "messages": [{"role": "user", "content": "hi"}]}
IMAGE = {
    "model": "gemma",
    "messages": [
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,x"}}]}
    ],
}


class Engine:
    """A simulated llama-server: 500 for an image without a projector; ``broken`` makes
    every answer a 500 and ``/health`` a 503."""

    def __init__(self) -> None:
        self.broken = False
        self.health_checks = 0

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/health"):
            self.health_checks += 1
            if self.broken:
                return httpx.Response(503, json={"error": "unavailable"})
            return engine_handler(request)
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            if self.broken or "image_url" in json.dumps(body.get("messages")):
                return httpx.Response(500, json={"error": {"message": "image input unsupported"}})
        return engine_handler(request)


async def started(tmp_path: Path, engine: Engine) -> tuple[Any, httpx.AsyncClient]:
    service, clock = sim_service(tmp_path, ONE_GEMMA, engine=engine)
    app = service.build_app()
    service.start_ticking()
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://ctl")
    node = SimNode.for_controller(
        service.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
    )
    assert (await node.register()).status_code == 200
    for _ in range(8):
        await node.heartbeat()
        await service.probe_once(service.upstream)
    assert (await client.post("/v1/chat/completions", json=NORMAL)).status_code == 200
    return service, client


async def test_a_callers_500s_never_close_a_healthy_engine(tmp_path: Path) -> None:
    engine = Engine()
    service, client = await started(tmp_path, engine)
    breakers = service.router.breakers
    assert isinstance(breakers, ConfirmingBreakers)
    try:
        for _ in range(30):  # two failing requests for every normal one
            for _ in range(2):
                bad = await client.post("/v1/chat/completions", json=IMAGE)
                assert bad.status_code == 500
            normal = await client.post("/v1/chat/completions", json=NORMAL)
            assert normal.status_code == 200, normal.text
            await breakers.settled()
            assert breakers.describe() == []
    finally:
        await client.aclose()
        service.stop_ticking()
    assert breakers.excused >= 1 and breakers.confirmed == 0
    assert engine.health_checks < 60 + 20  # one probe per circuit in flight, not per 500


async def test_a_500_the_engines_health_confirms_opens_the_breaker(tmp_path: Path) -> None:
    engine = Engine()
    service, client = await started(tmp_path, engine)
    breakers = service.router.breakers
    assert isinstance(breakers, ConfirmingBreakers)
    try:
        engine.broken = True
        for _ in range(2):  # the policy's threshold: two confirmed failures
            assert (await client.post("/v1/chat/completions", json=NORMAL)).status_code == 500
            await breakers.settled()
        assert [c["host_id"] for c in breakers.describe()] == ["local-1"]
        assert breakers.confirmed == 2
        refused = await client.post("/v1/chat/completions", json=NORMAL)
        assert refused.status_code == 503  # the open circuit sends nothing to the engine
    finally:
        await client.aclose()
        service.stop_ticking()
