"""How one dashboard session is wired: where status comes from, who may act, which clock."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gridctl.tui.client import OperatorRequests, StatusSource


@dataclass(frozen=True)
class DashboardSettings:
    """``operator`` is None when read-only (no token, or a saved file instead of a controller)."""

    source: StatusSource
    operator: OperatorRequests | None = None
    refresh_seconds: float = 2.0
    clock: Callable[[], float] = field(default=time.time)
    read_only_reason: str = "no operator token (--token-file or GRIDCTL_TOKEN_FILE)"
