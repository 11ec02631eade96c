"""Queued work from a real llama-server reaches the heartbeat and the planner's target.

One engine slot (``-np 1``) and more concurrent requests than slots: the
node's activity probe reads llama-server's deferred requests from its
authenticated ``/metrics``, the node agent reports them (host ``queue_depth``
and the residency's ``queued_requests``) to the real controller app, and the
controller's next plan wants a second replica where it wanted one before.
"""

from __future__ import annotations

import asyncio
import textwrap
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.credentials import issue_node_credential, load_or_create_signing_key
from gridctl.node.agent import NodeAgent
from gridctl.node.executor import CommandExecutor
from gridctl.node.intake import CommandIntake
from gridctl.node.reports import HostFacts
from tests.node.conftest import (
    GEMMA_SHA256,
    MODEL_ID,
    NodeParts,
    build_parts,
    free_port_range,
    gemma_load,
    gemma_warm,
    stop_children_of,
)

pytestmark = pytest.mark.e2e
HOST = "queue-host"


@pytest.fixture
def one_slot(tmp_path: Path, shared_artifacts: Path, llama_binary: Path) -> Iterator[NodeParts]:
    state_dir = tmp_path / "node"
    parts = build_parts(state_dir, shared_artifacts, llama_binary, free_port_range())
    parts.runtime.settings = replace(parts.runtime.settings, parallel=1)
    try:
        yield parts
    finally:
        parts.runtime.reap()
        parts.store.close()
        stop_children_of(state_dir)


def _bridge(app: Any) -> httpx.MockTransport:
    """The node agent's synchronous HTTP, carried to the real controller app in-process."""

    async def forward(request: httpx.Request) -> httpx.Response:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            answer = await client.request(
                request.method, request.url.path, content=request.content, headers=request.headers
            )
            return httpx.Response(
                answer.status_code, content=answer.content, headers=answer.headers
            )

    return httpx.MockTransport(lambda request: asyncio.run(forward(request)))


def _controller(tmp_path: Path) -> tuple[ControllerService, Any]:
    watch = tmp_path / "policies"
    watch.mkdir()
    (watch / "gemma.yaml").write_text(
        textwrap.dedent(f"""\
            apiVersion: gridctl/v1
            kind: ModelProfile
            metadata: {{name: {MODEL_ID}}}
            spec:
              memory_mb: 640
              artifact: {{sha256: '{GEMMA_SHA256}'}}
              min_replicas: 1
              max_replicas: 2
            """)
    )
    svc = ControllerService(ServiceOptions(state_dir=tmp_path / "ctl", watch_dir=watch))
    return svc, svc.build_app()


def _target(svc: ControllerService) -> int:
    _, outcome = svc.controller.dry_run()
    return dict(outcome.plan.targets)[MODEL_ID]


def _ask(port: int, key: str, answers: list[int]) -> None:
    response = httpx.post(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        json={
            "model": MODEL_ID,
            "messages": [{"role": "user", "content": "Count from one to two hundred."}],
            "max_tokens": 64,  # three requests wait while one runs: seconds of queue
        },
        headers={"Authorization": f"Bearer {key}"},
        timeout=300,
    )
    answers.append(response.status_code)


async def _probe_once(svc: ControllerService) -> None:
    """One probe pass outside the app's lifespan, closing the probe client on the loop
    that opened its connections (as the lifespan does)."""
    try:
        await svc.probe_once(svc.upstream)
    finally:
        await svc.upstream.aclose()


def test_queued_requests_reach_the_heartbeat_and_raise_the_target(
    one_slot: NodeParts, tmp_path: Path
) -> None:
    parts = one_slot
    parts.actuator.load(gemma_load())
    parts.actuator.warm(gemma_warm())
    record = parts.store.residency(MODEL_ID)
    assert record is not None and record.port is not None

    svc, app = _controller(tmp_path)
    token = issue_node_credential(
        load_or_create_signing_key(svc.options.state_dir), HOST, now=time.time()
    )
    agent_ref: list[NodeAgent] = []
    agent = NodeAgent(
        facts=HostFacts(host_id=HOST, capacity_mb=8192),
        actuator=parts.actuator,
        executor=CommandExecutor(parts.actuator, lambda: agent_ref[0].host_state()),
        intake=CommandIntake(parts.store, HOST),
        controller_url="http://127.0.0.1:9",
        token=lambda: token,
        engine_api_key=parts.api_key,
        transport=_bridge(app),
    )
    agent_ref.append(agent)
    agent.register()
    agent.heartbeat(request_commands=False)
    asyncio.run(_probe_once(svc))  # the controller corroborates the engine
    assert _target(svc) == 1

    answers: list[int] = []
    askers = [
        threading.Thread(target=_ask, args=(record.port, parts.api_key, answers)) for _ in range(4)
    ]
    for asker in askers:
        asker.start()
    try:
        deadline = time.monotonic() + 120
        while not parts.actuator.queued.get(MODEL_ID):
            assert time.monotonic() < deadline, "llama-server never reported a deferred request"
            parts.actuator.refresh()
        queued = parts.actuator.queued[MODEL_ID]
        sent = agent.heartbeat(request_commands=False)
        assert sent is not None
        host = svc.registry.host(HOST)
        assert host is not None and host.queue_depth == queued > 0
        assert host.queued == {MODEL_ID: queued}
        print(f"queued requests reported: {queued}")
        assert _target(svc) == 2
    finally:
        for asker in askers:
            asker.join(timeout=300)
    assert answers == [200] * 4
