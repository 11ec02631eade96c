"""Fleet panel: one row per host with its lifecycle state, capacity, residencies and heartbeat."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from rich.console import RenderableType
from rich.text import Text
from textual.message import Message

from gridctl.tui.viewmodel import DashboardView, HostRow
from gridctl.tui.widgets import cells
from gridctl.tui.widgets.rows_panel import RowsPanel


def residency_summary(host: HostRow) -> Text:
    """``model ready · other warming`` with each lifecycle state in its colour."""
    text = Text()
    for index, residency in enumerate(host.residencies):
        if index:
            text.append(" · ", style="dim")
        text.append(residency.model_id)
        text.append(" ")
        text.append(cells.styled(residency.state, cells.RESIDENCY_STATE_STYLES))
        if residency.ownership != "managed":
            text.append(f" ({residency.ownership})", style="dim")
    for transfer in host.transfers:
        if text.plain:
            text.append(" · ", style="dim")
        text.append(f"{transfer.model_id} fetching ")
        text.append_text(cells.transfer_bar(transfer.fraction, transfer.rate_bytes_per_second))
    if not host.residencies and not host.transfers:
        text.append("—", style="dim")
    return text


class FleetPanel(RowsPanel):
    """Hosts by id. Enter opens the host detail with the local override commands."""

    TITLE = "Fleet"
    COLUMNS = ("Host", "State", "Capacity used/total", "Residencies", "Heartbeat", "Domain")
    NARROW_COLUMNS = ("Host", "State", "Capacity used/total", "Domain", "Residencies")
    EMPTY = "no hosts registered"
    BINDINGS: ClassVar = [("enter", "choose_host", "Host detail")]

    @dataclass
    class HostChosen(Message):
        """The operator asked for one host's detail."""

        host: HostRow

    def rows_of(self, view: DashboardView) -> Sequence[HostRow]:
        return view.hosts

    def key_of(self, row: Any) -> str:
        return str(row.host_id)

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        host: HostRow = row
        return (
            Text(host.host_id, style="bold"),
            cells.host_state(host.state, host.stale),
            cells.capacity_bar(host.used_mb, host.reserved_mb + host.external_mb, host.capacity_mb),
            residency_summary(host),
            cells.heartbeat(host.heartbeat_age_seconds),
            host.failure_domain,
        )

    def post_details(self, row: Any) -> None:
        self.post_message(self.HostChosen(row))

    def action_choose_host(self) -> None:
        row = self.current_row()
        if row is not None:
            self.post_details(row)
