"""The controller's state boundary: where durable state and the authority lease live.

One controller with a state directory keeps both in SQLite files there (the
embedded default, ``stores.sqlite``). Highly available controllers share one
PostgreSQL database instead (``stores.postgres``). Everything above this
package (``control``, ``serving``, the CLI) sees the same ``ControllerStore``
over a ``Backend`` and a ``Lease``; which backend sits behind them is decided
once, by ``stores.opening``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

from gridctl.controller.authority import Grant

DEFAULT_LEASE_SECONDS = 15.0


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Transaction(Protocol):
    """Statements inside one write transaction (``?`` placeholders in every backend)."""

    def execute(self, sql: str, args: Sequence[Any] = (), /) -> Cursor: ...

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> object: ...


class Backend(Protocol):
    """A SQL database holding the controller's tables (see ``store_schema``)."""

    durable: bool  # survives this process
    shared: bool  # several controllers may use it at once
    quarantined_to: Path | None
    warnings: tuple[str, ...]
    greatest: str  # the SQL function for the larger of two values

    def transaction(self) -> AbstractContextManager[Transaction]: ...

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]: ...

    def close(self) -> None: ...


class Lease(Protocol):
    """A renewable single-writer lease: one holder per term, terms only grow."""

    controller_id: str
    lease_seconds: float
    warnings: list[str]
    last_error: str | None  # why the last renewal failed (None: it did not fail)

    def acquire(self) -> Grant | None: ...

    def current(self) -> Grant | None: ...

    def holder(self) -> Grant | None: ...

    def leader_address(self) -> str | None: ...

    def release(self) -> None: ...

    def close(self) -> None: ...
