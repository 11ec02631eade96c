"""Mutation authority: a renewable single-writer lease beside the controller store.

The lease is one row in its own SQLite file (``authority.sqlite3``) in the
state directory, separate from the store so that quarantining a corrupt store
never resets the term. Acquiring, renewing and taking over each happen inside
one ``BEGIN IMMEDIATE`` transaction, and the clock is read only after that
write lock is held, so two processes cannot both decide the lease is theirs:

* the holder renews while its lease is still valid (same term);
* anyone else may take over only once ``now >= expires_at``, and every
  takeover, including the old holder coming back after expiry, increments
  the term;
* a holder may use its grant only while ``now < expires_at`` by the same
  clock, so the intervals of two holders never overlap.

Nodes enforce the rest with the term fence (``gridctl.reconcile.fencing``).
A corrupt lease file is quarantined like the store; the new one starts above
``term_floor`` (the store mirrors the highest term it has seen).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gridctl.controller.store_schema import quarantine

LEASE_DATABASE = "authority.sqlite3"

_DDL = """
CREATE TABLE IF NOT EXISTS lease (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    controller_id TEXT NOT NULL, term INTEGER NOT NULL,
    expires_at REAL NOT NULL, acquired_at REAL NOT NULL, renewed_at REAL NOT NULL)
"""


@dataclass(frozen=True)
class PreviousHolder:
    controller_id: str
    term: int
    expires_at: float


@dataclass(frozen=True)
class Grant:
    """Authority held by ``controller_id`` in ``term`` until ``expires_at``."""

    controller_id: str
    term: int
    expires_at: float
    acquired_at: float
    previous: PreviousHolder | None = None  # whose expired lease this term took over

    def valid(self, now: float) -> bool:
        return now < self.expires_at

    def remaining(self, now: float) -> float:
        """The TTL a command response carries, in the controller's clock."""
        return max(0.0, self.expires_at - now)


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False, timeout=2.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute(_DDL)
    check = conn.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        conn.close()
        raise sqlite3.DatabaseError("authority lease failed quick_check")
    return conn


class AuthorityLease:
    """One controller process's handle on the lease."""

    def __init__(
        self,
        state_dir: str | Path,
        controller_id: str,
        *,
        lease_seconds: float = 15.0,
        clock: Callable[[], float] = time.time,
        term_floor: int = 0,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.controller_id = controller_id
        self.lease_seconds = lease_seconds
        self._clock = clock
        self._term_floor = term_floor
        self._lock = threading.Lock()
        self._grant: Grant | None = None
        self.warnings: list[str] = []
        self.last_error: str | None = None  # a local file: contention, never unreachable
        path = Path(state_dir) / LEASE_DATABASE
        Path(state_dir).mkdir(parents=True, exist_ok=True)
        try:
            self._conn = _connect(path)
        except sqlite3.DatabaseError as exc:
            moved = quarantine(path, clock())
            self.warnings.append(f"authority lease was corrupt ({exc}); moved to {moved.name}")
            self._conn = _connect(path)

    def acquire(self) -> Grant | None:
        """Renew our lease or take over an expired one; None while another holds it."""
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return self.current()  # busy: our existing grant, if any, still stands
            try:
                grant = self._decide()
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT" if grant is not None else "ROLLBACK")
            if grant is not None:
                self._grant = grant
            return grant

    def _decide(self) -> Grant | None:
        now = self._clock()  # read under the write lock
        row = self._conn.execute(
            "SELECT controller_id, term, expires_at, acquired_at FROM lease WHERE id = 1"
        ).fetchone()
        mine = self._grant
        expires = now + self.lease_seconds
        if row is not None and now < row[2]:
            if mine is not None and row[0] == self.controller_id and row[1] == mine.term:
                self._conn.execute(
                    "UPDATE lease SET expires_at = ?, renewed_at = ? WHERE id = 1", (expires, now)
                )
                return Grant(
                    self.controller_id, mine.term, expires, mine.acquired_at, mine.previous
                )
            return None
        previous = PreviousHolder(row[0], int(row[1]), float(row[2])) if row else None
        term = max(int(row[1]) if row else 0, self._term_floor) + 1
        self._conn.execute(
            "INSERT OR REPLACE INTO lease (id, controller_id, term, expires_at, acquired_at, "
            "renewed_at) VALUES (1, ?, ?, ?, ?, ?)",
            (self.controller_id, term, expires, now, now),
        )
        return Grant(self.controller_id, term, expires, now, previous)

    def current(self) -> Grant | None:
        """Our grant while it is still valid by the clock; None otherwise."""
        grant = self._grant
        return grant if grant is not None and grant.valid(self._clock()) else None

    def holder(self) -> Grant | None:
        """Whoever the lease file names, valid or not (for status)."""
        with self._lock:
            row = self._conn.execute(
                "SELECT controller_id, term, expires_at, acquired_at FROM lease WHERE id = 1"
            ).fetchone()
        return Grant(row[0], int(row[1]), float(row[2]), float(row[3])) if row else None

    def leader_address(self) -> str | None:
        """Where the holder serves; a single-directory lease does not record it."""
        return None

    def release(self) -> None:
        """Hand authority back at once (leaving automatic, shutting down)."""
        with self._lock:
            grant, self._grant = self._grant, None
            if grant is None:
                return
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(
                "UPDATE lease SET expires_at = min(expires_at, ?) "
                "WHERE id = 1 AND controller_id = ? AND term = ?",
                (self._clock(), self.controller_id, grant.term),
            )
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
