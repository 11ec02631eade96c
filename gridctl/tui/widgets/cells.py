"""Rich cell renderers shared by the panels: state colours, capacity bars, ages, signs.

One place decides what colour "quarantined" or "capacity-contended" is, so
every panel, detail screen and screenshot agrees.
"""

from __future__ import annotations

from rich.text import Text

HOST_STATE_STYLES = {
    "accepting": "bold green",
    "throttled": "bold yellow",
    "draining": "bold cyan",
    "paused": "bold blue",
    "unhealthy": "bold red",
    "quarantined": "bold magenta",
}
RESIDENCY_STATE_STYLES = {
    "ready": "green",
    "loading": "yellow",
    "warming": "yellow",
    "draining": "cyan",
    "unloading": "cyan",
    "failed": "bold red",
    "cached": "dim",
}
ADMISSION_STATE_STYLES = {
    "ready": "green",
    "starting": "yellow",
    "planned": "cyan",
    "undersupplied": "bold yellow",
    "deferred": "blue",
    "capacity-contended": "bold magenta",
    "blocked-by-residency": "magenta",
    "infeasible": "bold red",
    "awaiting-plan": "dim",
}
HEALTH_STYLES = {
    "Healthy": "green",
    "Progressing": "yellow",
    "Degraded": "bold red",
    "Suspended": "blue",
    "Missing": "bold red",
    "Unknown": "dim",
}
SIGN_STYLES = {"+": "bold green", "~": "bold yellow", "-": "bold red", "!": "bold magenta"}
COMMAND_GROUP_STYLES = {
    "pending": "yellow",
    "delivered": "cyan",
    "withdrawn": "bold red",
    "receipt": "dim",
}
BAR_WIDTH = 10


def styled(value: str, styles: dict[str, str], default: str = "") -> Text:
    return Text(value, style=styles.get(value, default))


def host_state(state: str, stale: bool = False) -> Text:
    text = styled(state, HOST_STATE_STYLES, "bold")
    if stale:
        text.append(" stale", style="bold red")
    return text


def gib(mb: int) -> str:
    return f"{mb / 1024:.1f}"


def capacity_bar(used_mb: int, reserved_mb: int, capacity_mb: int, width: int = BAR_WIDTH) -> Text:
    """``[████▒▒░░░░] 12.0/24.0G``: solid is model use, shaded is reserved/external."""
    text = Text()
    if capacity_mb <= 0:
        return Text("no capacity", style="dim")
    fraction_used = min(1.0, max(0.0, used_mb / capacity_mb))
    fraction_reserved = min(1.0 - fraction_used, max(0.0, reserved_mb / capacity_mb))
    solid = round(fraction_used * width)
    shaded = min(width - solid, round(fraction_reserved * width))
    load = (used_mb + reserved_mb) / capacity_mb
    style = "red" if load > 0.9 else "yellow" if load > 0.7 else "green"
    text.append("█" * solid, style=style)
    text.append("▒" * shaded, style="dim " + style)
    text.append("░" * (width - solid - shaded), style="dim")
    text.append(f" {gib(used_mb + reserved_mb)}/{gib(capacity_mb)}G")
    return text


def transfer_bar(fraction: float | None, rate_bytes_per_second: float, width: int = 10) -> Text:
    """``[█████░░░░░] 52% 21.0MB/s``: an artifact download's progress."""
    text = Text()
    if fraction is None:
        text.append("░" * width, style="dim")
        text.append(" ?%")
    else:
        solid = round(fraction * width)
        text.append("█" * solid, style="cyan")
        text.append("░" * (width - solid), style="dim")
        text.append(f" {int(fraction * 100)}%")
    text.append(f" {rate_bytes_per_second / (1024 * 1024):.1f}MB/s", style="dim")
    return text


def age(seconds: float | None) -> str:
    """A short human age: ``4s``, ``3m12s``, ``2h05m``, ``3d4h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    whole = int(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600}h"


def heartbeat(seconds: float | None) -> Text:
    if seconds is None:
        return Text("never", style="bold red")
    style = "red" if seconds > 60 else "yellow" if seconds > 15 else ""
    return Text(age(seconds), style=style)


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds * 1000:.0f}ms" if seconds < 1 else f"{seconds:.1f}s"


def sign(value: str) -> Text:
    return Text(value, style=SIGN_STYLES.get(value, "bold"))
