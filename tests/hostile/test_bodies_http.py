"""Oversized and deeply nested bodies against the real controller app (router included).

A body is refused on its declared length before it is read, and a body that
arrives without a length (chunked) is cut off as soon as it passes the limit.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from gridctl.controller.app import MAX_JSON_BYTES
from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.router.proxy import MAX_BODY_BYTES
from tests.controller.simnodes import Clock

pytestmark = pytest.mark.anyio


class Counted:
    """A chunked request body that records how much of it the server pulled."""

    def __init__(self, chunk: bytes, chunks: int) -> None:
        self.chunk, self.chunks, self.sent = chunk, chunks, 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for _ in range(self.chunks):
            self.sent += len(self.chunk)
            yield self.chunk


@pytest.fixture
def service(tmp_path: Path) -> ControllerService:
    return ControllerService(
        ServiceOptions(state_dir=tmp_path / "state", watch_dir=None, clock=Clock(2_000_000.0))
    )


def client(service: ControllerService) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=service.build_app()), base_url="http://ctl"
    )


async def test_declared_length_over_the_limit_is_refused_before_reading(
    service: ControllerService,
) -> None:
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    body = Counted(b" " * 65536, (MAX_JSON_BYTES // 65536) + 8)
    headers = {**admin, "Content-Length": str(MAX_JSON_BYTES + 1)}
    async with client(service) as http:
        request = http.build_request("PUT", "/allocator/mode", headers=headers, content=body)
        answer = await http.send(request)
    assert answer.status_code == 413
    assert "larger than" in answer.json()["error"]["message"]
    assert body.sent <= 65536  # nothing past what the transport pulls before the app runs
    assert service.controller.steering.override() is None


async def test_chunked_body_is_cut_off_at_the_limit(service: ControllerService) -> None:
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    chunk = b" " * 65536
    body = Counted(chunk, (MAX_JSON_BYTES // len(chunk)) * 4)
    async with client(service) as http:
        answer = await http.put("/allocator/mode", headers=admin, content=body)
    assert answer.status_code == 413
    assert body.sent <= MAX_JSON_BYTES + len(chunk)  # reading stopped at the limit
    assert service.controller.steering.override() is None


async def test_deep_nesting_is_a_400_naming_the_limit_on_every_json_route(
    service: ControllerService,
) -> None:
    admin = {"X-Grid-Allocator-Token": service.operator_token}
    deep = b'{"mode":' * 5000 + b'"observe"' + b"}" * 5000
    async with client(service) as http:
        for method, path in [
            ("PUT", "/allocator/mode"),
            ("POST", "/allocator/dry-run"),
            ("POST", "/allocator/evaluations"),
            ("PUT", "/allocator/models/m1"),
            ("PUT", "/allocator/external/e1"),
        ]:
            answer = await http.request(method, path, headers=admin, content=deep)
            assert answer.status_code == 400, (path, answer.text)
            assert "nested deeper than" in answer.json()["error"]["message"]
    assert service.controller.steering.override() is None


async def test_router_refuses_oversize_and_deep_bodies_with_openai_errors(
    service: ControllerService,
) -> None:
    async with client(service) as http:
        headers = {"Content-Length": str(MAX_BODY_BYTES + 1)}
        request = http.build_request(
            "POST", "/v1/chat/completions", headers=headers, content=Counted(b" " * 65536, 300)
        )
        too_big = await http.send(request)
        deep = b'{"model": "m", "messages": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        too_deep = await http.post("/v1/chat/completions", content=deep)
    assert too_big.status_code == 413
    assert too_big.json()["error"]["type"] == "invalid_request_error"
    assert too_deep.status_code == 400
    assert "nested deeper than" in too_deep.json()["error"]["message"]
