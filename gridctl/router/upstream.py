"""The router's requests to engines: one POST, and the engine's status, type and body.

Production uses ``gridctl.router.keepalive.KeepAliveUpstream``: pooled HTTP/1.1
connections on asyncio protocols with httptools' parser (a general client's
per-call work was the largest part of the router's CPU per request).
``HttpxUpstream`` wraps an ``httpx.AsyncClient``, so tests can stand engines
up behind ``httpx.MockTransport`` or an ASGI app.

Either way a failure to reach the engine, or a body it broke off, is an
``UpstreamError`` naming the cause's type; a cancelled request (the caller left)
propagates as cancellation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

import httpx


class UpstreamError(Exception):
    """The engine could not be reached, or broke its response off."""

    def __init__(self, kind: str, detail: str = "") -> None:
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


class EngineResponse(Protocol):
    status: int
    content_type: str | None

    async def read(self) -> bytes: ...

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def close(self) -> None: ...


class Upstream(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> EngineResponse: ...

    async def aclose(self) -> None: ...


# --- httpx (test engines) -----------------------------------------------------------------


class _HttpxResponse:
    __slots__ = ("_response", "content_type", "status")

    def __init__(self, response: httpx.Response) -> None:
        self._response = response
        self.status = response.status_code
        self.content_type = response.headers.get("content-type")

    async def read(self) -> bytes:
        try:
            return await self._response.aread()
        except httpx.HTTPError as exc:
            raise UpstreamError(type(exc).__name__, str(exc)) from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:
            raise UpstreamError(type(exc).__name__, str(exc)) from exc

    async def close(self) -> None:
        await self._response.aclose()


class HttpxUpstream:
    """Engines over an ``httpx.AsyncClient`` (its transport decides how they are reached)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> EngineResponse:
        request = self.client.build_request("POST", url, content=body, headers=headers)
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise UpstreamError(type(exc).__name__, str(exc)) from exc
        return _HttpxResponse(response)

    async def aclose(self) -> None:
        await self.client.aclose()
