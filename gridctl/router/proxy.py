"""OpenAI-compatible endpoints that forward to admitted, ready child engines.

Only ``model``, ``stream`` and the token-limit hint of a request body are read;
the body is forwarded untouched and nothing of it is kept. The upstream hop
carries the private engine key instead of the caller's credentials. A failed
POST is never replayed: the caller gets the error and the next request may go
elsewhere.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gridctl.controller.registry import EngineRoute, Registry
from gridctl.router.choosing import choose_route
from gridctl.router.telemetry import RequestObservation, TelemetryTap

MAX_BODY_BYTES = 16 * 1024 * 1024
HOP_HEADERS = {"content-type", "accept"}


def openai_error(status: int, message: str, kind: str, code: str | None = None) -> JSONResponse:
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return JSONResponse(body, status_code=status)


@dataclass
class RouterContext:
    """What the router needs from the controller."""

    registry: Registry
    clock: Callable[[], float]
    is_configured: Callable[[str], bool]
    unavailable_reason: Callable[[str], str]
    tap: TelemetryTap
    client: httpx.AsyncClient


def _usage_tokens(payload: Any) -> int:
    if isinstance(payload, dict):
        usage = payload.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("completion_tokens"), int):
            return int(usage["completion_tokens"])
    return 0


class Router:
    def __init__(self, context: RouterContext) -> None:
        self.ctx = context

    def routes(self) -> list[Route]:
        return [
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/v1/chat/completions", self.chat, methods=["POST"]),
            Route("/v1/completions", self.completions, methods=["POST"]),
            Route("/v1/embeddings", self.embeddings, methods=["POST"]),
        ]

    async def list_models(self, request: Request) -> Response:
        now = self.ctx.clock()
        data = [
            {"id": model, "object": "model", "created": 0, "owned_by": "gridctl"}
            for model in self.ctx.registry.served_models(now)
        ]
        return JSONResponse({"object": "list", "data": data})

    async def chat(self, request: Request) -> Response:
        return await self._forward(request, "chat", "/v1/chat/completions")

    async def completions(self, request: Request) -> Response:
        return await self._forward(request, "completions", "/v1/completions")

    async def embeddings(self, request: Request) -> Response:
        return await self._forward(request, "embeddings", "/v1/embeddings")

    async def _forward(self, request: Request, endpoint: str, path: str) -> Response:
        started = time.monotonic()
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return openai_error(413, "request body too large", "invalid_request_error")
        try:
            payload = json.loads(body or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            return openai_error(400, "request body is not valid JSON", "invalid_request_error")
        if not isinstance(payload, dict):
            return openai_error(400, "request body must be a JSON object", "invalid_request_error")
        model = payload.get("model")
        if not isinstance(model, str) or not model:
            return openai_error(400, "'model' is required", "invalid_request_error", "model")
        stream = bool(payload.get("stream", False))
        now = self.ctx.clock()
        units_in = len(body) // 4

        def observe(outcome: str, status: int, host: str | None, units_out: int = 0) -> None:
            self.ctx.tap.emit(
                RequestObservation(
                    t=self.ctx.clock(),
                    endpoint=endpoint,
                    model=model,
                    served_model=model if host else None,
                    host_id=host,
                    outcome=outcome,
                    status=status,
                    service_seconds=time.monotonic() - started,
                    input_units=units_in,
                    output_units=units_out,
                )
            )

        if not self.ctx.is_configured(model) and not self.ctx.registry.routable(model, now):
            return openai_error(
                404,
                f"The model '{model}' does not exist",
                "invalid_request_error",
                "model_not_found",
            )
        routes = self.ctx.registry.routable(model, now)
        route = choose_route(
            routes, lambda r: self.ctx.registry.active_requests(r.host_id, r.model_id)
        )
        if route is None:
            observe("rejected", 503, None)
            reason = self.ctx.unavailable_reason(model)
            return openai_error(
                503,
                f"model '{model}' has no ready replica: {reason}",
                "service_unavailable",
                "no_ready_replica",
            )
        return await self._send(request, route, path, body, stream, observe)

    async def _send(
        self,
        request: Request,
        route: EngineRoute,
        path: str,
        body: bytes,
        stream: bool,
        observe: Callable[..., None],
    ) -> Response:
        registry, clock = self.ctx.registry, self.ctx.clock
        headers = {k: v for k, v in request.headers.items() if k.lower() in HOP_HEADERS}
        if route.api_key:
            headers["authorization"] = f"Bearer {route.api_key}"
        upstream = self.ctx.client.build_request(
            "POST", route.endpoint.rstrip("/") + path, content=body, headers=headers
        )
        registry.request_started(route.host_id, route.model_id, clock())
        try:
            response = await self.ctx.client.send(upstream, stream=True)
        except httpx.HTTPError as exc:
            registry.request_finished(route.host_id, route.model_id, clock())
            observe("error", 502, route.host_id)
            return openai_error(
                502,
                f"upstream engine on {route.host_id} failed: {type(exc).__name__}",
                "upstream_error",
            )
        ok = response.status_code < 400
        if not stream or not ok:
            try:
                content = await response.aread()
            finally:
                await response.aclose()
                registry.request_finished(route.host_id, route.model_id, clock())
            tokens = 0
            if ok:
                try:
                    tokens = _usage_tokens(json.loads(content))
                except (json.JSONDecodeError, UnicodeDecodeError):
                    tokens = 0
            observe("ok" if ok else "error", response.status_code, route.host_id, tokens)
            return Response(
                content,
                status_code=response.status_code,
                media_type=response.headers.get("content-type", "application/json"),
            )

        async def relay() -> AsyncIterator[bytes]:
            outcome = "error"
            try:
                async for chunk in response.aiter_raw():
                    yield chunk
                outcome = "ok"
            finally:
                await response.aclose()
                registry.request_finished(route.host_id, route.model_id, clock())
                observe(outcome, response.status_code, route.host_id)

        return StreamingResponse(
            relay(),
            status_code=response.status_code,
            media_type=response.headers.get("content-type", "text/event-stream"),
        )
