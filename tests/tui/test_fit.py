"""The dashboard fits the terminal: below 140 columns panels stack; a table whose columns do
not all fit drops lesser columns first and keeps its reason column last, wrapping it."""

from __future__ import annotations

import pytest

from gridctl.tui.widgets.admission_panel import AdmissionPanel, AdmissionTable, ModelTable
from gridctl.tui.widgets.fleet_panel import FleetPanel
from gridctl.tui.widgets.rows_panel import RowsPanel
from tests.tui.conftest import file_app

PANEL_KEYS = {"fleet": "1", "admission": "2", "plan": "3", "commands": "4", "history": "5"}


async def _columns(size: tuple[int, int], key: str) -> dict[str, tuple[list[str], int, int]]:
    app = file_app("admission_fleet")
    out: dict[str, tuple[list[str], int, int]] = {}
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.press(key)
        await pilot.pause()
        for panel in app.screen.query(RowsPanel):
            if not panel.size.width:
                continue  # another tab
            table = panel.table
            labels = [str(c.label) for c in table.columns.values()]
            used = sum(c.get_render_width(table) for c in table.columns.values())
            out[type(panel).__name__] = (labels, used, panel.size.width)
        if key == "2":
            stacked = app.screen.query_one(AdmissionPanel)
            a, m = stacked.query_one(AdmissionTable), stacked.query_one(ModelTable)
            out["stacked"] = ([], int(m.region.y > a.region.y), int(a.size.width == m.size.width))
    return out


@pytest.mark.anyio
@pytest.mark.parametrize("panel", sorted(PANEL_KEYS))
async def test_at_80_columns_the_reason_column_stays_on_screen(panel: str) -> None:
    shown = await _columns((80, 24), PANEL_KEYS[panel])
    for name, (labels, used, width) in shown.items():
        if name == "stacked":
            continue
        full = next(c for c in RowsPanel.__subclasses__() if c.__name__ == name).COLUMNS
        assert labels[-1] == full[-1] or (name == "FleetPanel" and "Domain" in labels), name
        assert used <= width - 2, (name, labels, used, width)
    if panel == "admission":
        assert shown["stacked"][1:] == (1, 1)  # models below admission, both full width


@pytest.mark.anyio
@pytest.mark.parametrize("panel", sorted(PANEL_KEYS))
async def test_at_120_columns_panels_stack_and_every_reason_is_on_screen(panel: str) -> None:
    shown = await _columns((120, 40), PANEL_KEYS[panel])
    for name, (labels, used, width) in shown.items():
        if name == "stacked":
            continue
        full = next(c for c in RowsPanel.__subclasses__() if c.__name__ == name)
        every = labels == list(full.COLUMNS)  # all fit: nothing dropped, nothing wraps
        assert every or labels[-1] == full.NARROW_COLUMNS[-1], (name, labels)  # reason last
        assert used <= width - 2, (name, labels, used, width)
        assert set(full.NARROW_COLUMNS) <= set(labels), (name, labels)
    if panel == "admission":
        assert shown["stacked"][1:] == (1, 1)  # below 140 columns panels stack
        assert len(shown["AdmissionTable"][0]) > len(AdmissionTable.NARROW_COLUMNS)


@pytest.mark.anyio
async def test_at_160_columns_every_column_is_shown_side_by_side() -> None:
    shown = await _columns((160, 40), "1")
    assert shown["FleetPanel"][0] == list(FleetPanel.COLUMNS)
    stacked = await _columns((160, 40), "2")
    assert stacked["stacked"][1] == 0


@pytest.mark.anyio
@pytest.mark.parametrize("situation", ["degraded_fleet", "admission_fleet"])
async def test_the_header_is_two_unbroken_lines_at_120_columns(situation: str) -> None:
    app = file_app(situation)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        summary = app.screen.query_one("#summary")
        assert summary.size.height == 2
        text = str(summary.render())
        assert "mode automatic" in text.splitlines()[0] and "as of " in text
