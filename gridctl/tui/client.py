"""Where the dashboard's status documents come from, and the two operator requests it sends.

Two sources share one small protocol (``fetch``): ``ControllerSource`` polls
``GET /allocator/status`` through the shared ``gridctl.client.ControllerClient``,
``FileSource`` reads a saved status document (post-mortems, tests). The status
folds each model's plan hosts into groups; ``ControllerSource.select_model``
asks for every host row of the model the plan panel's cursor rests on.
``OperatorRequests`` sends the only mutations the dashboard offers,
``PUT /allocator/mode`` and ``POST /allocator/tick``, with the operator token.
The shared client is synchronous, so calls run in a thread and never stall the
UI; its httpx transport seam lets tests pass ``httpx.MockTransport`` or an
in-process controller. Errors are translated here, at the boundary, into
``ControllerUnreachable`` (worth retrying) and ``OperatorRefused``.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Protocol

import httpx

from gridctl.client import DEFAULT_CONTROLLER, ControllerClient, ControllerError
from gridctl.errors import PermanentError, TransientError

__all__ = [
    "DEFAULT_CONTROLLER",
    "ControllerSource",
    "ControllerUnreachable",
    "FileSource",
    "OperatorRefused",
    "OperatorRequests",
    "StatusSource",
]


class ControllerUnreachable(TransientError):
    """The status could not be read: connection, timeout, HTTP error or malformed body."""


class OperatorRefused(PermanentError):
    """The controller refused an operator request (bad token, conflict, validation)."""


class StatusSource(Protocol):
    """Something that yields status documents; ``describe`` names it for the banner."""

    def describe(self) -> str: ...

    async def fetch(self) -> dict[str, Any]: ...


class ControllerSource:
    """Reads ``GET /allocator/status`` from a live controller."""

    def __init__(
        self,
        base_url: str = DEFAULT_CONTROLLER,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 5.0,
    ) -> None:
        self._client = ControllerClient(base_url, transport=transport, timeout=timeout)
        self.base_url = self._client.base_url
        # the model whose every host row the status is asked for (the plan's selected line)
        self.explain: str | None = None

    def describe(self) -> str:
        return self.base_url

    def select_model(self, model_id: str | None) -> bool:
        """Ask for ``model_id``'s host rows from the next fetch on; whether that changed."""
        changed = model_id != self.explain
        self.explain = model_id
        return changed

    async def fetch(self) -> dict[str, Any]:
        explain = (self.explain,) if self.explain else ()
        try:
            document = await asyncio.to_thread(self._client.status, explain)
        except ControllerError as exc:
            raise ControllerUnreachable(str(exc)) from exc
        except ValueError as exc:  # a 200 whose body is not JSON
            raise ControllerUnreachable(f"status is not JSON: {exc}") from exc
        if not isinstance(document, dict):
            raise ControllerUnreachable("status is not a JSON object")
        return document


class FileSource:
    """Reads a saved status document; re-read on every poll so a replaced file shows."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def describe(self) -> str:
        # The name only: the banner and snapshots must not depend on where a checkout lives.
        return f"saved file {self.path.name}"

    async def fetch(self) -> dict[str, Any]:
        try:
            body = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ControllerUnreachable(f"cannot read {self.path}: {exc}") from exc
        if not isinstance(body, dict):
            raise ControllerUnreachable(f"{self.path} is not a JSON object")
        return body


class OperatorRequests:
    """The operator's two requests: set or clear the mode override, and request a tick."""

    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout: float = 10.0,
    ) -> None:
        self._client = ControllerClient(base_url, token=token, transport=transport, timeout=timeout)

    async def _run(self, call: Any, *args: Any) -> dict[str, Any]:
        try:
            result = await asyncio.to_thread(call, *args)
        except ControllerError as exc:
            if exc.status is None:
                raise ControllerUnreachable(str(exc)) from exc
            raise OperatorRefused(str(exc)) from exc
        return result if isinstance(result, dict) else {}

    async def set_mode(self, mode: str) -> dict[str, Any]:
        return await self._run(self._client.set_mode, mode)

    async def clear_override(self) -> dict[str, Any]:
        return await self._run(self._client.set_mode, None)

    async def tick(self) -> dict[str, Any]:
        return await self._run(self._client.tick)
