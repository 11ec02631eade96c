"""uvicorn's HTTP/1.1 protocol (httptools), sending each response in one write.

uvicorn writes the status line and headers, then the body, as two socket
writes: two system calls, two TCP segments, and a peer woken twice for every
answer. On the proxy path those writes were the largest single cost left in the
router's request handling (``benchmarks/router.py --fake``, py-spy). Here the
writes a response makes within one event-loop step are joined and sent at the end
of that step: a whole answer (headers and body, sent back to back) goes in one
write, and a streamed one goes out chunk by chunk as before, never held past the
step that produced it. A response's last write is sent the moment the response is
complete, before the work that follows it in the same step (the app's background
tasks, unwinding the middleware, arming the keep-alive timer).

It also bounds how long a peer may take to send a request's headers: a
connection that sends nothing, or starts a request and never finishes its
headers, is closed after ``HEADER_SECONDS`` (uvicorn itself only times out
idle keep-alive connections; the body's own deadline is ``gridctl.bodies``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HEADER_SECONDS = 10.0  # from a connection's first byte (or its opening) to a request's headers


class _JoinedWrites:
    """The transport as a response's writes see it: writes within one loop step are
    joined and sent, in order, by a callback at the end of that step (so a pipelined
    next response, started later, writes after it); closing sends what is held first."""

    __slots__ = ("_held", "_loop", "_on_response", "_transport")

    def __init__(
        self,
        transport: asyncio.Transport,
        loop: asyncio.AbstractEventLoop,
        on_response: Callable[[], None],
    ) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes] = []
        self._on_response = on_response

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def flush(self) -> None:
        held, self._held = self._held, []
        if held and not self._transport.is_closing():
            self._transport.write(held[0] if len(held) == 1 else b"".join(held))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def response_complete(self) -> None:
        """The cycle's ``on_response``: the whole answer goes out now, then the
        protocol's completion (which may start a pipelined request)."""
        self.flush()
        self._on_response()

    def is_closing(self) -> bool:
        return self._transport.is_closing()


class OneWriteHttpToolsProtocol(HttpToolsProtocol):
    """``HttpToolsProtocol`` whose responses are sent with one write per loop step, and
    whose peers get ``HEADER_SECONDS`` to send each request's headers."""

    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_timer()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._header_timer is None:  # a kept-alive connection's next request began
            self._arm_header_timer()

    def _arm_header_timer(self) -> None:
        self._header_timer = self.loop.call_later(HEADER_SECONDS, self._headers_late)

    def _disarm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._disarm_header_timer()
        super().on_headers_complete()
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            joined = _JoinedWrites(self.transport, self.loop, cycle.on_response)
            cycle.transport = joined  # type: ignore[assignment]
            cycle.on_response = joined.response_complete
