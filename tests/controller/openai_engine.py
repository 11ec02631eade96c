"""A small OpenAI-compatible engine on a real loopback port, for external-route tests.

Starlette on uvicorn (127.0.0.1, a free port) in a thread. It lists ``models``
in ``GET /v1/models`` (the list can change while it runs), answers
``/v1/chat/completions`` and ``/v1/completions`` for a listed model with
``status`` (200 by default), answers ``/health`` 200 whatever it serves (the
generic check native readiness must not trust), and counts what it answered:
one-token readiness probes (``max_tokens`` 1) apart from real requests.
``hold`` keeps requests in flight until ``release``.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.router.engines import completion, free_port

HOLD_LIMIT_SECONDS = 30.0  # a held request is answered after this even if never released


@dataclass
class OpenAIEngine:
    models: list[str]
    status: int = 200
    delay: float = 0.0
    port: int = field(default_factory=free_port)
    probes: int = 0  # one-token requests answered (the controller's readiness probe)
    served: int = 0  # other requests answered 2xx
    active: int = 0
    held: bool = False
    api_key: str | None = None  # when set, every /v1 request needs ``Bearer <api_key>`` (401)
    _server: uvicorn.Server | None = None
    _thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def hold(self) -> None:
        self.held = True

    def release(self) -> None:
        self.held = False

    def _refused(self, request: Request) -> Response | None:
        if self.api_key is None or request.headers.get("authorization") == f"Bearer {self.api_key}":
            return None
        return JSONResponse({"error": {"message": "invalid api key"}}, 401)

    async def _models(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        return JSONResponse({"object": "list", "data": [{"id": m} for m in self.models]})

    async def _health(self, _request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def _answer(self, request: Request) -> Response:
        if (refused := self._refused(request)) is not None:
            return refused
        body: dict[str, Any] = json.loads(await request.body())
        if body.get("model") not in self.models:
            return JSONResponse({"error": {"message": "model not found"}}, 404)
        self.active += 1
        try:
            until = time.monotonic() + HOLD_LIMIT_SECONDS
            while self.held and time.monotonic() < until:
                await asyncio.sleep(0.005)
            if self.delay:
                await asyncio.sleep(self.delay)
            if self.status != 200:
                return JSONResponse({"error": {"message": f"scripted {self.status}"}}, self.status)
            if body.get("max_tokens") == 1:
                self.probes += 1
            else:
                self.served += 1
            return JSONResponse(completion(str(body["model"]), tokens=1))
        finally:
            self.active -= 1

    def start(self) -> OpenAIEngine:
        app = Starlette(
            routes=[
                Route("/health", self._health),
                Route("/v1/models", self._models),
                Route("/v1/chat/completions", self._answer, methods=["POST"]),
                Route("/v1/completions", self._answer, methods=["POST"]),
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
                raise RuntimeError(f"engine on port {self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
