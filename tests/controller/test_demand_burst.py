"""A burst through the router's telemetry path is folded into its bucket.

Real requests through the in-process router, then 50,000 observations in one
minute emitted on the same telemetry tap the router emits on: the controller's
demand is held as bounded buckets (one for the burst minute, a few hundred
bytes whatever the count), nothing is dropped, and the live forecast the
planner reads reflects the burst.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, sim_service
from tests.controller.test_http_flow import POLICY, converge, profile

BURST = 50_000


@pytest.fixture
def service(tmp_path: Path) -> Any:
    files = {"gemma.yaml": profile("gemma", max_replicas=1), "policy.yaml": POLICY}
    svc, clock = sim_service(tmp_path, files, clock=Clock(1_000_020.0))
    app = svc.build_app()
    svc.start_ticking()
    yield svc, app, clock
    svc.stop_ticking()


@pytest.mark.anyio
async def test_a_burst_of_fifty_thousand_requests_is_folded_into_its_bucket(
    service: Any,
) -> None:
    svc, app, clock = service
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node])
        body = {"model": "gemma", "messages": [{"role": "user", "content": "hi"}]}
        for _ in range(3):
            assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert svc.tap.flush(timeout=60.0)
    minute = (clock.now // 60) * 60
    for i in range(BURST):
        svc.tap.emit(
            RequestObservation(
                t=minute + (i % 60_000) / 1000.0, endpoint="chat", model="gemma",
                served_model="gemma", host_id="local-1", outcome="ok", status=200,
                service_seconds=0.2, artifact_sha256=GEMMA_SHA,
            )
        )  # fmt: skip
        if i % 2000 == 1999:
            assert svc.tap.flush(timeout=60.0)
    assert svc.tap.flush(timeout=60.0)
    assert svc.tap.dropped == 0

    book = svc.controller.demand
    assert book.series_sizes() == {"gemma": 1}  # the router's requests and the burst: one bucket
    held = json.dumps(book._learner.state()["direct"])
    assert len(held) < 2_000  # aggregates, not 50,000 records

    clock.now = minute + 61.0  # the burst minute is complete
    (demand,) = book.forecast(clock.now, svc.controller.policy())
    assert demand.sample_count == BURST + 3
    assert demand.requests_per_minute == pytest.approx(BURST + 3)
    assert demand.offered_concurrency == pytest.approx((BURST + 3) / 60.0 * 0.2, rel=0.05)
    assert demand.p95_latency_ms is not None and 150.0 <= demand.p95_latency_ms <= 260.0
