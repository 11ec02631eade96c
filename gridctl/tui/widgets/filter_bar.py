"""The ``/`` filter: one input that narrows the rows of every panel at once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Input, Label


class FilterBar(Horizontal):
    """Words typed here must all appear in a row for it to stay; escape clears and closes."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "clear", "Clear filter", show=True),
    ]

    text: reactive[str] = reactive("")
    shown: reactive[bool] = reactive(False)

    @dataclass
    class Changed(Message):
        text: str

    @dataclass
    class Closed(Message):
        """Focus should go back to the panel (enter keeps the filter, escape clears it)."""

    def compose(self) -> ComposeResult:
        yield Label("filter /", id="filter-label")
        yield Input(placeholder="words that must appear in a row", id="filter-input")

    def watch_shown(self, shown: bool) -> None:
        self.display = shown
        if shown:
            self.query_one(Input).focus()

    def watch_text(self, text: str) -> None:
        self.post_message(self.Changed(text))

    def on_mount(self) -> None:
        self.display = self.shown

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self.text = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.shown = bool(self.text)
        self.post_message(self.Closed())

    def action_clear(self) -> None:
        self.query_one(Input).value = ""
        self.text = ""
        self.shown = False
        self.post_message(self.Closed())
