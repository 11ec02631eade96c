"""Router tunables of the ControllerPolicy act on the live router (in-process controller).

``circuit_failure_threshold`` in the policy YAML decides after how many
consecutive 5xx answers a replica's breaker opens.
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService
from tests.controller.simnodes import GEMMA_SHA, Clock, SimNode, engine_handler, sim_service
from tests.controller.test_http_flow import converge, profile

FAILING = {"on": False}


def failing_engine(request: httpx.Request) -> httpx.Response:
    """The simulated engine, answering 503 to inference while ``FAILING["on"]``."""
    if FAILING["on"] and not request.url.path.endswith("/health"):
        return httpx.Response(503, json={"error": "overloaded"})
    return engine_handler(request)


def policy_yaml(threshold: int, key_bytes: int = 256) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gridctl/v1
        kind: ControllerPolicy
        metadata: {{name: p}}
        spec:
          mode: automatic
          circuit_failure_threshold: {threshold}
          affinity_key_max_bytes: {key_bytes}
        """)


async def _service(tmp_path: Path, threshold: int) -> tuple[ControllerService, Any, Clock]:
    files = {"gemma.yaml": profile("gemma", max_replicas=1), "policy.yaml": policy_yaml(threshold)}
    service, clock = sim_service(tmp_path, files, engine=failing_engine)
    return service, service.build_app(), clock


async def failures_until_open(tmp_path: Path, threshold: int) -> int:
    service, app, clock = await _service(tmp_path, threshold)
    service.start_ticking()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            node = SimNode.for_controller(
                service.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
            )
            assert (await node.register()).status_code == 200
            await converge(service, [node])
            body = {"model": "gemma", "messages": [{"role": "user", "content": "hi"}]}
            ok = await client.post("/v1/chat/completions", json=body)
            assert ok.status_code == 200, ok.text
            FAILING["on"] = True
            try:
                for sent in range(1, 10):
                    answer = await client.post("/v1/chat/completions", json=body)
                    assert answer.status_code >= 500
                    if service.router.breakers.describe():
                        return sent
                return -1
            finally:
                FAILING["on"] = False
    finally:
        service.stop_ticking()


@pytest.mark.anyio
@pytest.mark.parametrize("threshold", [2, 4])
async def test_circuit_failure_threshold_in_yaml_decides_when_the_breaker_opens(
    tmp_path: Path, threshold: int
) -> None:
    assert await failures_until_open(tmp_path, threshold) == threshold
