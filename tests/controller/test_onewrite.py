"""The controller's HTTP server (``serving.server_config``: uvicorn with responses sent
in one write) speaks HTTP/1.1 as uvicorn does: whole answers, streamed answers chunk by
chunk, HEAD, pipelined requests answered in order, and ``Connection: close``.

A real uvicorn on loopback, spoken to over a raw socket so nothing smooths the wire.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from gridctl.controller.serving import server_config

release = threading.Event()


async def whole(request: Request) -> Response:
    return PlainTextResponse(f"whole {request.query_params.get('n', '')}")


async def streamed(_request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        yield b"first;"
        # the second chunk waits until the test has read the first
        await asyncio.to_thread(release.wait, 30)
        yield b"second"

    return StreamingResponse(chunks(), media_type="text/plain")


answered = threading.Event()


async def hold_loop_until_answered() -> None:
    # no await: the loop's step, and anything left to send in it, waits for the client
    answered.wait(30)


async def then_background(_request: Request) -> Response:
    return PlainTextResponse("answered", background=BackgroundTask(hold_loop_until_answered))


APP = Starlette(
    routes=[
        Route("/whole", whole, methods=["GET", "HEAD"]),
        Route("/stream", streamed),
        Route("/background", then_background),
    ]
)


@contextmanager
def serving() -> Iterator[int]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    server = uvicorn.Server(server_config(APP, "127.0.0.1", port))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def read_until(conn: socket.socket, marker: bytes, deadline: float = 30.0) -> bytes:
    conn.settimeout(deadline)
    data = b""
    while marker not in data:
        chunk = conn.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def read_all(conn: socket.socket) -> bytes:
    conn.settimeout(30)
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def test_pipelined_requests_are_answered_whole_and_in_order() -> None:
    with serving() as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(
            b"GET /whole?n=1 HTTP/1.1\r\nhost: x\r\n\r\n"
            b"HEAD /whole?n=2 HTTP/1.1\r\nhost: x\r\n\r\n"
            b"GET /whole?n=3 HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n"
        )
        answer = read_all(conn)  # the server closes after the third
    parts = answer.split(b"HTTP/1.1 200 OK\r\n")
    assert len(parts) == 4 and parts[0] == b""
    assert parts[1].endswith(b"\r\n\r\nwhole 1")
    assert b"content-length: 7\r\n" in parts[2] and parts[2].endswith(b"\r\n\r\n")  # HEAD
    assert b"connection: close\r\n" in parts[3] and parts[3].endswith(b"\r\n\r\nwhole 3")


def test_a_streamed_answer_goes_out_chunk_by_chunk() -> None:
    release.clear()
    with serving() as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /stream HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
        head = read_until(conn, b"first;")  # arrives while the second is still held back
        release.set()
        rest = read_all(conn)
    assert head.startswith(b"HTTP/1.1 200 OK\r\n") and b"transfer-encoding: chunked" in head
    assert b"6\r\nfirst;\r\n" in head
    assert rest.endswith(b"6\r\nsecond\r\n0\r\n\r\n")


def test_a_whole_answer_is_sent_before_its_background_task_runs() -> None:
    answered.clear()
    with serving() as port, socket.create_connection(("127.0.0.1", port)) as conn:
        conn.sendall(b"GET /background HTTP/1.1\r\nhost: x\r\n\r\n")
        started = time.monotonic()
        # the background task holds the loop until this read returns (or 30 s pass)
        answer = read_until(conn, b"answered", deadline=60)
        waited = time.monotonic() - started
        answered.set()
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(b"\r\n\r\nanswered")
    assert waited < 25, waited  # not released by the background task's own timeout
