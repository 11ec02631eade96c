"""Desired-state panel: git's revision, the last good one, rejected revisions and mode drift.

An operator override of the mode is drift from git, so it is drawn as drift
(yellow, with who set it and why), never folded silently into "the mode".
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.reactive import reactive
from textual.widgets import Static

from gridctl.tui.viewmodel import DashboardView, ModeView
from gridctl.tui.widgets import cells


def mode_text(mode: ModeView) -> Text:
    text = Text("mode      ", style="bold")
    text.append(mode.effective, style="bold green" if mode.effective == "automatic" else "bold")
    if mode.drifted:
        text.append(f"   DRIFT: operator override ({mode.override_mode})", style="bold yellow")
        text.append(f", git declares {mode.desired}", style="yellow")
        set_by = mode.override_source or "operator"
        text.append(f"\n          set by {set_by} {cells.age(mode.override_age_seconds)} ago")
        if mode.override_reason:
            text.append(f": {mode.override_reason}")
    else:
        text.append(f"   (from git; git declares {mode.desired})", style="dim")
    if mode.refused_automatic:
        text.append(f"\n          automatic refused: {mode.refused_automatic}", style="bold red")
    return text


def desired_text(view: DashboardView, needle: str) -> Text:
    desired = view.desired
    text = mode_text(view.mode)
    dirty = " (uncommitted changes)" if desired.dirty else ""
    text.append("\nsource    ", style="bold")
    text.append(f"{desired.source} {desired.where or desired.directory or ''}".rstrip())
    if desired.note:
        text.append(f"\n          {desired.note}", style="bold yellow")
        if desired.uncommitted:
            text.append(f": {', '.join(desired.uncommitted[:6])}", style="yellow")
    for line in desired.overrides:
        text.append(f"\nDRIFT     {line}", style="bold yellow")
    text.append("\nrevision  ", style="bold")
    text.append(f"{desired.revision or 'none'}{dirty}")
    text.append("\nlast good ", style="bold")
    good = desired.last_good_revision or "none"
    behind = desired.revision is not None and desired.last_good_revision != desired.revision
    text.append(good, style="yellow" if behind else "green")
    if desired.latest_seen_revision and desired.latest_seen_revision != desired.revision:
        text.append(f"   latest seen {desired.latest_seen_revision}", style="yellow")
    revisions = view.revisions
    text.append("\ncausal    ", style="bold")
    text.append(
        f"dirty {revisions.get('dirty', 0)}  processed {revisions.get('processed', 0)}  "
        f"success {revisions.get('success', 0)}  safety {revisions.get('safety', 0)}"
    )
    text.append("\nlast tick ", style="bold")
    text.append(view.last_tick)
    if view.delivery_safety_error:
        text.append("\ndelivery safety error: ", style="bold red")
        text.append(view.delivery_safety_error)
    text.append(f"\n\nrejected revisions ({len(desired.rejected)})\n", style="bold underline")
    if not desired.rejected:
        text.append("none\n", style="dim")
    for rejected in desired.rejected:
        errors = [e for e in rejected.errors if not needle or needle in e.lower()]
        if needle and not errors and needle not in rejected.revision.lower():
            continue
        text.append(f"{rejected.revision}", style="bold red")
        text.append(f"  {cells.age(rejected.age_seconds)} ago, {len(rejected.errors)} error(s)\n")
        for error in errors:
            text.append(f"  {error}\n", style="red")
    for title, lines in (("warnings", (*desired.warnings, *view.warnings)), ("unmet", view.unmet)):
        shown = [line for line in lines if not needle or needle in line.lower()]
        text.append(f"\n{title} ({len(lines)})\n", style="bold underline")
        for line in shown:
            text.append(f"  {line}\n", style="yellow")
        if not lines:
            text.append("none\n", style="dim")
    return text


class DesiredPanel(VerticalScroll):
    """Read-only text; the filter narrows the rejected-revision errors, warnings and unmet lines."""

    view: reactive[DashboardView | None] = reactive(None, always_update=True)
    filter_text: reactive[str] = reactive("")

    def compose(self) -> ComposeResult:
        yield Static(id="desired-text")

    def on_mount(self) -> None:
        self.border_title = "Desired state"
        self.call_after_refresh(self._render_view)

    def watch_view(self) -> None:
        self._render_view()

    def watch_filter_text(self) -> None:
        self._render_view()

    def _render_view(self) -> None:
        if not self.is_mounted:
            return
        static = self.query_one("#desired-text", Static)
        if self.view is None:
            static.update(Text("no data", style="dim"))
            return
        static.update(desired_text(self.view, self.filter_text.strip().lower()))
