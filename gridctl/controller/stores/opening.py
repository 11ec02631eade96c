"""Choosing and opening the controller's backend: SQLite in a state directory, or PostgreSQL.

The PostgreSQL modules are imported only when a ``postgresql://`` store is
asked for, so the embedded default needs no database driver.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from gridctl.controller.authority import AuthorityLease
from gridctl.controller.store import ControllerStore
from gridctl.controller.stores import DEFAULT_LEASE_SECONDS, Lease

if TYPE_CHECKING:
    from gridctl.controller.stores.postgres import PostgresLocation


def open_store(
    state_dir: Path | None,
    *,
    clock: Callable[[], float] = time.time,
    shared: PostgresLocation | None = None,
) -> ControllerStore:
    """The controller's durable store: PostgreSQL when ``shared`` names one, else SQLite
    in ``state_dir`` (in memory without one)."""
    if shared is not None:
        from gridctl.controller.stores.postgres import PostgresBackend

        return ControllerStore(None, clock=clock, backend=PostgresBackend(shared))
    return ControllerStore(state_dir, clock=clock)


def open_lease(
    state_dir: Path | None,
    store: ControllerStore,
    controller_id: str,
    *,
    lease_seconds: float = DEFAULT_LEASE_SECONDS,
    clock: Callable[[], float] = time.time,
    shared: PostgresLocation | None = None,
    address: str | None = None,
) -> Lease | None:
    """The authority lease beside ``store``; None without a durable place for one."""
    if shared is not None:
        from gridctl.controller.stores.postgres import PostgresLease

        return PostgresLease(
            shared,
            controller_id,
            address=address,
            lease_seconds=lease_seconds,
            clock=clock,
            term_floor=store.highest_term(),
        )
    if state_dir is None:
        return None
    return AuthorityLease(
        state_dir,
        controller_id,
        lease_seconds=lease_seconds,
        clock=clock,
        term_floor=store.highest_term(),
    )
