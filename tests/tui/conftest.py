"""Fixtures for the dashboard tests: apps built by the factory from saved status documents."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gridctl.tui.app import DashboardApp, build_app
from tests.tui.situations import fixture_path

TOKEN = "operator-token-for-tests-0123456789"


class FakeClock:
    """A settable clock: tests decide how old the last good data is."""

    def __init__(self, now: float = 1_780_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


class RecordingController:
    """An httpx MockTransport handler that serves a status document and records requests."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.status = status
        self.requests: list[httpx.Request] = []
        self.down = False

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        self.requests.append(request)
        if request.method == "GET" and request.url.path == "/allocator/status":
            return httpx.Response(200, json=self.status)
        if request.headers.get("X-Grid-Allocator-Token") != TOKEN:
            return httpx.Response(401, json={"error": "operator capability required"})
        if request.url.path == "/allocator/mode" and request.method == "PUT":
            return httpx.Response(200, json={"mode": json.loads(request.content)})
        if request.url.path == "/allocator/tick" and request.method == "POST":
            return httpx.Response(202, json={"queued": True})
        return httpx.Response(404, json={"error": "not found"})

    def mutations(self) -> list[httpx.Request]:
        return [r for r in self.requests if r.method != "GET"]


def file_app(name: str) -> DashboardApp:
    return build_app(from_file=fixture_path(name), clock=FakeClock())


def live_app(
    controller: RecordingController, *, token: str | None = TOKEN, clock: FakeClock | None = None
) -> DashboardApp:
    return build_app(
        controller="https://controller.test",
        token=token,
        refresh_seconds=0,
        transport=httpx.MockTransport(controller),
        clock=clock or FakeClock(),
    )


def load_fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture_path(name).read_text(encoding="utf-8"))
    return data


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def make_controller() -> Callable[[str], RecordingController]:
    return lambda name: RecordingController(load_fixture(name))
