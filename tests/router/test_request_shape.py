"""Malformed OpenAI requests are refused by the router (400 naming the field) and never
reach an engine, so a caller's mistakes cannot open a healthy engine's breaker.

The unit cases judge ``shape_refusal`` alone; the flow runs the real controller app
in-process with an engine behind ``httpx.MockTransport`` that, like llama-server,
answers 500 to the malformed shapes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from gridctl.router.requestshape import MAX_OUTPUT_TOKENS, shape_refusal
from tests.controller.simnodes import GEMMA_SHA, ONE_GEMMA, SimNode, engine_handler, sim_service

HELLO = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    ("endpoint", "payload", "param"),
    [
        ("chat", {"model": "m", "messages": HELLO, "tools": "x"}, "tools"),
        ("chat", {"model": "m", "messages": [{"role": 1, "content": "hi"}]}, "messages[0].role"),
        ("chat", {"model": "m", "messages": "hello"}, "messages"),
        ("chat", {"model": "m", "messages": []}, "messages"),
        (
            "chat",
            {"model": "m", "messages": [{"role": "user", "content": 7}]},
            "messages[0].content",
        ),
        (
            "chat",
            {"model": "m", "messages": [{"role": "user", "content": [{"type": "video"}]}]},
            "messages[0].content[0]",
        ),
        ("chat", {"model": "m", "messages": HELLO, "max_tokens": -1}, "max_tokens"),
        (
            "chat",
            {"model": "m", "messages": HELLO, "max_tokens": MAX_OUTPUT_TOKENS + 1},
            "max_tokens",
        ),
        ("chat", {"model": "m", "messages": HELLO, "max_tokens": "10"}, "max_tokens"),
        ("chat", {"model": "m", "messages": HELLO, "stream": "yes"}, "stream"),
        ("chat", {"model": "m", "messages": HELLO, "temperature": "hot"}, "temperature"),
        ("chat", {"model": "m", "messages": HELLO, "stop": [1]}, "stop"),
        ("chat", {"model": "m", "messages": HELLO, "k0": 1, "k1": 2}, "k0"),
        ("completions", {"model": "m", "prompt": {"a": 1}}, "prompt"),
        ("completions", {"model": "m", "prompt": "x", "n_predict": 0}, "n_predict"),
        ("embeddings", {"model": "m", "input": 5}, "input"),
        ("embeddings", {"model": "m", "input": "x", "max_tokens": 5}, "max_tokens"),
    ],
)
def test_malformed_requests_are_refused_naming_the_field(
    endpoint: str, payload: dict[str, Any], param: str
) -> None:
    refusal = shape_refusal(endpoint, payload)
    assert refusal is not None and refusal.param == param, refusal


@pytest.mark.parametrize(
    ("endpoint", "payload"),
    [
        ("chat", {"model": "m", "messages": HELLO}),
        (
            "chat",
            {
                "model": "m",
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": None, "tool_calls": []},
                ],
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                "tool_choice": "auto",
                "max_tokens": 8,
                "temperature": 0.2,
                "top_k": 40,
                "stop": ["\n"],
                "stream": True,
                "stream_options": {"include_usage": True},
                "cache_prompt": True,
            },
        ),
        ("completions", {"model": "m", "prompt": "once upon", "max_tokens": 4, "seed": 1}),
        ("embeddings", {"model": "m", "input": ["a", "b"], "encoding_format": "float"}),
    ],
)
def test_documented_requests_pass(endpoint: str, payload: dict[str, Any]) -> None:
    assert shape_refusal(endpoint, payload) is None


@pytest.mark.anyio
async def test_malformed_requests_never_reach_the_engine_nor_open_its_breaker(
    tmp_path: Path,
) -> None:
    reached: list[Any] = []

    def engine(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            body = json.loads(request.content)
            reached.append(body)
            if not isinstance(body.get("tools", []), list):
                return httpx.Response(500, json={"error": "tools must be an array"})
        return engine_handler(request)

    service, clock = sim_service(tmp_path, ONE_GEMMA, engine=engine)
    app = service.build_app()
    service.start_ticking()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            node = SimNode.for_controller(
                service.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
            )
            assert (await node.register()).status_code == 200
            for _ in range(8):
                await node.heartbeat()
                await service.probe_once(service.upstream)
            malformed = [
                {"model": "gemma", "messages": HELLO, "tools": "x"},
                {"model": "gemma", "messages": [{"role": 1, "content": "x"}]},
                {"model": "gemma", "messages": HELLO, "max_tokens": -1},
                {"model": "gemma", "messages": HELLO, **{f"k{i}": i for i in range(1000)}},
            ]
            for round_ in range(5):
                for body in malformed:
                    answer = await client.post("/v1/chat/completions", json=body)
                    assert answer.status_code == 400, (round_, answer.text)
                    assert answer.json()["error"]["param"]
                normal = await client.post(
                    "/v1/chat/completions", json={"model": "gemma", "messages": HELLO}
                )
                assert normal.status_code == 200, normal.text
    finally:
        service.stop_ticking()
    assert len(reached) == 5  # only the normal requests were forwarded
    assert service.router.breakers.describe() == []


@pytest.mark.anyio
async def test_a_models_max_output_tokens_bounds_its_requests(tmp_path: Path) -> None:
    """A profile's ``max_output_tokens`` lowers the router's bound for that model only:
    above it a 400 naming the field, never forwarded; at it the request is served."""
    reached: list[Any] = []

    def engine(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/chat/completions"):
            reached.append(json.loads(request.content))
        return engine_handler(request)

    files = dict(ONE_GEMMA)
    files["gemma.yaml"] += "  max_output_tokens: 64\n"
    service, clock = sim_service(tmp_path, files, engine=engine)
    app = service.build_app()
    service.start_ticking()
    try:
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ctl"
        ) as client:
            node = SimNode.for_controller(
                service.options.state_dir, "local-1", client, clock, cached={"gemma": GEMMA_SHA}
            )
            assert (await node.register()).status_code == 200
            for _ in range(8):
                await node.heartbeat()
                await service.probe_once(service.upstream)
            for name in ("max_tokens", "max_completion_tokens"):
                over = await client.post(
                    "/v1/chat/completions", json={"model": "gemma", "messages": HELLO, name: 65}
                )
                assert over.status_code == 400, over.text
                error = over.json()["error"]
                assert error["param"] == name
                assert "from 1 to 64 for model 'gemma'" in error["message"]
            at = await client.post(
                "/v1/chat/completions", json={"model": "gemma", "messages": HELLO, "max_tokens": 64}
            )
            assert at.status_code == 200, at.text
    finally:
        service.stop_ticking()
    assert [body.get("max_tokens") for body in reached] == [64]
