"""Fixtures for the dashboard tests: apps on saved status documents or on the real controller."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest

from gridctl.controller.serving import ControllerService, ServiceOptions
from gridctl.tui.app import DashboardApp, build_app
from tests.tui.situations import fixture_path

# git declares automatic, as in the saved situations
POLICY = (
    "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
    "spec:\n  mode: automatic\n"
)


class FakeClock:
    """A settable clock: tests decide how old the last good data is."""

    def __init__(self, now: float = 1_780_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class LiveController(httpx.BaseTransport):
    """The real controller app behind the dashboard's synchronous httpx client.

    A ``ControllerService`` (real operator capability, routes, store and tick) runs
    in-process; this transport hands each request to its Starlette app through
    ``httpx.ASGITransport`` on an event loop of its own. Only ``GET /allocator/status``
    is answered from ``status``: a document the real controller produced for the named
    situation (``tests/tui/controller_situations.py``), so a test shows that situation.
    ``down`` refuses connections, as a stopped controller does. Every request is
    recorded.
    """

    def __init__(self, status: dict[str, Any], root: Path) -> None:
        self.status = status
        self.requests: list[httpx.Request] = []
        self.down = False
        watch = root / "policies"
        watch.mkdir(parents=True)
        (watch / "policy.yaml").write_text(POLICY)
        self.service = ControllerService(ServiceOptions(state_dir=root / "state", watch_dir=watch))
        self._app = httpx.ASGITransport(app=self.service.build_app())
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    @property
    def token(self) -> str:
        return self.service.operator_token

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.service.upstream.aclose(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()
        self.service.store.close()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.requests.append(request)
        if request.method == "GET" and request.url.path == "/allocator/status":
            return httpx.Response(200, json=self.status)
        forwarded = httpx.Request(
            request.method, request.url, headers=request.headers, content=request.read()
        )

        async def through_the_app() -> httpx.Response:
            answer = await self._app.handle_async_request(forwarded)
            body = await answer.aread()
            return httpx.Response(answer.status_code, headers=answer.headers, content=body)

        return asyncio.run_coroutine_threadsafe(through_the_app(), self._loop).result(60)

    def mutations(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method != "GET"]


def file_app(name: str) -> DashboardApp:
    return build_app(from_file=fixture_path(name), clock=FakeClock())


def live_app(
    controller: LiveController,
    *,
    token: str | Literal["operator"] | None = "operator",
    clock: FakeClock | None = None,
) -> DashboardApp:
    """A dashboard on ``controller`` with its operator capability (or ``token``)."""
    return build_app(
        controller="https://controller.test",
        token=controller.token if token == "operator" else token,
        refresh_seconds=0,
        transport=controller,
        clock=clock or FakeClock(),
    )


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture_path(name).read_text(encoding="utf-8"))
    return data


@pytest.fixture
def make_controller(tmp_path: Path) -> Iterator[Callable[[str | None], LiveController]]:
    """Starts the real controller showing the named situation (None: no status yet)."""
    started: list[LiveController] = []

    def make(name: str | None) -> LiveController:
        status = load_fixture(name) if name is not None else {}
        started.append(LiveController(status, tmp_path / f"controller-{len(started)}"))
        return started[-1]

    yield make
    for controller in started:
        controller.close()
