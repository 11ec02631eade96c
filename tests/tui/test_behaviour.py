"""Behaviour of the running dashboard, driven with ``run_test()`` and ``Pilot``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from textual.message import Message
from textual.pilot import Pilot
from textual.widgets import DataTable, TabbedContent

from gridctl.domain import Mode
from gridctl.tui.screens.confirm import ConfirmScreen
from gridctl.tui.screens.dashboard import DashboardScreen
from gridctl.tui.screens.host_detail import HostDetailScreen
from gridctl.tui.screens.mode_choice import ModeChoiceScreen
from gridctl.tui.widgets.banners import ProblemBanner
from gridctl.tui.widgets.fleet_panel import FleetPanel
from gridctl.tui.widgets.history_panel import HistoryPanel
from tests.tui.conftest import FakeClock, LiveController, file_app, live_app

SIZE = (160, 40)
Factory = Callable[[str | None], LiveController]


pytestmark = pytest.mark.anyio


async def ready(pilot: Pilot[None]) -> None:
    """Let the status worker finish and the screen catch up."""
    await pilot.pause()
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


async def test_mode_change_asks_then_sends_the_override(make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    finished: list[DashboardScreen.RequestFinished] = []

    def hook(message: Message) -> None:
        # A bubbling message reaches the hook once per node it visits.
        if isinstance(message, DashboardScreen.RequestFinished) and message not in finished:
            finished.append(message)

    app = live_app(controller)
    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await ready(pilot)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, ModeChoiceScreen)
        await pilot.press("a")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        consequence = str(app.screen.request.consequence)
        assert "EXECUTES" in consequence and "Git declares automatic" not in consequence
        assert controller.mutations() == []  # nothing sent before the yes
        await pilot.press("y")
        await ready(pilot)
    (request,) = controller.mutations()
    assert (request.method, request.url.path) == ("PUT", "/allocator/mode")
    assert json.loads(request.content) == {"mode": "automatic"}
    assert request.headers["X-Grid-Allocator-Token"] == controller.token
    assert [(m.request.choice, m.ok) for m in finished] == [("automatic", True)]
    override = controller.service.controller.steering.override()  # the real controller took it
    assert override is not None and override.mode is Mode.AUTOMATIC


async def test_clearing_the_override_sends_clear(make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    controller.status["mode"].update(
        effective="recommend",
        override={"mode": "recommend", "reason": "incident", "set_at": 0.0, "source": "operator"},
    )
    controller.service.controller.set_override(Mode.RECOMMEND, "incident")
    app = live_app(controller)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("m", "c")
        await pilot.pause()
        assert "returns to what git declares: automatic" in app.screen.request.consequence  # type: ignore[attr-defined]
        await pilot.press("y")
        await ready(pilot)
    (request,) = controller.mutations()
    assert json.loads(request.content) == {"clear": True}
    assert controller.service.controller.steering.override() is None


async def test_cancelled_mode_change_sends_nothing(make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    app = live_app(controller)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("m", "r")
        await pilot.pause()
        await pilot.press("n")
        await ready(pilot)
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("m", "escape")
        await ready(pilot)
    assert controller.mutations() == []


async def test_tick_asks_then_posts(make_controller: Factory) -> None:
    controller = make_controller("admission_fleet")
    app = live_app(controller)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "automatic mode" in app.screen.request.consequence
        await pilot.press("y")
        await ready(pilot)
    (request,) = controller.mutations()
    assert (request.method, request.url.path) == ("POST", "/allocator/tick")
    tick = controller.service.controller.view.tick  # the real controller ticked
    assert tick is not None and tick.ok


async def test_refused_request_is_reported(make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    finished: list[DashboardScreen.RequestFinished] = []
    app = live_app(controller, token="wrong-token-wrong-token")

    def hook(message: Message) -> None:
        # A bubbling message reaches the hook once per node it visits.
        if isinstance(message, DashboardScreen.RequestFinished) and message not in finished:
            finished.append(message)

    async with app.run_test(size=SIZE, message_hook=hook) as pilot:
        await ready(pilot)
        await pilot.press("t", "y")
        await ready(pilot)
    assert [(m.ok, "401" in m.detail) for m in finished] == [(False, True)]
    assert controller.service.controller.view.tick is None  # refused: nothing ran


async def test_read_only_without_token_refuses_mode_and_tick(make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    app = live_app(controller, token=None)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
        await pilot.press("t")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)
    assert controller.mutations() == []


async def test_filter_narrows_rows_in_every_panel() -> None:
    app = file_app("degraded_fleet")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        fleet = app.screen.query_one(FleetPanel)
        history = app.screen.query_one(HistoryPanel)
        all_history = history.table.row_count
        assert fleet.table.row_count == 5 and all_history > 5
        await pilot.press("slash", *"gpu-")
        await pilot.pause()
        assert [row.host_id for row in fleet.shown_rows] == ["gpu-a", "gpu-b"]
        assert fleet.table.row_count == 2
        assert 0 < history.table.row_count < all_history
        assert {row.host_id for row in history.shown_rows} <= {"gpu-a", "gpu-b"}
        assert fleet.border_subtitle == "2 of 5"
        await pilot.press("escape")
        await pilot.pause()
        assert fleet.table.row_count == 5


async def test_unreachable_controller_shows_the_banner_and_the_data_age(
    make_controller: Factory,
) -> None:
    controller = make_controller("degraded_fleet")
    clock = FakeClock()
    app = live_app(controller, clock=clock)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        banner = app.screen.query_one(ProblemBanner)
        assert not banner.display
        controller.down = True
        clock.now += 42
        await pilot.press("r")
        await ready(pilot)
        assert banner.display and banner.has_class("-error")
        text = str(banner.render())
        assert "CONTROLLER UNREACHABLE" in text and "ConnectError" in text
        assert "42s old" in text
        assert app.screen.query_one("#panels").has_class("-stale")
        controller.down = False
        await pilot.press("r")
        await ready(pilot)
        assert not banner.display
        assert not app.screen.query_one("#panels").has_class("-stale")


async def test_unreachable_from_the_start_says_no_data(make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    controller.down = True
    app = live_app(controller)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        banner = app.screen.query_one(ProblemBanner)
        assert "No status received yet" in str(banner.render())
        assert app.screen.query_one(FleetPanel).border_subtitle == "no data"


async def test_schema_drift_is_named(make_controller: Factory) -> None:
    controller = make_controller("empty_fleet")
    del controller.status["revisions"]
    app = live_app(controller)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        banner = app.screen.query_one(ProblemBanner)
        assert banner.has_class("-warning") and "'revisions' is a required" in str(banner.render())


async def test_tab_cycles_the_panels() -> None:
    app = file_app("degraded_fleet")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        tabs = app.screen.query_one(TabbedContent)
        seen = [tabs.active]
        for _ in range(6):
            await pilot.press("tab")
            await pilot.pause()
            seen.append(tabs.active)
        assert seen == ["fleet", "admission", "plan", "commands", "history", "desired", "fleet"]
        await pilot.press("shift+tab")
        await pilot.pause()
        assert tabs.active == "desired"
        await pilot.press("3")
        await pilot.pause()
        assert tabs.active == "plan"
        assert isinstance(app.focused, DataTable)


async def test_enter_on_a_host_shows_the_local_override_commands() -> None:
    app = file_app("degraded_fleet")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("down", "enter")  # edge-1, then gpu-a
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, HostDetailScreen)
        assert screen.host.host_id == "gpu-a"
        commands = str(screen.query_one("#node-commands").render())
        assert "gridctl node drain --reason REASON" in commands
        assert "gridctl node resume" in commands
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)


async def test_help_and_quit() -> None:
    app = file_app("empty_fleet")
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("question_mark")
        await pilot.pause()
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape", "q")
        await pilot.pause()
    assert app.return_code == 0


@pytest.mark.parametrize("name", ["degraded_fleet", "empty_fleet", "admission_fleet"])
async def test_from_file_is_read_only(name: str) -> None:
    app = file_app(name)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        assert app.settings.operator is None
        await pilot.press("m")
        await pilot.pause()
        assert isinstance(app.screen, DashboardScreen)


async def test_the_plan_cursor_asks_the_status_for_that_models_host_rows(
    make_controller: Factory,
) -> None:
    controller = make_controller("degraded_fleet")
    app = live_app(controller)
    async with app.run_test(size=SIZE) as pilot:
        await ready(pilot)
        await pilot.press("3")
        await ready(pilot)
        table = app.screen.query_one("#plan-table")
        line = table.current_row()  # type: ignore[attr-defined]
        assert line is not None
    statuses = [r for r in controller.requests if r.url.path == "/allocator/status"]
    assert statuses[0].url.params.get_list("explain") == []  # nothing selected yet
    assert statuses[-1].url.params.get_list("explain") == [line.model_id]
    assert len(statuses) == 2  # one more fetch when the selection changed, not one per update
