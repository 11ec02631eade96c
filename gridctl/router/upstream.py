"""The router's requests to engines: one POST, and the engine's status, type and body.

Production uses ``AiohttpUpstream``: aiohttp's connection pool and C parser,
called directly. Through httpx (even over aiohttp's transport) the proxy path
spent about a third of the router's own time per request in httpx's client
layer (request building, URL merging, cookie extraction, response wrapping)
for nothing the router uses (``benchmarks/router.py --fake``).
``HttpxUpstream`` wraps an ``httpx.AsyncClient``, so tests can stand engines
up behind ``httpx.MockTransport`` or an ASGI app.

Either way a failure to reach the engine, or a body it broke off, is an
``UpstreamError`` naming the library's exception type; a cancelled request
(the caller left) propagates as cancellation.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from typing import Protocol

import aiohttp
import httpx

POOL_CONNECTIONS = 100  # as httpx's default pool
KEEP_ALIVE_SECONDS = 5.0
CONNECT_SECONDS = 5.0
READ_SECONDS = 600.0  # a long generation may pause this long between bytes


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


# --- aiohttp (production) ---------------------------------------------------------------

_AIOHTTP_FAILURES = (aiohttp.ClientError, TimeoutError)


class _AiohttpResponse:
    __slots__ = ("_response", "content_type", "status")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self.status = response.status
        self.content_type = response.headers.get("content-type")

    async def read(self) -> bytes:
        try:
            return await self._response.read()
        except _AIOHTTP_FAILURES as exc:
            raise UpstreamError(type(exc).__name__, str(exc)) from exc

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except _AIOHTTP_FAILURES as exc:
            raise UpstreamError(type(exc).__name__, str(exc)) from exc

    async def close(self) -> None:
        self._response.release()  # back to the pool when read to the end, else dropped
        await self._response.wait_for_close()


class AiohttpUpstream:
    """Engines over aiohttp. ``verify`` is used as is, so a trust bundle loaded into it
    later (a CA rotation) applies to new connections. The session is made on first use,
    on the loop that serves the router."""

    def __init__(self, verify: ssl.SSLContext) -> None:
        self._verify = verify
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _open(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            connector = aiohttp.TCPConnector(
                ssl=self._verify, limit=POOL_CONNECTIONS, keepalive_timeout=KEEP_ALIVE_SECONDS
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=CONNECT_SECONDS, sock_read=READ_SECONDS
                ),
                # the body is relayed as sent: ask for it uncompressed, name no client
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                auto_decompress=False,
                trust_env=False,
            )
            self._loop = loop
        return self._session

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> EngineResponse:
        try:
            response = await self._open().post(
                url, data=body, headers=headers, allow_redirects=False
            )
        except _AIOHTTP_FAILURES as exc:
            raise UpstreamError(type(exc).__name__, str(exc)) from exc
        return _AiohttpResponse(response)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


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
