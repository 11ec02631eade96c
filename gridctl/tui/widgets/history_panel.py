"""History panel: the controller's bounded lifecycle events, newest first, filterable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from gridctl.tui.viewmodel import DashboardView, HistoryRow
from gridctl.tui.widgets import cells
from gridctl.tui.widgets.rows_panel import RowsPanel

FAILURE_WORDS = ("fail", "reject", "error", "withdraw", "unhealthy", "quarantin")


class HistoryPanel(RowsPanel):
    TITLE = "History"
    COLUMNS = ("Age", "Event", "Host", "Model", "Took", "Message")
    NARROW_COLUMNS = ("Age", "Event", "Model", "Message")
    EMPTY = "no lifecycle events yet"

    def rows_of(self, view: DashboardView) -> Sequence[HistoryRow]:
        return view.history

    def key_of(self, row: Any) -> str:
        event: HistoryRow = row
        return f"{event.age_seconds}|{event.event}|{event.host_id}|{event.model_id}|{event.message}"

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        event: HistoryRow = row
        alarming = any(word in event.event.lower() for word in FAILURE_WORDS)
        return (
            cells.age(event.age_seconds),
            Text(event.event, style="bold red" if alarming else "bold"),
            event.host_id or Text("-", style="dim"),
            event.model_id or Text("-", style="dim"),
            cells.duration(event.duration_seconds),
            event.message,
        )

    def details(self, row: Any) -> tuple[str, tuple[str, ...]]:
        event: HistoryRow = row
        return f"{event.event} ({cells.age(event.age_seconds)} ago)", (
            f"host: {event.host_id or '-'}   model: {event.model_id or '-'}",
            f"action: {event.action_id or '-'}   took: {cells.duration(event.duration_seconds)}",
            f"message: {event.message or '-'}",
        )
