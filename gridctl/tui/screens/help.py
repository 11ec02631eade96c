"""The ``?`` screen: every key, and why some are refused in read-only mode."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

KEYS = (
    ("tab / shift+tab", "next / previous panel (1-6 jump to a panel)"),
    ("/", "filter rows in every panel (all words must match); escape clears"),
    ("enter", "details of the selected row (hosts: the local override commands)"),
    ("m", "change the mode or clear the operator override (asks first; needs the token)"),
    ("t", "request a reconciliation pass now (asks first; needs the token)"),
    ("r", "re-read the status now"),
    ("?", "this help"),
    ("q", "quit"),
)
NOTE = (
    "Without an operator token (--token-file or GRIDCTL_TOKEN_FILE) the dashboard is "
    "read-only. Host overrides (drain, pause, quarantine, resume) are local to each host: the "
    "host detail shows the command to run there."
)


def key_table() -> Table:
    """Keys and meanings; a narrow dialog wraps each meaning under itself, not under
    the key column."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(ratio=1, overflow="fold")
    for key, meaning in KEYS:
        table.add_row(key, meaning)
    return table


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,question_mark,q", "close", "Close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog wide"):
            yield Label("gridctl dash keys", classes="dialog-title")
            with VerticalScroll():  # a short terminal scrolls; nothing is cut off
                yield Static(key_table())
                yield Static(NOTE, classes="dialog-hint", markup=False)

    def action_close(self) -> None:
        self.dismiss(None)
