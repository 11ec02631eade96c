"""A titled, filterable table of view-model rows: the shape most dashboard panels share.

Subclasses say which rows a view has, how one row renders and what its detail
says. The panel re-renders whenever ``view`` or ``filter_text`` changes, keeps
the cursor on the same row key across refreshes (so live polling does not yank
the operator's selection) and shows "shown of total" in its border title.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.cells import cell_len
from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import DataTable
from textual.widgets.data_table import CellDoesNotExist, RowDoesNotExist

from gridctl.tui.viewmodel import DashboardView


def cell_width(cell: RenderableType) -> int:
    if isinstance(cell, Text):
        return cell.cell_len
    if isinstance(cell, str):
        return cell_len(cell)
    return 12


MIN_REASON_WIDTH = 32  # cells: below this a wrapped reason reads as a column of fragments


class RowsPanel(Vertical):
    """Base class; ``COLUMNS`` and the three row hooks define a concrete panel."""

    TITLE: ClassVar[str] = ""
    COLUMNS: ClassVar[tuple[str, ...]] = ()
    # the columns a narrow terminal keeps, in order; the last one (the reason) wraps to fit
    NARROW_COLUMNS: ClassVar[tuple[str, ...]] = ()
    EMPTY: ClassVar[str] = "nothing to show"

    view: reactive[DashboardView | None] = reactive(None, always_update=True)
    filter_text: reactive[str] = reactive("")
    narrow: reactive[bool] = reactive(False)

    @dataclass
    class DetailsRequested(Message):
        """The operator pressed enter on a row; ``lines`` is what the detail screen shows."""

        title: str
        lines: tuple[str, ...]

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self._shown: list[Any] = []
        self._columns: tuple[str, ...] = self.COLUMNS
        self._wrapped = False  # the last column has a fixed width and wraps

    def compose(self) -> ComposeResult:
        table: DataTable[RenderableType] = DataTable(cursor_type="row", zebra_stripes=True)
        table.add_columns(*self.COLUMNS)
        yield table

    @property
    def table(self) -> DataTable[RenderableType]:
        return self.query_one(DataTable)

    @property
    def shown_rows(self) -> list[Any]:
        return list(self._shown)

    # --- hooks for subclasses -------------------------------------------------------
    def rows_of(self, view: DashboardView) -> Sequence[Any]:
        raise NotImplementedError

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        raise NotImplementedError

    def key_of(self, row: Any) -> str:
        raise NotImplementedError

    def details(self, row: Any) -> tuple[str, tuple[str, ...]]:
        return self.key_of(row), (repr(row),)

    # --- reactives ------------------------------------------------------------------
    def watch_view(self) -> None:
        self.refresh_rows()

    def watch_filter_text(self) -> None:
        self.refresh_rows()

    def watch_narrow(self) -> None:
        self.refresh_rows()

    def on_resize(self) -> None:
        if self.NARROW_COLUMNS:
            self.refresh_rows()

    def _kept(self, rendered: Sequence[tuple[RenderableType, ...]]) -> tuple[tuple[int, ...], bool]:
        """The columns to show, in order. Every column when all fit the panel at their
        natural width; else the reason column (``NARROW_COLUMNS[-1]``) moves last and
        wraps, and lesser columns (those not in ``NARROW_COLUMNS``) drop from the right
        until the rest leaves the reason ``MIN_REASON_WIDTH`` cells. The flag says
        whether the last column must wrap into the width left to it."""
        every = tuple(range(len(self.COLUMNS)))
        if not self.NARROW_COLUMNS:
            return every, False
        widths = [
            max([cell_width(name), *(cell_width(row[i]) for row in rendered)])
            for i, name in enumerate(self.COLUMNS)
        ]
        available = (self.size.width or 80) - 4  # borders and scrollbar
        if sum(w + 2 for w in widths) <= available:
            return every, False
        reason = self.COLUMNS.index(self.NARROW_COLUMNS[-1])
        kept = [i for i in every if i != reason and self.COLUMNS[i] in self.NARROW_COLUMNS]
        lesser = [i for i in every if i != reason and self.COLUMNS[i] not in self.NARROW_COLUMNS]
        while lesser:
            trial = sorted([*kept, *lesser])
            if sum(widths[i] + 2 for i in trial) + MIN_REASON_WIDTH + 2 <= available:
                return (*trial, reason), True
            lesser.pop()
        order = [self.COLUMNS.index(name) for name in self.NARROW_COLUMNS]
        return tuple(order), True

    def _set_columns(
        self, kept: tuple[int, ...], wrap: bool, rows: list[tuple[RenderableType, ...]]
    ) -> bool:
        """Lay out the kept columns; with ``wrap`` the last gets what is left, and wraps.
        Returns whether rows should take the height their wrapped reason needs."""
        table = self.table
        names = tuple(self.COLUMNS[i] for i in kept)
        if not wrap and not self._wrapped and names == self._columns:
            return False
        table.clear(columns=True)
        self._columns, self._wrapped = names, wrap
        if not wrap:
            table.add_columns(*names)
            return False
        widths = [
            max([cell_width(name), *(cell_width(row[i]) for row in rows)])
            for i, name in enumerate(names[:-1])
        ]
        available = (self.size.width or 80) - 4  # borders and scrollbar
        last = max(16, available - sum(w + 2 for w in widths) - 2)
        for name in names[:-1]:
            table.add_column(name)
        table.add_column(names[-1], width=last)
        return True

    def matches(self, row: Any) -> bool:
        needle = self.filter_text.strip().lower()
        return not needle or all(word in row.search_text.lower() for word in needle.split())

    def refresh_rows(self) -> None:
        if not self.is_mounted:
            return
        table = self.table
        selected = self._selected_key()
        rows = list(self.rows_of(self.view)) if self.view is not None else []
        self._shown = [row for row in rows if self.matches(row)]
        rendered = [self.cells(row) for row in self._shown]
        kept, wrap = self._kept(rendered)
        cut = [tuple(cells[i] for i in kept) for cells in rendered]
        table.clear()
        wrap = self._set_columns(kept, wrap, cut)
        for row, cells in zip(self._shown, cut, strict=True):
            table.add_row(*cells, key=self.key_of(row), height=None if wrap else 1)
        if selected is not None:
            with contextlib.suppress(RowDoesNotExist):
                table.move_cursor(row=table.get_row_index(selected))
        self.border_title = self.TITLE
        if self.view is None:
            self.border_subtitle = "no data"
        elif not rows:
            self.border_subtitle = self.EMPTY
        else:
            self.border_subtitle = f"{len(self._shown)} of {len(rows)}"

    def on_mount(self) -> None:
        self.call_after_refresh(self.refresh_rows)

    def _selected_key(self) -> str | None:
        table = self.table
        if table.row_count == 0:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except CellDoesNotExist:  # cursor outside the table after a shrink
            return None
        return None if key.value is None else str(key.value)

    def current_row(self) -> Any | None:
        index = self.table.cursor_row
        return self._shown[index] if 0 <= index < len(self._shown) else None

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        row = self.current_row()
        if row is not None:
            self.post_details(row)

    def post_details(self, row: Any) -> None:
        title, lines = self.details(row)
        self.post_message(self.DetailsRequested(title, lines))
