"""One host in full, with the exact local override commands to run on that host.

Overrides are local to each host (spec: "A local override outranks global
desired state"), so the dashboard prints the command instead of pretending to
drain or pause a machine remotely.
"""

from __future__ import annotations

import shlex
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Label, Static

from gridctl.tui.viewmodel import HostRow
from gridctl.tui.widgets import cells


def node_commands(host: HostRow) -> tuple[str, ...]:
    """What to type on ``host`` itself; which ones make sense depends on its state."""
    reason = shlex.quote("REASON")
    fence = (
        f"gridctl node drain --reason {reason}",
        f"gridctl node pause --reason {reason}",
        f"gridctl node quarantine --reason {reason}",
    )
    if host.state in ("draining", "paused", "quarantined"):
        return ("gridctl node resume", *fence)
    return (*fence, "gridctl node resume")


def host_lines(host: HostRow) -> tuple[str, ...]:
    reported = f" (host reports {host.reported_state})" if host.reported_state else ""
    lines = [
        f"state: {host.state}{reported}{'  STALE' if host.stale else ''}",
        f"failure domain: {host.failure_domain}   role: {host.role or '-'}",
        f"heartbeat: {cells.age(host.heartbeat_age_seconds)} ago",
        f"capacity {host.capacity_mb} MB: used {host.used_mb}, reserved {host.reserved_mb}, "
        f"external {host.external_mb}, free {host.free_mb}",
        f"runtimes: {', '.join(host.runtimes) or '-'}   tags: {', '.join(host.tags) or '-'}",
    ]
    lines.extend(f"unhealthy: {reason}" for reason in host.unhealthy_reasons)
    lines.append("")
    lines.append("residencies:")
    for r in host.residencies:
        route = {True: "routable", False: "not routable", None: "routing unknown"}[r.routable]
        lines.append(
            f"  {r.model_id:<28} {r.state:<10} {r.memory_mb:>7} MB  {r.ownership:<8} "
            f"{route}, {r.active_requests} active"
        )
    if not host.residencies:
        lines.append("  none")
    if host.cached_models:
        lines.append(f"cached: {', '.join(host.cached_models)}")
    return tuple(lines)


class HostDetailScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,enter,q", "close", "Close")]

    def __init__(self, host: HostRow) -> None:
        super().__init__()
        self.host = host

    def compose(self) -> ComposeResult:
        commands = "\n".join(f"  $ {command}" for command in node_commands(self.host))
        with Vertical(classes="dialog wide"):
            yield Label(f"Host {self.host.host_id}", classes="dialog-title")
            with VerticalScroll():
                yield Static("\n".join(host_lines(self.host)), markup=False)
                yield Static(  # a Static wraps at word boundaries; a Label is cut
                    f"Local overrides: run on {self.host.host_id} itself "
                    "(the controller cannot fence a host remotely):",
                    classes="dialog-subtitle",
                    markup=False,
                )
                yield Static(commands, markup=False, id="node-commands")
            yield Label("escape to close", classes="dialog-hint")

    def action_close(self) -> None:
        self.dismiss(None)
