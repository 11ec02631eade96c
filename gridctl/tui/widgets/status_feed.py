"""The status feed: polls a ``StatusSource`` and announces each result as a typed message.

Nothing on screen; it owns the polling interval and the one place a fetch can
fail. Every document is checked against the status schema so a controller that
drifted from the contract is named in the banner instead of half-rendered in
silence. The clock is injected: tests decide what "now" is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual import work
from textual.message import Message
from textual.widget import Widget

from gridctl.config.schemas import validator
from gridctl.tui.client import ControllerUnreachable, StatusSource
from gridctl.tui.viewmodel import DashboardView, build_view

STATUS_SCHEMA = "wire/status.schema.json"


def schema_problem(document: dict[str, Any]) -> str | None:
    """The first schema violation, as ``/pointer: message``, or None when valid."""
    errors = sorted(validator(STATUS_SCHEMA).iter_errors(document), key=lambda e: list(e.path))
    if not errors:
        return None
    first = errors[0]
    pointer = "/" + "/".join(str(part) for part in first.path)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{pointer}: {first.message[:160]}{more}"


class StatusFeed(Widget):
    DEFAULT_CSS = "StatusFeed { display: none; }"

    @dataclass
    class Updated(Message):
        """A document arrived; ``schema_error`` is set when it breaks the status schema."""

        document: dict[str, Any]
        view: DashboardView
        received_at: float
        schema_error: str | None

    @dataclass
    class Failed(Message):
        """A poll failed; the previous data (if any) is now older than it looks."""

        error: str
        failed_at: float

    def __init__(
        self, source: StatusSource, refresh_seconds: float, clock: Callable[[], float]
    ) -> None:
        super().__init__()
        self.source = source
        self.refresh_seconds = refresh_seconds
        self.clock = clock

    def on_mount(self) -> None:
        self.poll()
        if self.refresh_seconds > 0:
            self.set_interval(self.refresh_seconds, self.poll)

    @work(exclusive=True, group="status-feed")
    async def poll(self) -> None:
        await self.poll_once()

    async def poll_once(self) -> None:
        try:
            document = await self.source.fetch()
        except ControllerUnreachable as exc:
            self.post_message(self.Failed(str(exc), self.clock()))
            return
        received = self.clock()
        self.post_message(
            self.Updated(document, build_view(document), received, schema_problem(document))
        )
