"""Commands panel: pending and delivered commands, withdrawn destructive ones, recent receipts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text

from gridctl.tui.viewmodel import CommandRow, DashboardView
from gridctl.tui.widgets import cells
from gridctl.tui.widgets.rows_panel import RowsPanel


class CommandsPanel(RowsPanel):
    """Withdrawn destructive commands stay visible: they block that model's destructive work."""

    TITLE = "Commands"
    COLUMNS = ("Group", "Kind", "Host", "Model", "Status", "Age", "Took", "Action id", "Reason")
    NARROW_COLUMNS = ("Kind", "Host", "Model", "Status", "Reason")
    EMPTY = "no pending, withdrawn or recent commands"

    def rows_of(self, view: DashboardView) -> Sequence[CommandRow]:
        return view.commands

    def key_of(self, row: Any) -> str:
        command: CommandRow = row
        return f"{command.group}|{command.action_id}|{command.age_seconds}"

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        command: CommandRow = row
        status = Text(command.status)
        if command.blocked:
            status = Text(f"blocked: {command.blocked}", style="red")
        return (
            cells.styled(command.group, cells.COMMAND_GROUP_STYLES),
            command.kind,
            command.host_id,
            command.model_id,
            status,
            cells.age(command.age_seconds),
            cells.duration(command.duration_seconds),
            Text(command.action_id, style="dim"),
            command.reason,
        )

    def details(self, row: Any) -> tuple[str, tuple[str, ...]]:
        command: CommandRow = row
        return f"{command.group} {command.kind} {command.action_id}", (
            f"host: {command.host_id}   model: {command.model_id}",
            f"status: {command.status}",
            f"blocked: {command.blocked or '-'}",
            f"age: {cells.age(command.age_seconds)}",
            f"took: {cells.duration(command.duration_seconds)}",
            f"reason: {command.reason or '-'}",
        )
