"""The router's requests to engines: HTTP/1.1 keep-alive connections on asyncio protocols.

The proxy needs one thing from an HTTP client: send a POST, then hand over the
answer's status, content type and body (whole, or chunk by chunk for SSE). A
general client does far more per call: aiohttp's request and response objects,
its connector's bookkeeping, cookie handling, per-request timers and tracing hooks
were about 40% of the router's CPU per request (``benchmarks/router.py --fake``,
cProfile: ~0.28 ms a call), on cores the engine computes on. Here a request is one
socket write of bytes built in one expression, and the answer is parsed by
httptools (llhttp, the parser uvicorn serves with) straight from the protocol's
``data_received``; a whole small answer usually arrives, and is complete, in one
read.

Connections are kept per (scheme, host, port). One goes back to the pool only
when its answer was read to the end and neither side asked to close it; any other
(a body not read to the end, a parse error, a timeout, the caller leaving) is
dropped. TLS uses the ``verify`` context as is, so a trust bundle loaded into it
later (a CA rotation) applies to new connections.

A pooled connection the engine closed while it was idle is seen closed before
anything is written (its end of stream was read by the loop) and is discarded;
the request takes another connection or opens one. An idle connection is used
for at most ``IDLE_SECONDS`` (below llama-server's 5 s keep-alive), so a request
rarely meets a connection the engine is about to close. When it does anyway (the
engine closes a pooled connection as the request goes out, before a byte of an
answer: under 100 concurrent streams this was 3-10% of requests), the request is
sent once more on a fresh connection. Any other failure is an ``UpstreamError``
and never a second attempt: a fresh connection that closes unanswered, or one
that dies after the answer began, may have run the request.

Failures are ``UpstreamError`` naming the cause (the OS or TLS error's type, the
parser's, ``TimeoutError``); a cancelled request (the caller left) propagates as
cancellation and drops its connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import httptools

from gridctl.router.upstream import UpstreamError

CONNECT_SECONDS = 5.0
READ_SECONDS = 600.0  # a long generation may pause this long between bytes
IDLE_SECONDS = 3.0  # below the engines' keep-alive (llama-server closes after 5 s idle)
IDLE_PER_ORIGIN = 100  # idle connections kept per engine
PAUSE_BYTES = 1 << 20  # unread answer bytes above which the socket is not read
TARGETS_KEPT = 1024  # parsed request URLs remembered
# how a connection closed under a request looks (no answer byte read): on a pooled
# connection this is the keep-alive race, and the request is sent once more
CLOSED_UNANSWERED = frozenset({"ServerDisconnected", "ConnectionResetError", "BrokenPipeError"})

Origin = tuple[str, str, int]  # scheme, host, port


class _Target:
    """A request URL, parsed once: where it goes and the request line and Host header."""

    __slots__ = ("head", "origin", "tls")

    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError("InvalidURL", url)
        tls = scheme == "https"
        try:
            port = parts.port or (443 if tls else 80)
        except ValueError as exc:
            raise UpstreamError("InvalidURL", url) from exc
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        if any(c in path or c in parts.netloc for c in "\r\n "):
            raise UpstreamError("InvalidURL", url)
        self.tls = tls
        self.origin: Origin = (scheme, parts.hostname, port)
        self.head = f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\n"


class _Connection(asyncio.Protocol):
    """One keep-alive connection and the answer it is receiving."""

    __slots__ = (
        "_buffered",
        "_chunks",
        "_error",
        "_framed",
        "_interim",
        "_last_read",
        "_paused",
        "_timer",
        "_waiter",
        "alive",
        "answered",
        "complete",
        "content_type",
        "headers_done",
        "idle_since",
        "in_flight",
        "keep",
        "loop",
        "origin",
        "parser",
        "status",
        "transport",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, origin: Origin) -> None:
        self.loop = loop
        self.origin = origin
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.alive = True  # not closed by either side
        self.idle_since = 0.0
        self.in_flight = False  # a request was sent and its answer not yet finished
        self._waiter: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.answered = False  # a byte of the answer arrived
        self.content_type: str | None = None
        self.headers_done = False
        self.complete = False
        self.keep = True  # no ``Connection: close`` seen
        self._framed = False  # a Content-Length or Transfer-Encoding: not read to EOF
        self._interim = False  # a 1xx answer before the real one
        self._error: UpstreamError | None = None
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._last_read = 0.0

    # -- the request -------------------------------------------------------------------

    def send(self, target: _Target, body: bytes, headers: dict[str, str]) -> None:
        """Write the request (one write) and start the read timeout."""
        assert self.transport is not None
        self._reset()
        lines = ""
        for name, value in headers.items():
            if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
                raise UpstreamError("InvalidHeader", f"header {name!r} holds a line break")
            lines += f"{name}: {value}\r\n"
        self.in_flight = True
        head = f"{target.head}{lines}Content-Length: {len(body)}\r\n\r\n".encode("latin-1")
        self.transport.write(head + body)
        self._last_read = self.loop.time()
        self._timer = self.loop.call_later(READ_SECONDS, self._check_read)

    def _check_read(self) -> None:
        self._timer = None
        if self.complete or self._error is not None:
            return
        quiet = self.loop.time() - self._last_read
        if self._paused or quiet < READ_SECONDS:  # paused: the reader is behind, not the engine
            self._timer = self.loop.call_later(READ_SECONDS - quiet, self._check_read)
            return
        self._fail(UpstreamError("TimeoutError", f"no byte from the engine in {READ_SECONDS:g} s"))
        self.abort()

    async def wait(self) -> None:
        """Until something new arrived (headers, body, the end) or the answer failed."""
        if self._error is None and not self._chunks and not self.complete:
            waiter = self.loop.create_future()
            self._waiter = waiter
            try:
                await waiter
            finally:
                self._waiter = None
        if self._error is not None and not self._chunks:
            raise self._error

    def take(self) -> bytes:
        """The body bytes received and not yet taken."""
        chunks = self._chunks
        if not chunks:
            return b""
        self._chunks, self._buffered = [], 0
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def finished(self) -> bool:
        """The answer ended; the connection can serve another request."""
        self.in_flight = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        return self.complete and self.keep and self.alive and not self._chunks

    def abort(self) -> None:
        self.alive = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.transport is not None:
            self.transport.abort()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _fail(self, error: UpstreamError) -> None:
        if self._error is None and not self.complete:
            self._error = error
        self._wake()

    # -- asyncio.Protocol --------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not subclasses

    def data_received(self, data: bytes) -> None:
        if not self.in_flight or self.complete:  # nothing was asked: not in a known state
            self.keep = False
            self.abort()
            return
        self._last_read = self.loop.time()
        self.answered = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamError(type(exc).__name__, str(exc)))
            self.abort()

    def eof_received(self) -> bool:
        self.alive = False
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.complete:
            return
        if self.headers_done and not self._framed and exc is None:
            self.complete = True  # a body delimited by the end of the connection
            self._wake()
            return
        kind = "ServerDisconnected" if exc is None else type(exc).__name__
        detail = "the engine closed the connection" if exc is None else str(exc)
        self._fail(UpstreamError(kind, detail))

    # -- httptools callbacks -----------------------------------------------------------

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-type":
            self.content_type = value.decode("latin-1")
        elif name == b"connection":
            if b"close" in value.lower():
                self.keep = False
        elif name in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        status = self.parser.get_status_code()
        if 100 <= status < 200:
            self._interim = True
            return
        self.status = status
        self.headers_done = True
        self._wake()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)
        self._buffered += len(body)
        if self._buffered > PAUSE_BYTES and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_complete(self) -> None:
        if self._interim:  # the real answer follows on the same connection
            self._interim = False
            self.content_type, self.keep, self._framed = None, True, False
            return
        self.complete = True
        if not self.parser.should_keep_alive():
            self.keep = False
        self._wake()


class _Response:
    """An engine's answer on one connection (``gridctl.router.upstream.EngineResponse``)."""

    __slots__ = ("_connection", "_upstream", "content_type", "status")

    def __init__(self, upstream: KeepAliveUpstream, connection: _Connection) -> None:
        self._upstream = upstream
        self._connection: _Connection | None = connection
        self.status = connection.status
        self.content_type = connection.content_type

    def _open(self) -> _Connection:
        if self._connection is None:
            raise UpstreamError("ResponseClosed", "the answer was already closed")
        return self._connection

    async def read(self) -> bytes:
        connection = self._open()
        parts: list[bytes] = []
        while True:
            data = connection.take()
            if data:
                parts.append(data)
            if connection.complete and not connection._chunks:
                break
            await connection.wait()
        return parts[0] if len(parts) == 1 else b"".join(parts)

    async def chunks(self) -> AsyncIterator[bytes]:
        connection = self._open()
        while True:
            data = connection.take()
            if data:
                yield data
                continue
            if connection.complete:
                return
            await connection.wait()

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._upstream._release(connection)


class KeepAliveUpstream:
    """Engines over pooled HTTP/1.1 connections (``gridctl.router.upstream.Upstream``).
    ``verify`` checks every TLS engine; it is used as is, so a bundle loaded into it
    later applies to new connections. Connections belong to the loop that made them."""

    def __init__(self, verify: ssl.SSLContext) -> None:
        self._verify = verify
        self._idle: dict[Origin, list[_Connection]] = {}
        self._targets: dict[str, _Target] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def _target(self, url: str) -> _Target:
        target = self._targets.get(url)
        if target is None:
            target = _Target(url)
            if len(self._targets) >= TARGETS_KEPT:
                self._targets.clear()
            self._targets[url] = target
        return target

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> _Response:
        target = self._target(url)
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # connections of another (finished) loop are useless
            self._drop_idle()
            self._loop = loop
        pooled = self._pooled(target.origin, loop.time())
        connection = pooled or await self._connect(target, loop)
        try:
            return await self._exchange(connection, target, body, headers)
        except UpstreamError as exc:
            if pooled is None or exc.kind not in CLOSED_UNANSWERED or connection.answered:
                raise
        # the engine closed a kept-alive connection before a byte of its answer (it timed
        # the connection out as the request went out): once more, on a fresh connection
        fresh = await self._connect(target, loop)
        return await self._exchange(fresh, target, body, headers)

    async def _exchange(
        self, connection: _Connection, target: _Target, body: bytes, headers: dict[str, str]
    ) -> _Response:
        try:
            connection.send(target, body, headers)
            while not connection.headers_done:
                await connection.wait()
        except BaseException:
            connection.abort()
            raise
        return _Response(self, connection)

    def _pooled(self, origin: Origin, now: float) -> _Connection | None:
        """The most recently used live idle connection to ``origin`` (others are closed)."""
        idle = self._idle.get(origin)
        while idle:
            connection = idle.pop()
            transport = connection.transport
            if (
                connection.alive
                and transport is not None
                and not transport.is_closing()
                and now - connection.idle_since < IDLE_SECONDS
            ):
                return connection
            connection.abort()
        return None

    async def _connect(self, target: _Target, loop: asyncio.AbstractEventLoop) -> _Connection:
        _, host, port = target.origin
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                _, connection = await loop.create_connection(
                    lambda: _Connection(loop, target.origin),
                    host,
                    port,
                    ssl=self._verify if target.tls else None,
                    server_hostname=host if target.tls else None,
                )
        except (OSError, TimeoutError) as exc:  # ssl.SSLError is an OSError
            raise UpstreamError(type(exc).__name__, str(exc)) from exc
        return connection

    def _release(self, connection: _Connection) -> None:
        if not connection.finished() or connection.loop is not self._loop:
            connection.abort()
            return
        now = connection.loop.time()
        connection.idle_since = now
        idle = self._idle.setdefault(connection.origin, [])
        while idle and (not idle[0].alive or now - idle[0].idle_since >= IDLE_SECONDS):
            idle.pop(0).abort()  # the oldest first: they expire in the order they came back
        if len(idle) >= IDLE_PER_ORIGIN:
            connection.abort()
            return
        idle.append(connection)

    def _drop_idle(self) -> None:
        idle, self._idle = self._idle, {}
        for connections in idle.values():
            for connection in connections:
                with contextlib.suppress(RuntimeError):  # its loop is closed: the GC closes it
                    connection.abort()

    async def aclose(self) -> None:
        self._drop_idle()
