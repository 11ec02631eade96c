"""Unbound ("model": "auto") requests are answered at once when they can be, and refused at
once when no configured model could ever serve them: the real controller and router in-process,
the embedded default's own profile and workload catalog."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, engine_handler
from tests.controller.test_http_flow import POLICY, converge

ROOT = Path(__file__).resolve().parents[2]
GENERAL = {"model": "auto", "messages": [{"role": "user", "content": "Say hello"}]}
CODING = {"model": "auto", "messages": [{"role": "user", "content": "fix this python bug"}]}


@pytest.fixture
def service(tmp_path: Path) -> Any:
    watch = tmp_path / "policies"
    watch.mkdir()
    gemma = (ROOT / "policies" / "models" / "gemma-3-270m.yaml").read_text(encoding="utf-8")
    (watch / "gemma.yaml").write_text(gemma)
    (watch / "policy.yaml").write_text(POLICY)
    (watch / "workloads.yaml").write_text((ROOT / "policies" / "workloads.yaml").read_text())
    clock = Clock()
    svc = ControllerService(
        ServiceOptions(
            state_dir=tmp_path / "state",
            watch_dir=watch,
            clock=clock,
            upstream_transport=httpx.MockTransport(engine_handler),
        )
    )
    app = svc.build_app()
    svc.start_ticking()
    yield svc, app, clock
    svc.stop_ticking()


@pytest.mark.anyio
async def test_first_general_request_is_answered_by_the_ready_baseline(service: Any) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "local-1", client, clock, cached={"gemma-3-270m": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=6)
        status = (await client.get("/allocator/status")).json()
        assert [m["ready"] for m in status["models"]] == [1], status["models"]
        # no unbound request was seen before this one: no workload evidence at all
        served = await client.post("/v1/chat/completions", json=GENERAL)
        assert served.status_code == 200, served.text
        assert served.json()["model"] == "gemma-3-270m"


@pytest.mark.anyio
async def test_a_workload_no_profile_scores_is_refused_at_once(service: Any) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "local-1", client, clock, cached={"gemma-3-270m": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=6)
        started = time.monotonic()
        refused = await client.post("/v1/chat/completions", json=CODING)
        elapsed = time.monotonic() - started
        assert refused.status_code == 422, refused.text  # permanent: a 4xx, never retried
        error = refused.json()["error"]
        assert error["code"] == "workload_infeasible"
        assert error["admission_state"] == "infeasible"
        assert "no configured model scores workload coding" in error["message"]
        assert "retry-after" not in refused.headers  # retrying cannot help
        print(f"infeasible answer in {elapsed * 1000:.1f} ms")


@pytest.mark.anyio
async def test_the_official_client_gets_the_refusal_once_without_retrying(service: Any) -> None:
    """The ``openai`` client retries 408/409/429/5xx: an unscored workload must be none
    of those, or each retry would reach the router as more demand for it."""
    from openai import AsyncOpenAI, UnprocessableEntityError

    svc, app, clock = service
    arrivals: list[str] = []

    async def counting(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            arrivals.append(scope["path"])
        await app(scope, receive, send)

    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=counting), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "local-1", client, clock, cached={"gemma-3-270m": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node], rounds=6)
        openai = AsyncOpenAI(base_url="http://ctl/v1", api_key="unused", http_client=client)
        await openai.models.list()  # the client's own first-use setup is not the answer's time
        arrivals.clear()
        with pytest.raises(UnprocessableEntityError) as refused:
            await openai.chat.completions.create(
                model="auto", messages=[{"role": "user", "content": "fix this python bug"}]
            )
    # one request: the client did not retry (its backoff would add a second arrival)
    assert arrivals == ["/v1/chat/completions"]
    assert "no configured model scores workload coding" in str(refused.value)
