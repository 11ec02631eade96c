"""``gridctl dash``: the Textual application. Deliberately thin.

The App only owns the stylesheet, the global keys (help, quit) and the
settings; the main screen composes the panels, and each panel lives in its
own module under ``widgets/``. ``build_app`` is the one factory the CLI and
the tests use.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

import httpx
from textual.app import App
from textual.binding import Binding, BindingType

from gridctl.tui.client import DEFAULT_CONTROLLER, ControllerSource, FileSource, OperatorRequests
from gridctl.tui.screens.dashboard import DashboardScreen
from gridctl.tui.screens.help import HelpScreen
from gridctl.tui.settings import DashboardSettings


class DashboardApp(App[None]):
    CSS_PATH = "dashboard.tcss"
    TITLE = "gridctl dash"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "Quit"),
        Binding("question_mark", "help", "Help"),
    ]

    def __init__(self, settings: DashboardSettings) -> None:
        super().__init__()
        self.settings = settings

    def get_default_screen(self) -> DashboardScreen:
        return DashboardScreen(self.settings)

    def action_help(self) -> None:
        self.push_screen(HelpScreen())


def build_app(
    *,
    controller: str | None = None,
    from_file: str | Path | None = None,
    token: str | None = None,
    refresh_seconds: float | None = None,
    transport: httpx.BaseTransport | None = None,
    clock: Callable[[], float] = time.time,
) -> DashboardApp:
    """A dashboard on a saved file (always read-only) or a live controller (operator with token)."""
    if from_file is not None:
        settings = DashboardSettings(
            source=FileSource(from_file),
            refresh_seconds=refresh_seconds or 0.0,
            clock=clock,
            read_only_reason="showing a saved status file, not a controller",
        )
        return DashboardApp(settings)
    source = ControllerSource(controller or DEFAULT_CONTROLLER, transport=transport)
    operator = (
        OperatorRequests(source.base_url, token, transport=transport) if token is not None else None
    )
    settings = DashboardSettings(
        source=source,
        operator=operator,
        refresh_seconds=2.0 if refresh_seconds is None else refresh_seconds,
        clock=clock,
    )
    return DashboardApp(settings)
