"""Outcome evidence is keyed by the artifact the serving replica proved (live router path).

A request routed to a replica of the old weights is still in flight when the
profile moves to a new artifact; its late response carries the old digest on
its observation, so it cannot become the new artifact's evidence. A response
from a replica of the new weights does.
"""

from __future__ import annotations

import asyncio
import textwrap
from pathlib import Path

import httpx
import pytest

from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import (
    GEMMA_SHA,
    SimNode,
    engine_handler,
    sim_service,
    watched_dir,
)
from tests.controller.test_http_flow import POLICY, converge

NEW_SHA = "7" * 64


def profile(sha: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ModelProfile
        metadata: {{name: gemma}}
        spec:
          memory_mb: 640
          artifact: {{sha256: '{sha}'}}
          min_replicas: 1
          max_replicas: 1
          min_residency_seconds: 0
          scale_down_cooldown_seconds: 0
        """)


class SlowEngine:
    """The simulated engine; while ``hold`` is set, inference waits for ``release``."""

    def __init__(self) -> None:
        self.hold = False
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.hold and not request.url.path.endswith("/health"):
            self.entered.set()
            await self.release.wait()
        return engine_handler(request)


@pytest.mark.anyio
async def test_a_late_response_of_the_previous_artifact_is_not_the_new_ones_evidence(
    tmp_path: Path,
) -> None:
    engine = SlowEngine()
    files = {"gemma.yaml": profile(GEMMA_SHA), "policy.yaml": POLICY}
    watch = watched_dir(tmp_path, files)
    svc, clock = sim_service(tmp_path, watch_dir=watch, engine=engine)
    app = svc.build_app()
    seen: list[RequestObservation] = []
    svc.tap.add(seen.append)
    svc.start_ticking()  # a heartbeat gets commands only from a tick that covered it
    body = {"model": "gemma", "messages": [{"role": "user", "content": "hi"}]}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://ctl"
    ) as client:
        node = SimNode.for_controller(
            svc.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
        )
        assert (await node.register()).status_code == 200
        await converge(svc, [node])
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
        assert svc.tap.flush(timeout=60.0)
        assert set(svc.controller.demand.evidence_bodies()) == {("gemma", "general", GEMMA_SHA)}

        engine.hold = True
        late = asyncio.create_task(client.post("/v1/chat/completions", json=body))
        await asyncio.wait_for(engine.entered.wait(), timeout=30)
        (watch / "gemma.yaml").write_text(profile(NEW_SHA))  # new weights for the model
        svc.source.reload()
        svc.controller.tick()
        assert svc.controller.demand.evidence_bodies() == {}  # old evidence retired
        engine.release.set()
        assert (await late).status_code == 200
        assert svc.tap.flush(timeout=60.0)

    svc.stop_ticking()
    assert seen[-1].artifact_sha256 == GEMMA_SHA  # the late response proved the old weights
    assert svc.controller.demand.evidence_bodies() == {}  # and taught the new ones nothing
