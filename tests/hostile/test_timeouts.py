"""A peer cannot hold a connection open by sending slowly.

Headers: the controller's HTTP protocol (uvicorn, served as ``gridctl controller``
serves it) closes a connection that sends nothing, or half a request's headers,
after ``HEADER_SECONDS``. Bodies: a body that has not all arrived ``BODY_SECONDS``
after its headers is a 408 from the controller and from the router.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import uvicorn

from gridctl import bodies
from gridctl.controller import onewrite
from gridctl.controller.serving import ControllerService, ServiceOptions, server_config
from tests.controller.simnodes import Clock

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def service(tmp_path: Path) -> ControllerService:
    return ControllerService(
        ServiceOptions(state_dir=tmp_path / "state", watch_dir=None, clock=Clock(2_000_000.0))
    )


async def stalled() -> AsyncIterator[bytes]:
    """A body that sends its first bytes, then nothing more."""
    yield b'{"mode": '
    await asyncio.Event().wait()


async def test_a_body_that_stops_arriving_is_a_408(
    service: ControllerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bodies, "BODY_SECONDS", 0.2)
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    ) as http:
        answer = await http.put("/allocator/mode", headers=admin, content=stalled())
        assert answer.status_code == 408
        assert "not received within" in answer.json()["error"]["message"]
        routed = await http.post("/v1/chat/completions", content=stalled())
        assert routed.status_code == 408
        assert routed.json()["error"]["type"] == "invalid_request_error"
    assert service.controller.steering.override() is None


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server closes the connection (EOF) within ``seconds``."""
    try:
        async with asyncio.timeout(seconds):
            return await reader.read() == b""
    except TimeoutError:
        return False


async def test_silent_and_half_header_connections_are_closed(
    service: ControllerService, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(onewrite, "HEADER_SECONDS", 0.3)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = server_config(service.build_app(), "127.0.0.1", port, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while not server.started:
        assert loop.time() < deadline, "the controller did not start"
        await asyncio.sleep(0.01)
    try:
        silent_reader, silent_writer = await asyncio.open_connection("127.0.0.1", port)
        half_reader, half_writer = await asyncio.open_connection("127.0.0.1", port)
        half_writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # no blank line: unfinished
        await half_writer.drain()
        assert await closed_within(silent_reader, 10.0)
        assert await closed_within(half_reader, 10.0)
        for writer in (silent_writer, half_writer):
            writer.close()
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            for _ in range(2):  # a kept-alive connection's next request has its own deadline
                assert (await http.get("/healthz")).status_code == 200
    finally:
        server.should_exit = True
        await task
