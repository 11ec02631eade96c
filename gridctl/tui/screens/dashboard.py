"""The main screen: six panels in tabs, the summary line, the problem banner and the keys.

Data flows one way: ``StatusFeed`` posts a view-model, this screen hands it to
every panel's ``view`` reactive. Operator requests (``m``, ``t``) go through a
confirmation that names the consequence, then through ``OperatorRequests``; the
outcome is announced as ``RequestFinished`` and a fresh poll follows at once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, TabbedContent, TabPane

from gridctl.errors import GridctlError
from gridctl.tui.client import ControllerSource
from gridctl.tui.consequences import CLEAR, OperatorRequest, mode_request, tick_request
from gridctl.tui.screens.confirm import ConfirmScreen
from gridctl.tui.screens.details import DetailScreen
from gridctl.tui.screens.host_detail import HostDetailScreen
from gridctl.tui.screens.mode_choice import ModeChoiceScreen
from gridctl.tui.settings import DashboardSettings
from gridctl.tui.viewmodel import DashboardView
from gridctl.tui.widgets.admission_panel import AdmissionPanel
from gridctl.tui.widgets.banners import ProblemBanner, SummaryBar
from gridctl.tui.widgets.commands_panel import CommandsPanel
from gridctl.tui.widgets.desired_panel import DesiredPanel
from gridctl.tui.widgets.filter_bar import FilterBar
from gridctl.tui.widgets.fleet_panel import FleetPanel
from gridctl.tui.widgets.history_panel import HistoryPanel
from gridctl.tui.widgets.plan_panel import PlanPanel, PlanTable
from gridctl.tui.widgets.rows_panel import RowsPanel
from gridctl.tui.widgets.status_feed import StatusFeed

PANELS = ("fleet", "admission", "plan", "commands", "history", "desired")
NARROW_BELOW = 140  # columns: below this, panels stack and tables keep their reason column


class DashboardScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("tab", "cycle_panel(1)", "Next panel", priority=True, show=False),
        Binding("shift+tab", "cycle_panel(-1)", "Previous panel", priority=True, show=False),
        *(
            Binding(str(n), f"show_panel('{name}')", name.title(), show=False)
            for n, name in enumerate(PANELS, start=1)
        ),
        Binding("slash", "filter", "Filter"),
        Binding("m", "change_mode", "Mode"),
        Binding("t", "tick", "Tick"),
        Binding("r", "refresh", "Refresh"),
    ]

    @dataclass
    class RequestFinished(Message):
        """An operator request completed (``ok``) or was refused/failed (``detail`` says why)."""

        request: OperatorRequest
        ok: bool
        detail: str

    def __init__(self, settings: DashboardSettings) -> None:
        super().__init__()
        self.settings = settings
        self.view: DashboardView | None = None
        self.last_good_at: float | None = None

    @property
    def access(self) -> str:
        return "operator" if self.settings.operator is not None else "read-only"

    def compose(self) -> ComposeResult:
        yield SummaryBar(id="summary")
        yield ProblemBanner(id="banner")
        with TabbedContent(initial="fleet", id="panels"):
            with TabPane("1 Fleet", id="fleet"):
                yield FleetPanel(id="fleet-panel")
            with TabPane("2 Admission", id="admission"):
                yield AdmissionPanel()
            with TabPane("3 Plan", id="plan"):
                yield PlanPanel()
            with TabPane("4 Commands", id="commands"):
                yield CommandsPanel(id="commands-panel")
            with TabPane("5 History", id="history"):
                yield HistoryPanel(id="history-panel")
            with TabPane("6 Desired", id="desired"):
                yield DesiredPanel(id="desired-panel")
        yield FilterBar(id="filter")
        yield Footer()
        yield StatusFeed(self.settings.source, self.settings.refresh_seconds, self.settings.clock)

    def on_resize(self, event: events.Resize) -> None:
        self.fit_width(event.size.width)

    def fit_width(self, width: int) -> None:
        narrow = width < NARROW_BELOW
        self.set_class(narrow, "-narrow")
        for panel in self.query(RowsPanel):
            panel.narrow = narrow

    def on_mount(self) -> None:
        summary = self.query_one(SummaryBar)
        summary.source = self.settings.source.describe()
        summary.access = self.access
        self.fit_width(self.size.width)
        self._focus_panel("fleet")

    # --- data -----------------------------------------------------------------------
    def on_status_feed_updated(self, event: StatusFeed.Updated) -> None:
        self.view = event.view
        self.last_good_at = event.received_at
        banner = self.query_one(ProblemBanner)
        banner.unreachable = None
        banner.schema_error = event.schema_error
        self.query_one("#panels").remove_class("-stale")
        self.query_one(SummaryBar).view = event.view
        for panel in self.query(RowsPanel):
            panel.view = event.view
        self.query_one(DesiredPanel).view = event.view

    def on_status_feed_failed(self, event: StatusFeed.Failed) -> None:
        banner = self.query_one(ProblemBanner)
        banner.unreachable = f"{self.settings.source.describe()}: {event.error}"
        if self.last_good_at is not None:
            banner.data_age_seconds = max(0.0, event.failed_at - self.last_good_at)
            self.query_one("#panels").add_class("-stale")
        banner.mutate_reactive(ProblemBanner.unreachable)

    # --- panels and filter ------------------------------------------------------------
    def _focus_panel(self, name: str) -> None:
        self.query_one(TabbedContent).active = name
        pane = self.query_one(f"#{name}", TabPane)
        tables = pane.query(DataTable)
        if tables:
            tables.first().focus()
        else:
            pane.query_one(DesiredPanel).focus()

    def action_show_panel(self, name: str) -> None:
        self._focus_panel(name)

    def action_cycle_panel(self, step: int) -> None:
        current = self.query_one(TabbedContent).active or PANELS[0]
        index = PANELS.index(current) if current in PANELS else 0
        self._focus_panel(PANELS[(index + step) % len(PANELS)])

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        if event.pane.id in PANELS and not event.pane.has_focus_within:
            self.call_after_refresh(self._focus_panel, str(event.pane.id))

    def action_filter(self) -> None:
        self.query_one(FilterBar).shown = True

    def on_filter_bar_changed(self, event: FilterBar.Changed) -> None:
        for panel in self.query(RowsPanel):
            panel.filter_text = event.text
        self.query_one(DesiredPanel).filter_text = event.text

    def on_filter_bar_closed(self, event: FilterBar.Closed) -> None:
        self._focus_panel(self.query_one(TabbedContent).active or PANELS[0])

    def action_refresh(self) -> None:
        self.query_one(StatusFeed).poll()

    def on_plan_table_line_focused(self, event: PlanTable.LineFocused) -> None:
        """The status carries host rows only for the model asked for: ask for the selected
        line's model, and fetch again at once when it changed."""
        source = self.settings.source
        model = event.line.model_id if event.line else None
        if isinstance(source, ControllerSource) and source.select_model(model):
            self.query_one(StatusFeed).poll()

    # --- details ----------------------------------------------------------------------
    def on_rows_panel_details_requested(self, event: RowsPanel.DetailsRequested) -> None:
        self.app.push_screen(DetailScreen(event.title, event.lines))

    def on_fleet_panel_host_chosen(self, event: FleetPanel.HostChosen) -> None:
        self.app.push_screen(HostDetailScreen(event.host))

    # --- operator requests --------------------------------------------------------------
    def _may_act(self) -> bool:
        if self.settings.operator is None:
            self.notify(f"Read-only: {self.settings.read_only_reason}.", severity="warning")
            return False
        return True

    def action_change_mode(self) -> None:
        if self._may_act():
            self._change_mode()

    def action_tick(self) -> None:
        if self._may_act():
            self._confirm_and_send(tick_request(self.view))

    @work(exclusive=True, group="operator")
    async def _change_mode(self) -> None:
        mode = self.view.mode if self.view else None
        choice = await self.app.push_screen_wait(ModeChoiceScreen(mode))
        if choice:
            await self._send_confirmed(mode_request(self.view, choice))

    @work(exclusive=True, group="operator")
    async def _confirm_and_send(self, request: OperatorRequest) -> None:
        await self._send_confirmed(request)

    async def _send_confirmed(self, request: OperatorRequest) -> None:
        operator = self.settings.operator
        if operator is None or not await self.app.push_screen_wait(ConfirmScreen(request)):
            return
        try:
            if request.kind == "tick":
                await operator.tick()
            elif request.choice == CLEAR:
                await operator.clear_override()
            else:
                await operator.set_mode(request.choice)
        except GridctlError as exc:
            self.notify(f"{request.title} failed: {exc}", severity="error", timeout=10)
            self.post_message(self.RequestFinished(request, False, str(exc)))
            return
        done = "tick requested" if request.kind == "tick" else f"mode: {request.choice}"
        self.notify(f"Sent: {done}.")
        self.post_message(self.RequestFinished(request, True, done))
        self.query_one(StatusFeed).poll()
