"""The summary line and the problem banner at the top of the dashboard.

The banner is the honesty rule made visible: when the controller cannot be
read, it says so, with the error and the age of the last good data, and it
stays until a fresh document arrives.
"""

from __future__ import annotations

from datetime import UTC, datetime

from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from gridctl.tui.viewmodel import HOST_STATES, DashboardView
from gridctl.tui.widgets import cells


def snapshot_time(now: float) -> str:
    return datetime.fromtimestamp(now, tz=UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def summary_text(
    view: DashboardView | None, source: str, access: str, width: int | None = None
) -> Text:
    """Two lines: who and what mode, then the counts. When the first would not fit
    ``width`` (a wrapped header hides a panel row and splits words) the snapshot time
    moves to the second line, then the controller id and the source are left out."""
    if view is not None and width is not None:
        for drop in ((), ("id",), ("id", "source")):
            text = _summary(view, source, access, width, drop)
            if text.split("\n")[0].cell_len <= width - 2:  # padding
                return text
    return _summary(view, source, access, width, ())


def _summary(
    view: DashboardView | None,
    source: str,
    access: str,
    width: int | None,
    drop: tuple[str, ...],
) -> Text:
    text = Text("gridctl", style="bold")
    if "source" not in drop:
        text.append(f"  {source}", style="dim")
    text.append(f"  [{access}]", style="yellow" if access == "read-only" else "green")
    if view is None:
        text.append("  waiting for status…", style="dim")
        return text
    controller = view.controller
    authority = "authority" if controller.holds_authority else "NO AUTHORITY"
    who = "" if "id" in drop else f"{controller.controller_id} "
    text.append(f"  {who}term {controller.term} ")
    text.append(authority, style="green" if controller.holds_authority else "bold red")
    text.append("  mode ")
    text.append(view.mode.effective, style="bold")
    if view.mode.drifted:
        text.append(f" (override; git: {view.mode.desired})", style="bold yellow")
    when = f"  as of {snapshot_time(view.now)}"
    late = width is not None and text.cell_len + len(when) > width - 2  # padding
    if not late:
        text.append(when, style="dim")
    text.append("\nhosts")
    for state, count in view.host_counts().items():
        if count or state == "accepting":
            style = cells.HOST_STATE_STYLES.get(state, "") if state in HOST_STATES else ""
            text.append(f" {count} {state}", style=style)
    pending = sum(1 for c in view.commands if c.group in ("pending", "delivered"))
    withdrawn = sum(1 for c in view.commands if c.group == "withdrawn")
    text.append(f"  models {len(view.models)}  pending {pending}")
    text.append(f"  withdrawn {withdrawn}", style="bold red" if withdrawn else "")
    text.append(f"  unmet {len(view.unmet)}", style="bold red" if view.unmet else "")
    if late:  # the date is left out there: the time of day is what ages
        text.append(f"  as of {snapshot_time(view.now)[-9:]}", style="dim")
    return text


class SummaryBar(Static):
    view: reactive[DashboardView | None] = reactive(None, always_update=True)
    source: reactive[str] = reactive("")
    access: reactive[str] = reactive("read-only")

    def render(self) -> Text:
        return summary_text(self.view, self.source, self.access, self.size.width or None)


class ProblemBanner(Static):
    """Hidden while data is fresh and valid. ``-warning`` for schema drift, ``-error`` otherwise."""

    unreachable: reactive[str | None] = reactive(None)
    data_age_seconds: reactive[float | None] = reactive(None)
    schema_error: reactive[str | None] = reactive(None)

    def render(self) -> Text:
        text = Text()
        if self.unreachable is not None:
            text.append("CONTROLLER UNREACHABLE: ", style="bold")
            text.append(self.unreachable)
            if self.data_age_seconds is None:
                text.append("\nNo status received yet; nothing below is real data.")
            else:
                text.append(
                    f"\nShowing the last good data, {cells.age(self.data_age_seconds)} old "
                    "— not refreshed. Everything below may have changed."
                )
        if self.schema_error is not None:
            if text:
                text.append("\n")
            text.append("Status does not match its schema: ", style="bold")
            text.append(self.schema_error)
        return text

    def _sync_classes(self) -> None:
        self.set_class(self.unreachable is not None, "-error")
        self.set_class(self.unreachable is None and self.schema_error is not None, "-warning")
        self.display = self.unreachable is not None or self.schema_error is not None

    def watch_unreachable(self) -> None:
        self._sync_classes()

    def watch_schema_error(self) -> None:
        self._sync_classes()

    def on_mount(self) -> None:
        self._sync_classes()
