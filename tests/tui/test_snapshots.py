"""Snapshot tests: every panel on the named situations, plus the dialogs and the banner.

Baselines live in ``__snapshots__/``; after an intended change, inspect the new
SVGs and run ``pytest tests/tui --snapshot-update``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

import pytest
from textual.pilot import Pilot

from tests.tui.conftest import FakeClock, LiveController, file_app, live_app

SIZE = (160, 40)
Compare = Callable[..., bool]


def after_data(*keys: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.pause()
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        for key in keys:
            await pilot.press(key)
            await pilot.pause()

    return run_before


PANEL_KEYS = {
    "fleet": (),
    "admission": ("2",),
    "plan": ("3",),
    "commands": ("4",),
    "history": ("5",),
    "desired": ("6",),
}
CASES: Iterable[tuple[str, str]] = [
    *(
        (situation, panel)
        for situation in ("degraded_fleet", "empty_fleet")
        for panel in PANEL_KEYS
    ),
    ("admission_fleet", "fleet"),
    ("admission_fleet", "admission"),
    ("admission_fleet", "plan"),
    ("workload_fleet", "fleet"),
    ("workload_fleet", "admission"),
]


@pytest.mark.parametrize(("situation", "panel"), CASES)
def test_panel(snap_compare: Compare, situation: str, panel: str) -> None:
    app = file_app(situation)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_data(*PANEL_KEYS[panel]))


def test_plan_explains_the_selected_line(snap_compare: Compare) -> None:
    app = file_app("degraded_fleet")
    assert snap_compare(app, terminal_size=SIZE, run_before=after_data("3", "down", "down"))


def test_host_detail_shows_local_commands(snap_compare: Compare) -> None:
    app = file_app("degraded_fleet")
    keys = ("down", "down", "down", "enter")  # laptop-ana, paused
    assert snap_compare(app, terminal_size=SIZE, run_before=after_data(*keys))


def test_filtered_fleet(snap_compare: Compare) -> None:
    app = file_app("degraded_fleet")
    assert snap_compare(app, terminal_size=SIZE, run_before=after_data("slash", *"rack-2"))


Factory = Callable[[str | None], LiveController]


def test_mode_confirmation_dialog(snap_compare: Compare, make_controller: Factory) -> None:
    controller = make_controller("degraded_fleet")
    app = live_app(controller)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_data("m", "a"))


def test_unreachable_banner_over_stale_data(
    snap_compare: Compare, make_controller: Factory
) -> None:
    controller = make_controller("degraded_fleet")
    clock = FakeClock()

    async def run_before(pilot: Pilot[None]) -> None:
        await after_data()(pilot)
        controller.down = True
        clock.now += 75
        await pilot.press("r")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()

    app = live_app(controller, clock=clock)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_unreachable_banner_before_any_data(
    snap_compare: Compare, make_controller: Factory
) -> None:
    controller = make_controller(None)
    controller.down = True
    app = live_app(controller)
    assert snap_compare(app, terminal_size=SIZE, run_before=after_data())


FIT_SIZES = [(80, 24), (120, 40)]


@pytest.mark.parametrize("panel", ["fleet", "admission", "plan"])
@pytest.mark.parametrize("size", FIT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_panels_fit_the_terminal(snap_compare: Compare, size: tuple[int, int], panel: str) -> None:
    app = file_app("admission_fleet")
    assert snap_compare(app, terminal_size=size, run_before=after_data(*PANEL_KEYS[panel]))


@pytest.mark.parametrize("panel", ["commands", "history"])
@pytest.mark.parametrize("size", FIT_SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_command_and_history_reasons_fit(
    snap_compare: Compare, size: tuple[int, int], panel: str
) -> None:
    app = file_app("degraded_fleet")
    assert snap_compare(app, terminal_size=size, run_before=after_data(*PANEL_KEYS[panel]))


@pytest.mark.parametrize(
    "keys",
    [("question_mark",), ("down", "down", "down", "enter")],
    ids=["help", "host-detail"],
)
def test_overlays_wrap_at_80x24(snap_compare: Compare, keys: tuple[str, ...]) -> None:
    app = file_app("degraded_fleet")
    assert snap_compare(app, terminal_size=(80, 24), run_before=after_data(*keys))
