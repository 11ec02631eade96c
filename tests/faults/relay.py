"""A faulty network between node daemons and the controller: a real HTTP relay on loopback.

Nodes are started with ``--controller`` pointing here; every request is forwarded
unchanged to the real controller and its answer returned unchanged, unless the
test installs a fault: ``on_request(path, body) -> body`` rewrites what a node
sends (acknowledgements duplicated, held back, replayed), ``on_response(path,
body) -> body`` rewrites what the controller answers (commands duplicated,
reordered, replayed later), and ``on_answer(path, body)`` may raise
:class:`DropResponse` to lose a response the controller has already produced.
The relay is the only thing that lies; node and controller are the real
processes.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

Body = dict[str, Any]


class DropResponse(Exception):
    """Raised by ``on_answer``: the node gets a broken connection instead of the answer."""


class Relay:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.on_request: Callable[[str, Body], Body] | None = None
        self.on_response: Callable[[str, Body], Body] | None = None
        self.on_answer: Callable[[str, Body], None] | None = None
        self.seen_commands: list[dict[str, Any]] = []  # every command the controller sent
        self.lock = threading.Lock()
        self.app = Starlette(
            routes=[Route("/{path:path}", self.forward, methods=["GET", "POST", "PUT", "DELETE"])]
        )
        self.port = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def clear(self) -> None:
        self.on_request = self.on_response = self.on_answer = None

    async def forward(self, request: Request) -> Response:
        path = "/" + request.path_params["path"]
        raw = await request.body()
        body: Any = None
        if raw and request.headers.get("content-type", "").startswith("application/json"):
            body = json.loads(raw)
            if self.on_request is not None and isinstance(body, dict):
                body = self.on_request(path, body)
            raw = json.dumps(body).encode()
        headers = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in ("host", "content-length", "connection")
        }
        async with httpx.AsyncClient(timeout=60) as client:
            try:
                answer = await client.request(
                    request.method,
                    self.upstream + path,
                    content=raw,
                    headers=headers,
                    params=request.query_params,
                )
            except httpx.HTTPError:
                return Response(status_code=502)
        content = answer.content
        kind = answer.headers.get("content-type", "")
        if kind.startswith("application/json") and content:
            reply = json.loads(content)
            if isinstance(reply, dict):
                commands = (reply.get("allocator") or {}).get("commands") or []
                with self.lock:
                    self.seen_commands.extend(commands)
                if self.on_answer is not None:
                    try:
                        self.on_answer(path, reply)
                    except DropResponse:
                        return Response(status_code=502)
                if self.on_response is not None:
                    reply = self.on_response(path, reply)
                content = json.dumps(reply).encode()
        return Response(content, status_code=answer.status_code, media_type=kind or None)


@contextmanager
def running_relay(upstream: str) -> Iterator[Relay]:
    relay = Relay(upstream)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    relay.port = int(sock.getsockname()[1])
    config = uvicorn.Config(relay.app, log_level="warning", lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline, "relay did not start"
        time.sleep(0.02)
    try:
        yield relay
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
