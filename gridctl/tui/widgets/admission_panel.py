"""Admission panel: one row per active unbound workload, beside the per-model replica table.

The admission row explains the existing decision (spec: "Proactive observation
and portfolio planning"): its state, the chosen model, offered concurrency,
desired/planned/ready/missing replicas, eligible hosts, startup estimate and
the concrete reason. The model table answers "which models are short, and why".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import RenderableType
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal

from gridctl.tui.viewmodel import AdmissionRow, DashboardView, ModelRow
from gridctl.tui.widgets import cells
from gridctl.tui.widgets.rows_panel import RowsPanel


def replicas(desired: int, planned: int, ready: int, missing: int) -> Text:
    text = Text(f"{desired}/{planned}/{ready}/")
    text.append(str(missing), style="bold red" if missing else "green")
    return text


class AdmissionTable(RowsPanel):
    TITLE = "Admission (active unbound workloads)"
    COLUMNS = ("Workload", "State", "Model", "Conc.", "D/P/R/M", "Elig.", "Startup", "Reason")
    NARROW_COLUMNS = ("Workload", "State", "Model", "Reason")
    EMPTY = "no active unbound workload"

    def rows_of(self, view: DashboardView) -> Sequence[AdmissionRow]:
        return view.admission

    def key_of(self, row: Any) -> str:
        return str(row.workload)

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        item: AdmissionRow = row
        concurrency = "-" if item.offered_concurrency is None else f"{item.offered_concurrency:.2f}"
        startup = item.startup_estimate_seconds
        return (
            Text(item.workload, style="bold"),
            cells.styled(item.state, cells.ADMISSION_STATE_STYLES),
            item.model_id or Text("none", style="dim"),
            concurrency,
            replicas(item.desired, item.planned, item.ready, item.missing),
            "-" if item.eligible_hosts is None else str(item.eligible_hosts),
            "-" if startup is None else cells.age(startup),
            item.reason,
        )

    def details(self, row: Any) -> tuple[str, tuple[str, ...]]:
        item: AdmissionRow = row
        conc = "unknown" if item.offered_concurrency is None else f"{item.offered_concurrency:.3f}"
        return f"Workload {item.workload}", (
            f"state: {item.state}",
            f"chosen model: {item.model_id or 'none'}",
            f"offered concurrency: {conc}",
            f"replicas desired/planned/ready/missing: "
            f"{item.desired}/{item.planned}/{item.ready}/{item.missing}",
            f"eligible hosts: {'-' if item.eligible_hosts is None else item.eligible_hosts}",
            f"startup estimate: {cells.age(item.startup_estimate_seconds)}",
            f"reason: {item.reason}",
            *item.evidence,
        )


class ModelTable(RowsPanel):
    TITLE = "Models"
    COLUMNS = ("Model", "Des.", "Plan", "Ready", "Miss", "Health", "Sync", "Unmet")
    NARROW_COLUMNS = ("Model", "Des.", "Ready", "Health", "Unmet")
    EMPTY = "no model profiles"

    def rows_of(self, view: DashboardView) -> Sequence[ModelRow]:
        return view.models

    def key_of(self, row: Any) -> str:
        return str(row.model_id)

    def cells(self, row: Any) -> tuple[RenderableType, ...]:
        item: ModelRow = row
        name = Text(item.model_id, style="bold")
        if item.retiring:
            name.append(" (retiring)", style="dim")
        return (
            name,
            str(item.desired),
            str(item.planned),
            str(item.ready),
            Text(str(item.missing), style="bold red" if item.missing else "green"),
            cells.styled(item.health, cells.HEALTH_STYLES),
            Text(item.sync, style="green" if item.sync == "Synced" else "yellow"),
            Text(", ".join(item.unmet) or "-", style="red" if item.unmet else "dim"),
        )

    def details(self, row: Any) -> tuple[str, tuple[str, ...]]:
        item: ModelRow = row
        return f"Model {item.model_id}", (
            f"replicas desired/planned/ready/missing: "
            f"{item.desired}/{item.planned}/{item.ready}/{item.missing}",
            f"health: {item.health}   sync: {item.sync}",
            f"reason: {item.reason or '-'}",
            *(f"unmet: {code}" for code in item.unmet),
        )


class AdmissionPanel(Horizontal):
    """The two tables side by side; the screen feeds both through their reactives."""

    def compose(self) -> ComposeResult:
        yield AdmissionTable(id="admission-table")
        yield ModelTable(id="model-table")
