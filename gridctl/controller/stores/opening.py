"""Choosing and opening the controller's backend (today: SQLite in a state directory)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from gridctl.controller.authority import AuthorityLease
from gridctl.controller.store import ControllerStore
from gridctl.controller.stores import DEFAULT_LEASE_SECONDS, Lease


def open_store(
    state_dir: Path | None, *, clock: Callable[[], float] = time.time
) -> ControllerStore:
    """The controller's durable store (SQLite in ``state_dir``; in memory without one)."""
    return ControllerStore(state_dir, clock=clock)


def open_lease(
    state_dir: Path | None,
    store: ControllerStore,
    controller_id: str,
    *,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    clock: Callable[[], float] = time.time,
) -> Lease | None:
    """The authority lease beside ``store``; None without a durable place for one."""
    if state_dir is None:
        return None
    return AuthorityLease(
        state_dir,
        controller_id,
        lease_seconds=lease_seconds,
        clock=clock,
        term_floor=store.highest_term(),
    )
