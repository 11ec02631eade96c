"""Pick a mode, or clear the operator override: the first step of ``m``."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList
from textual.widgets.option_list import Option

from gridctl.tui.consequences import CLEAR, MODE_MEANINGS, MODES
from gridctl.tui.viewmodel import ModeView


class ModeChoiceScreen(ModalScreen[str | None]):
    """Dismisses with a mode name, ``clear``, or None when cancelled."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("o", "choose('observe')", "observe"),
        Binding("r", "choose('recommend')", "recommend"),
        Binding("a", "choose('automatic')", "automatic"),
        Binding("c", "choose('clear')", "clear override"),
        Binding("escape", "choose('')", "Cancel"),
    ]

    def __init__(self, mode: ModeView | None) -> None:
        super().__init__()
        self.mode = mode

    def compose(self) -> ComposeResult:
        current = self.mode.effective if self.mode else "unknown"
        git = self.mode.desired if self.mode else "unknown"
        options = [
            Option(f"{name:<10} {MODE_MEANINGS[name].split(';')[0].split('(')[0]}", id=name)
            for name in MODES
        ]
        override = self.mode.override_mode if self.mode else None
        options.append(
            Option(f"{'clear':<10} return to git's mode ({git})", id=CLEAR, disabled=not override)
        )
        with Vertical(classes="dialog"):
            yield Label(f"Mode: now {current}, git declares {git}", classes="dialog-title")
            yield OptionList(*options, id="mode-options")
            yield Label("o/r/a/c or enter to choose, escape to cancel", classes="dialog-hint")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.action_choose(event.option.id or "")

    def action_choose(self, choice: str) -> None:
        if choice == CLEAR and not (self.mode and self.mode.override_mode):
            self.notify("There is no operator override to clear.", severity="warning")
            return
        self.dismiss(choice or None)
