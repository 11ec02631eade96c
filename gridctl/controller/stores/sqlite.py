"""The embedded backend: one SQLite file (WAL) in the controller's state directory.

Opening verifies the schema and quarantines a corrupt file (``store_schema``).
``BEGIN IMMEDIATE`` takes the write lock at the start of every transaction, so
a second process on the same file waits or gets a retryable error, never a
half-applied write.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gridctl.controller.store_schema import open_database
from gridctl.errors import TransientError


class SqliteBackend:
    shared = False
    greatest = "max"

    def __init__(self, state_dir: Path | None, now: float) -> None:
        opened = open_database(state_dir, now)
        self._conn = opened.connection
        self._lock = threading.RLock()
        self.durable = opened.durable
        self.quarantined_to = opened.quarantined_to
        self.warnings = opened.warnings

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction; rolled back on any error."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise TransientError(f"controller state busy: {exc}", retry_after=0.5) from exc
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._conn.execute(sql, args).fetchall())

    def close(self) -> None:
        with self._lock:
            self._conn.close()
