"""Small OpenAI-wire engines on real loopback ports, and an in-process router over them.

Each ``FakeEngine`` is a Starlette app on uvicorn (127.0.0.1, a free port). It
answers ``/health`` and ``/v1/chat/completions`` (JSON or SSE with final
usage), counts every POST, records the headers it saw and its peak
concurrency, and can be told to answer with scripted statuses or delays.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gridctl.controller.proxyfront import ProxyFront
from gridctl.controller.registry import Registry
from gridctl.router.keepalive import KeepAliveUpstream
from gridctl.router.proxy import Router, RouterContext
from gridctl.router.telemetry import TelemetryTap
from gridctl.router.upstream import Upstream

MODEL = "m"
SHA = "ab" * 32


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def completion(model: str, tokens: int = 3) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens},
    }


def sse_events(model: str, tokens: int) -> list[bytes]:
    events = []
    for i in range(tokens):
        chunk = {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "model": model,
            "choices": [{"index": 0, "delta": {"content": f"w{i} "}, "finish_reason": None}],
        }
        events.append(b"data: " + json.dumps(chunk).encode() + b"\n\n")
    final = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": model,
        "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens},
    }
    events.append(b"data: " + json.dumps(final).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


@dataclass
class FakeEngine:
    name: str
    concurrency: int = 2
    delay: float = 0.0
    port: int = field(default_factory=free_port)
    statuses: deque[int] = field(default_factory=deque)  # scripted answers, then 200
    posts: int = 0
    active: int = 0
    peak: int = 0
    held: bool = False  # while set, requests wait before their delay (at most 30 s)
    headers: list[dict[str, str]] = field(default_factory=list)
    max_tokens: list[object] = field(default_factory=list)  # each request's, as it arrived
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _chat(self, request: Request) -> Response:
        self.posts += 1
        self.headers.append(dict(request.headers))
        body = json.loads(await request.body())
        self.max_tokens.append(body.get("max_tokens"))
        self.active += 1
        self.peak = max(self.peak, self.active)
        try:
            until = time.monotonic() + 30.0
            while self.held and time.monotonic() < until:
                await asyncio.sleep(0.002)
            if self.delay:
                await asyncio.sleep(self.delay)
            status = self.statuses.popleft() if self.statuses else 200
            if status != 200:
                return JSONResponse({"error": {"message": f"scripted {status}"}}, status)
            if body.get("stream"):
                events = sse_events(body["model"], 4)

                async def emit() -> AsyncIterator[bytes]:
                    for event in events:
                        yield event

                return StreamingResponse(emit(), media_type="text/event-stream")
            return JSONResponse(completion(body["model"]))
        finally:
            self.active -= 1

    async def _health(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    def start(self) -> FakeEngine:
        app = Starlette(
            routes=[
                Route("/health", self._health),
                Route("/v1/chat/completions", self._chat, methods=["POST"]),
                # the same answer on the rest of the surface: routing is what is tested
                Route("/v1/completions", self._chat, methods=["POST"]),
                Route("/v1/embeddings", self._chat, methods=["POST"]),
            ]
        )
        config = uvicorn.Config(
            app, host="127.0.0.1", port=self.port, log_level="error", lifespan="off"
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 20
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError(f"engine {self.name} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def registration(
    engine: FakeEngine, *, state: str = "accepting", multiplier: float | None = None
) -> dict[str, Any]:
    envelope: dict[str, Any] = {
        "schema_version": 1,
        "state": state,
        "residencies": [
            {
                "model_id": MODEL,
                "memory_mb": 100,
                "state": "ready",
                "artifact_sha256": SHA,
                "managed": True,
                "ownership": "managed",
                "endpoint": engine.endpoint,
                "max_concurrency": engine.concurrency,
            }
        ],
        "engine_api_key": f"key-{engine.name}",
    }
    if multiplier is not None:
        envelope["concurrency_multiplier"] = multiplier
    return {
        "role": "allocator",
        "host_id": engine.name,
        "models": [MODEL],
        "resources": {"capacity_mb": 4096},
        "allocator": envelope,
    }


@dataclass
class RouterRig:
    """A router over a registry whose routes point at real loopback engines."""

    registry: Registry
    clock: Clock
    tap: TelemetryTap
    upstream: Upstream
    router: Router

    @classmethod
    def build(
        cls,
        *,
        admission_wait: float = 5.0,
        endpoints: tuple[str, ...] | None = None,
    ) -> RouterRig:
        registry = Registry(route_lease_seconds=1e9)
        clock = Clock()
        tap = TelemetryTap()
        upstream = KeepAliveUpstream(ssl.create_default_context())  # as the controller's
        router = Router(
            RouterContext(
                registry=registry,
                clock=clock,
                is_configured=lambda model: model == MODEL,
                unavailable_reason=lambda _m: "test",
                tap=tap,
                upstream=upstream,
                admission_wait_seconds=admission_wait,
                endpoints_of=lambda model: endpoints if model == MODEL else None,
            )
        )
        return cls(registry, clock, tap, upstream, router)

    def add(self, engine: FakeEngine, **kw: Any) -> None:
        self.registry.register(engine.name, registration(engine, **kw), self.clock())
        self.registry.corroborate(engine.name, MODEL, engine.endpoint, self.clock())

    def remove(self, engine: FakeEngine) -> None:
        self.registry.forget(engine.name)

    def client(self, address: str = "127.0.0.1") -> httpx.AsyncClient:
        """A caller of the router from ``address`` (a loopback address names a caller)."""
        app = Starlette(routes=self.router.routes())  # the forwarded POSTs as the controller's
        app.add_middleware(ProxyFront, router=self.router, check=lambda _request: (None, None))
        transport = httpx.ASGITransport(app=app, client=(address, 50000))
        return httpx.AsyncClient(transport=transport, base_url="http://router", timeout=30)


async def chat(client: httpx.AsyncClient, **extra: Any) -> httpx.Response:
    headers = extra.pop("headers", None)
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}
    return await client.post("/v1/chat/completions", json=body, headers=headers)
