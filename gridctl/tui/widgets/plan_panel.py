"""Plan panel: the diff the next tick would apply, with ``--explain`` detail for the cursor line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Static

from gridctl.tui.plan_diff import PlanLine
from gridctl.tui.viewmodel import DashboardView
from gridctl.tui.widgets import cells
from gridctl.tui.widgets.rows_panel import RowsPanel


def explain_text(line: PlanLine | None) -> Text:
    if line is None:
        return Text("Select a line to see why.", style="dim")
    text = Text()
    text.append_text(cells.sign(line.sign))
    text.append(f" {line.model_id}", style="bold")
    text.append(f" on {line.host_id}" if line.host_id else "")
    text.append(f"\n{line.summary}\n")
    text.append(f"reason: {line.reason or '-'}\n")
    text.append(f"actions: {', '.join(line.actions) or 'none yet'}\n\n")
    text.append("explain\n", style="bold underline")
    for entry in line.explain:
        style = "red" if entry.startswith("  x") else "green" if entry.startswith("  *") else ""
        text.append(entry + "\n", style=style)
    return text


class PlanTable(RowsPanel):
    TITLE = "Plan: what the next tick would change"
    COLUMNS = ("", "Model", "Host", "Change", "Actions", "Reason")
    NARROW_COLUMNS = ("", "Model", "Host", "Reason")
    EMPTY = "no changes: the fleet matches the plan"

    @dataclass
    class LineFocused(Message):
        """The cursor moved (or the rows changed under it); ``line`` is what it rests on."""

        line: PlanLine | None

    def rows_of(self, view: DashboardView) -> Sequence[PlanLine]:
        return view.plan

    def key_of(self, row: Any) -> str:
        line: PlanLine = row
        return f"{line.sign}|{line.model_id}|{line.host_id}|{line.summary}"

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        line: PlanLine = row
        return (
            cells.sign(line.sign),
            Text(line.model_id, style="bold"),
            line.host_id or Text("-", style="dim"),
            line.summary,
            ", ".join(line.actions) or Text("-", style="dim"),
            line.reason,
        )

    def details(self, row: Any) -> tuple[str, tuple[str, ...]]:
        line: PlanLine = row
        return f"{line.sign} {line.model_id} {line.host_id or ''}".strip(), (
            line.summary,
            f"reason: {line.reason or '-'}",
            f"actions: {', '.join(line.actions) or 'none yet'}",
            "",
            *line.explain,
        )

    def refresh_rows(self) -> None:
        super().refresh_rows()
        if self.is_mounted and self.view is not None and not self.view.plan_exists:
            self.border_subtitle = "no plan yet (before the first tick)"
        if self.is_mounted:
            self.post_message(self.LineFocused(self.current_row()))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        event.stop()
        self.post_message(self.LineFocused(self.current_row()))


class PlanPanel(Horizontal):
    """The diff on the left; the highlighted line's explanation on the right."""

    def compose(self) -> ComposeResult:
        yield PlanTable(id="plan-table")
        with VerticalScroll(id="plan-explain"):
            yield Static(explain_text(None), id="plan-explain-text")

    def on_plan_table_line_focused(self, event: PlanTable.LineFocused) -> None:
        self.query_one("#plan-explain-text", Static).update(explain_text(event.line))
