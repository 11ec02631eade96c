"""The router's engine connections (``gridctl.router.keepalive``) against real HTTP on loopback.

The engines are a Starlette app on uvicorn (framing by content length and chunked,
``Connection: close``, a body broken off mid-way, a short keep-alive that closes idle
connections) and, where an engine must misbehave below HTTP (take a request and close
without answering, never answer), an asyncio server reading the socket. Everything runs
on the test's event loop. The real llama-server is covered through the router in
``tests/e2e``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import uvicorn
import uvloop
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from gridctl.router import keepalive
from gridctl.router.keepalive import KeepAliveUpstream
from gridctl.router.upstream import UpstreamError

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


class Engine:
    """What the Starlette engine saw: POST bodies, and the client port of each."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.ports: list[int] = []

    async def _seen(self, request: Request) -> bytes:
        body = await request.body()
        self.bodies.append(body)
        self.ports.append(request.client.port if request.client else 0)
        return body

    async def echo(self, request: Request) -> Response:
        body = await self._seen(request)
        return JSONResponse(
            {
                "body": body.decode(),
                "authorization": request.headers.get("authorization"),
                "content_type": request.headers.get("content-type"),
            }
        )

    async def chunked(self, request: Request) -> Response:
        await self._seen(request)

        async def events() -> AsyncIterator[bytes]:
            for i in range(5):
                yield b"data: %d\n\n" % i
                await asyncio.sleep(0)

        return StreamingResponse(events(), media_type="text/event-stream")

    async def closing(self, request: Request) -> Response:
        await self._seen(request)
        return JSONResponse({"ok": True}, headers={"connection": "close"})

    async def broken_stream(self, request: Request) -> Response:
        await self._seen(request)

        async def events() -> AsyncIterator[bytes]:
            yield b"data: 0\n\n"
            raise RuntimeError("the engine died mid-answer")

        return StreamingResponse(events(), media_type="text/event-stream")

    async def error(self, request: Request) -> Response:
        await self._seen(request)
        return JSONResponse({"error": {"message": "busy"}}, status_code=503)

    def app(self) -> Starlette:
        routes = [
            Route("/echo", self.echo, methods=["POST"]),
            Route("/chunked", self.chunked, methods=["POST"]),
            Route("/closing", self.closing, methods=["POST"]),
            Route("/broken", self.broken_stream, methods=["POST"]),
            Route("/error", self.error, methods=["POST"]),
        ]
        starlette = Starlette(routes=routes)

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["path"] == "/short":
                self.ports.append(scope["client"][1])
                await self._short_body(receive, send)  # Content-Length promised, not kept
                return
            await starlette(scope, receive, send)

        return app  # type: ignore[return-value]

    async def _short_body(self, receive: Receive, send: Send) -> None:
        message = await receive()
        self.bodies.append(message.get("body", b""))
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"100")]}
        )
        await send({"type": "http.response.body", "body": b"x" * 10, "more_body": True})
        raise RuntimeError("the engine died after 10 of 100 bytes")


@contextlib.asynccontextmanager
async def serving(engine: Engine, keep_alive: float = 5) -> AsyncIterator[str]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(
        engine.app(),
        host="127.0.0.1",
        port=port,
        log_level="critical",
        lifespan="off",
        timeout_keep_alive=keep_alive,  # type: ignore[arg-type]
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not server.started:
        assert loop.time() < deadline, "the engine did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


async def post(
    upstream: KeepAliveUpstream, url: str, body: bytes = b"{}"
) -> tuple[int, str | None, bytes]:
    response = await upstream.post(url, body, {"content-type": "application/json"})
    try:
        return response.status, response.content_type, await response.read()
    finally:
        await response.close()


LOOPS: dict[str, Callable[[], asyncio.AbstractEventLoop]] = {
    "asyncio": asyncio.new_event_loop,
    "uvloop": uvloop.new_event_loop,  # what uvicorn serves the controller on
}
Runner = Callable[[Callable[[KeepAliveUpstream], Awaitable[None]]], None]


@pytest.fixture(params=sorted(LOOPS))
def run(request: pytest.FixtureRequest) -> Runner:
    """Runs a test coroutine with a fresh upstream on each kind of event loop."""

    def runner(test: Callable[[KeepAliveUpstream], Awaitable[None]]) -> None:
        async def main() -> None:
            upstream = KeepAliveUpstream(ssl.create_default_context())
            try:
                await test(upstream)
            finally:
                await upstream.aclose()

        with asyncio.Runner(loop_factory=LOOPS[request.param]) as loop:
            loop.run(main())

    return runner


def test_a_content_length_answer_is_read_whole_and_its_connection_reused(run: Runner) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            for i in range(3):
                response = await upstream.post(
                    url + "/echo",
                    b'{"n": %d}' % i,
                    {"content-type": "application/json", "authorization": "Bearer k"},
                )
                assert response.status == 200
                assert response.content_type == "application/json"
                answer = json.loads(await response.read())
                await response.close()
                assert answer == {
                    "body": f'{{"n": {i}}}',
                    "authorization": "Bearer k",
                    "content_type": "application/json",
                }

    run(test)
    assert engine.bodies == [b'{"n": 0}', b'{"n": 1}', b'{"n": 2}']
    assert len(set(engine.ports)) == 1  # one kept connection served all three


def test_a_chunked_stream_arrives_in_order_and_its_connection_is_reused(run: Runner) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            for _ in range(2):
                response = await upstream.post(url + "/chunked", b"{}", {})
                assert response.content_type is not None
                assert response.content_type.startswith("text/event-stream")
                received = b"".join([chunk async for chunk in response.chunks()])
                await response.close()
                assert received == b"".join(b"data: %d\n\n" % i for i in range(5))

    run(test)
    assert len(engine.bodies) == 2 and len(set(engine.ports)) == 1


def test_an_error_status_is_an_answer_not_a_failure(run: Runner) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            status, _, body = await post(upstream, url + "/error")
            assert status == 503 and json.loads(body) == {"error": {"message": "busy"}}
            assert (await post(upstream, url + "/echo"))[0] == 200

    run(test)
    assert len(set(engine.ports)) == 1


def test_connection_close_is_honoured_and_the_next_request_opens_another(run: Runner) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            assert (await post(upstream, url + "/closing"))[0] == 200
            assert (await post(upstream, url + "/echo"))[0] == 200

    run(test)
    assert len(engine.bodies) == 2 and len(set(engine.ports)) == 2


@pytest.mark.parametrize("path", ["/broken", "/short"])
def test_a_body_broken_off_is_an_upstream_error_and_the_connection_is_dropped(
    run: Runner, path: str
) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            response = await upstream.post(url + path, b"{}", {})
            assert response.status == 200
            with pytest.raises(UpstreamError) as failed:
                if path == "/short":
                    await response.read()
                else:
                    async for _chunk in response.chunks():
                        pass
            await response.close()
            assert failed.value.kind in ("ServerDisconnected", "HttpParserError")
            assert (await post(upstream, url + "/echo"))[0] == 200  # a fresh connection

    run(test)
    assert len(engine.bodies) == 2 and len(set(engine.ports)) == 2


def test_an_answer_not_read_to_the_end_drops_its_connection(run: Runner) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            response = await upstream.post(url + "/chunked", b"{}", {})
            await response.close()  # the caller left before the stream ended
            assert (await post(upstream, url + "/echo"))[0] == 200

    run(test)
    assert len(set(engine.ports)) == 2


def test_a_pooled_connection_the_engine_closed_while_idle_is_not_used(
    run: Runner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The engine's keep-alive (0.2 s) ends while the connection is idle: the next POST
    goes on a new connection, succeeds, and reaches the engine once."""
    monkeypatch.setattr(keepalive, "IDLE_SECONDS", 60.0)  # the pool would still use it
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine, keep_alive=0.2) as url:
            assert (await post(upstream, url + "/echo", b'{"n": 1}'))[0] == 200
            (kept,) = [c for idle in upstream._idle.values() for c in idle]
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 20
            while kept.alive:  # the engine's close reaches the idle connection
                assert loop.time() < deadline, "the engine never closed the idle connection"
                await asyncio.sleep(0.02)
            assert (await post(upstream, url + "/echo", b'{"n": 2}'))[0] == 200

    run(test)
    assert engine.bodies == [b'{"n": 1}', b'{"n": 2}']
    assert len(set(engine.ports)) == 2


def test_an_idle_connection_older_than_the_idle_limit_is_not_used(
    run: Runner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keepalive, "IDLE_SECONDS", 0.0)
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            for _ in range(2):
                assert (await post(upstream, url + "/echo"))[0] == 200

    run(test)
    assert len(set(engine.ports)) == 2


@contextlib.asynccontextmanager
async def raw_engine(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
) -> AsyncIterator[str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.close()


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    return await reader.readexactly(length)


def test_a_request_the_engine_took_and_closed_on_is_never_replayed(run: Runner) -> None:
    received: list[bytes] = []

    async def take_and_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received.append(await read_request(reader))
        writer.close()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with raw_engine(take_and_close) as url:
            with pytest.raises(UpstreamError) as failed:
                await upstream.post(url + "/v1/chat/completions", b'{"once": 1}', {})
            assert failed.value.kind == "ServerDisconnected"

    run(test)
    assert received == [b'{"once": 1}']


def test_an_unreachable_engine_is_an_upstream_error_naming_the_cause(run: Runner) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens once the probe is closed

    async def test(upstream: KeepAliveUpstream) -> None:
        with pytest.raises(UpstreamError) as failed:
            await upstream.post(f"http://127.0.0.1:{port}/v1/chat/completions", b"{}", {})
        assert failed.value.kind == "ConnectionRefusedError"

    run(test)


def test_an_engine_silent_past_the_read_timeout_is_a_timeout(
    run: Runner,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(keepalive, "READ_SECONDS", 0.2)
    gone = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        await reader.read()  # until the router drops the connection
        gone.set()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with raw_engine(silent) as url:
            with pytest.raises(UpstreamError) as failed:
                await upstream.post(url + "/v1/chat/completions", b"{}", {})
            assert failed.value.kind == "TimeoutError"
            await asyncio.wait_for(gone.wait(), 20)

    run(test)


def test_a_cancelled_request_propagates_and_drops_its_connection(run: Runner) -> None:
    gone = asyncio.Event()
    taken = asyncio.Event()

    async def silent(reader: asyncio.StreamReader, _writer: asyncio.StreamWriter) -> None:
        await read_request(reader)
        taken.set()
        await reader.read()
        gone.set()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with raw_engine(silent) as url:
            task = asyncio.create_task(upstream.post(url + "/x", b"{}", {}))
            await asyncio.wait_for(taken.wait(), 20)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(gone.wait(), 20)  # the engine sees the connection closed
            assert not upstream._idle.get(("http", "127.0.0.1", int(url.rsplit(":", 1)[1])))

    run(test)


def test_a_header_with_a_line_break_is_refused_before_anything_is_sent(run: Runner) -> None:
    engine = Engine()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with serving(engine) as url:
            with pytest.raises(UpstreamError) as failed:
                await upstream.post(url + "/echo", b"{}", {"accept": "a\r\nx-injected: 1"})
            assert failed.value.kind == "InvalidHeader"

    run(test)
    assert engine.bodies == []


def test_a_pooled_connection_closed_before_any_answer_byte_is_retried_once_fresh(
    run: Runner,
) -> None:
    """The keep-alive race: the engine answers a first request on a connection, then closes
    that connection as the second request arrives, without a byte of answer. The second
    request is sent once more on a fresh connection and succeeds (a fresh connection
    closed unanswered is never retried: ``..._never_replayed`` above)."""
    received: list[tuple[int, bytes]] = []
    connections = [0]

    async def answer_then_close_the_pooled_one(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        connections[0] += 1
        number = connections[0]
        while True:
            try:
                body = await read_request(reader)
            except (asyncio.IncompleteReadError, ConnectionError):
                return
            received.append((number, body))
            if number == 1 and len(received) > 1:
                writer.close()  # closed under the pooled connection's second request
                return
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            await writer.drain()

    async def test(upstream: KeepAliveUpstream) -> None:
        async with raw_engine(answer_then_close_the_pooled_one) as url:
            assert (await post(upstream, url + "/v1/chat/completions", b'{"n": 1}'))[0] == 200
            answer = await post(upstream, url + "/v1/chat/completions", b'{"n": 2}')
            assert (answer[0], answer[2]) == (200, b"ok")

    run(test)
    assert received == [(1, b'{"n": 1}'), (1, b'{"n": 2}'), (2, b'{"n": 2}')]
