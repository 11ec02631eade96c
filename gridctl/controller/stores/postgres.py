"""The shared backend: PostgreSQL through psycopg 3, for highly available controllers.

Every write transaction first takes one transaction-scoped advisory lock, so
transactions from several controllers are serialised exactly as SQLite's
``BEGIN IMMEDIATE`` serialises them on one file. Statements keep the store's
``?`` placeholders; they are rewritten to psycopg's once, here.

A connection that fails is dropped and the next call reconnects; until then
every call raises ``TransientError`` (the store refuses automatic mode and
status answers from what it last read). The password never travels in argv:
it comes from ``password_file`` or from libpq's own environment
(``PGPASSWORD``, ``PGPASSFILE``, ``~/.pgpass``).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg

from gridctl.controller.authority import Grant, PreviousHolder
from gridctl.controller.stores.postgres_schema import MIGRATIONS, SCHEMA_VERSION
from gridctl.errors import PermanentError, TransientError

WRITE_LOCK = 0x67726964  # the advisory lock every write transaction holds
SCHEMA_LOCK = 0x67726965
CONNECT_TIMEOUT_SECONDS = 3
# A write transaction that sits idle this long between statements is ended by the
# server. A controller stopped inside one (SIGSTOP, a frozen VM) would otherwise hold
# the write lock for as long as its connection lives, and every other controller's
# next write, and every store read queued behind it in that process, would wait on it:
# a follower could take the lease and then never act on it. A live transaction is
# never idle for anything near this long; one that is, fails and is retried.
STALLED_WRITER_SECONDS = 2.0


@dataclass(frozen=True)
class PostgresLocation:
    """Where the database is: a ``postgresql://`` URL without a password, and a password file."""

    url: str
    password_file: Path | None = None

    def __post_init__(self) -> None:
        parts = urlsplit(self.url)
        if parts.scheme not in ("postgresql", "postgres"):
            raise PermanentError(f"--store {self.url!r}: expected a postgresql:// URL")
        if parts.password is not None:
            raise PermanentError(
                "--store: the URL carries a password, which would be visible in the process "
                "list; use --store-password-file FILE or libpq's PGPASSFILE / PGPASSWORD"
            )

    def describe(self) -> str:
        parts = urlsplit(self.url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 5432}{parts.path or ''}"

    def connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        extra: dict[str, Any] = {}
        if self.password_file is not None:
            try:
                extra["password"] = self.password_file.read_text().strip()
            except OSError as exc:
                raise PermanentError(
                    f"--store-password-file {self.password_file}: {exc.strerror}"
                ) from exc
        try:
            return psycopg.connect(
                self.url,
                autocommit=True,
                connect_timeout=CONNECT_TIMEOUT_SECONDS,
                application_name="gridctl-controller",
                **extra,
            )
        except psycopg.OperationalError as exc:
            raise TransientError(
                f"PostgreSQL at {self.describe()} unreachable: {_first_line(exc)}", 2.0
            ) from exc


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def _psycopg_sql(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class _Tx:
    def __init__(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        self._conn = conn

    def execute(self, sql: str, args: Sequence[Any] = (), /) -> psycopg.Cursor[tuple[Any, ...]]:
        return self._conn.execute(_psycopg_sql(sql), tuple(args))

    def executemany(self, sql: str, rows: Iterable[Sequence[Any]], /) -> object:
        rows = [tuple(r) for r in rows]
        if rows:
            with self._conn.cursor() as cursor:
                cursor.executemany(_psycopg_sql(sql), rows)
        return None


class _Connection:
    """One lazily (re)connected session; migrations run on the first one."""

    def __init__(self, location: PostgresLocation) -> None:
        self.location = location
        self._conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self._lock = threading.RLock()

    @contextmanager
    def session(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        with self._lock:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = self.location.connect()
                try:
                    migrate(self._conn)
                except psycopg.Error:
                    self._drop()
                    raise
            try:
                yield self._conn
            except psycopg.OperationalError as exc:
                self._drop()
                raise TransientError(
                    f"PostgreSQL at {self.location.describe()} unreachable: {_first_line(exc)}",
                    2.0,
                ) from exc
            except psycopg.InterfaceError as exc:
                self._drop()
                lost = f"PostgreSQL connection lost: {_first_line(exc)}"
                raise TransientError(lost, 2.0) from exc
            except psycopg.errors.IdleInTransactionSessionTimeout as exc:
                self._drop()  # the server ended this session's stalled write: nothing of it stays
                stalled = f"PostgreSQL ended a stalled write transaction: {_first_line(exc)}"
                raise TransientError(stalled, 1.0) from exc

    def _drop(self) -> None:
        if self._conn is not None:
            with suppress(psycopg.Error):
                self._conn.close()
        self._conn = None

    def close(self) -> None:
        with self._lock:
            self._drop()


def migrate(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    """Apply every migration newer than the database's version; returns the version."""
    with conn.transaction():
        _end_if_stalled(conn)
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK,))
        conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        version = int(row[0]) if row and str(row[0]).isdigit() else 0
        if version > SCHEMA_VERSION:
            raise PermanentError(
                f"controller state schema {version} is newer than this gridctl ({SCHEMA_VERSION})"
            )
        for number, _what, statements in MIGRATIONS:
            if number > version:
                conn.execute(statements.encode())
                version = number
        initial = [
            ("schema_version", str(version)),
            ("epoch", secrets.token_hex(8)),
            ("sequence", "0"),
            ("queue", "0"),
            ("created_at", repr(time.time())),
            ("warnings", "[]"),
        ]
        with conn.cursor() as cursor:
            cursor.executemany(
                "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT DO NOTHING", initial
            )
        conn.execute("UPDATE meta SET value = %s WHERE key = 'schema_version'", (str(version),))
    return version


def _end_if_stalled(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
    """Have the server end this transaction if its holder stops mid-way (see
    ``STALLED_WRITER_SECONDS``); it applies to this transaction only."""
    patience_ms = int(STALLED_WRITER_SECONDS * 1000)
    conn.execute(f"SET LOCAL idle_in_transaction_session_timeout = {patience_ms}")


class PostgresBackend:
    durable = True
    shared = True
    quarantined_to: Path | None = None
    warnings: tuple[str, ...] = ()
    greatest = "greatest"

    def __init__(self, location: PostgresLocation) -> None:
        self.location = location
        self._connection = _Connection(location)

    @contextmanager
    def transaction(self) -> Iterator[_Tx]:
        with self._connection.session() as conn, conn.transaction():
            _end_if_stalled(conn)
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            yield _Tx(conn)

    def read(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._connection.session() as conn:
            return list(conn.execute(_psycopg_sql(sql), tuple(args)).fetchall())

    def close(self) -> None:
        self._connection.close()


_LEASE_ROW = (
    "SELECT controller_id, term, expires_at > now(), "
    "extract(epoch FROM expires_at)::float8, extract(epoch FROM acquired_at)::float8, "
    "extract(epoch FROM now())::float8, address FROM authority_lease WHERE id = 1"
)


class PostgresLease:
    """The authority lease as one row, clocked by the database server's ``now()``.

    Renewal and takeover happen in one transaction holding the row lock; a
    takeover (by anyone, after expiry) increments the term. The holder keeps its
    own deadline on its monotonic clock, measured from before the request left,
    so it stops using a grant no later than the database expires it, and at once
    when a renewal fails.
    """

    def __init__(
        self,
        location: PostgresLocation,
        controller_id: str,
        *,
        address: str | None = None,
        lease_seconds: float = 15.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        term_floor: int = 0,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.controller_id = controller_id
        self.address = address
        self.lease_seconds = lease_seconds
        self._clock, self._monotonic = clock, monotonic
        self._term_floor = term_floor
        self._connection = _Connection(location)  # its own session: store writes never delay it
        self._lock = threading.Lock()
        self._grant: Grant | None = None
        self._deadline = 0.0
        self._leader: str | None = None
        self.warnings: list[str] = []
        self.last_error: str | None = None

    def acquire(self) -> Grant | None:
        """Renew our lease or take over an expired one; None while another holds it or
        when the database cannot be reached (a failed renewal ends our authority)."""
        with self._lock:
            started, wall = self._monotonic(), self._clock()
            try:
                grant = self._decide(wall)
            except (TransientError, psycopg.Error) as exc:
                self.last_error = str(exc) if isinstance(exc, TransientError) else _first_line(exc)
                self._grant, self._leader = None, None
                return None
            self.last_error = None
            self._grant = grant
            if grant is not None:
                self._deadline = started + self.lease_seconds
            return grant

    def _decide(self, wall: float) -> Grant | None:
        ttl = self.lease_seconds
        # A holder stopped inside this transaction (SIGSTOP, a frozen VM) would keep the
        # row lock for as long as its connection lives, and every follower's FOR UPDATE
        # would wait on it: no failover ever. The server ends this transaction once it
        # sits idle for a quarter of the lease, and a follower gives up waiting for the
        # lock as soon (the next acquire tries again).
        patience_ms = max(100, int(ttl * 250))
        with self._connection.session() as conn, conn.transaction():
            conn.execute(f"SET LOCAL idle_in_transaction_session_timeout = {patience_ms}")
            conn.execute(f"SET LOCAL lock_timeout = {patience_ms}")
            row = conn.execute(_LEASE_ROW + " FOR UPDATE").fetchone()
            if row is None:
                raise PermanentError("authority_lease row is missing")
            holder, term, live, expires, _acquired, _now, address = row
            mine = self._grant
            if live:
                if mine is not None and holder == self.controller_id and term == mine.term:
                    conn.execute(
                        "UPDATE authority_lease SET expires_at = now() + make_interval(secs => %s),"
                        " renewed_at = now(), address = %s WHERE id = 1",
                        (ttl, self.address),
                    )
                    self._leader = self.address
                    return replace(mine, expires_at=wall + ttl)
                self._leader = address
                return None
            previous = PreviousHolder(holder, int(term), float(expires)) if holder else None
            new_term = max(int(term), self._term_floor) + 1
            conn.execute(
                "UPDATE authority_lease SET controller_id = %s, term = %s, address = %s, "
                "expires_at = now() + make_interval(secs => %s), acquired_at = now(), "
                "renewed_at = now() WHERE id = 1",
                (self.controller_id, new_term, self.address, ttl),
            )
            self._leader = self.address
            return Grant(self.controller_id, new_term, wall + ttl, wall, previous)

    def current(self) -> Grant | None:
        """Our grant while both our monotonic deadline and the wall clock say it is valid."""
        grant = self._grant
        if grant is None or self._monotonic() >= self._deadline or not grant.valid(self._clock()):
            return None
        return grant

    def holder(self) -> Grant | None:
        """Whoever the lease row names, valid or not (times in the database's clock)."""
        try:
            with self._lock, self._connection.session() as conn:
                row = conn.execute(_LEASE_ROW).fetchone()
        except (TransientError, psycopg.Error):
            return None
        if row is None or not row[0]:
            return None
        return Grant(row[0], int(row[1]), float(row[3]), float(row[4]))

    def leader_address(self) -> str | None:
        """Where the current holder serves, as last read from the lease row. Our own
        address once our grant has run out is no answer: a holder resumed after a stop
        (SIGSTOP, a frozen VM) does not know who holds the lease until it reads the row
        again, so it names nobody rather than itself."""
        leader = self._leader
        if leader is not None and leader == self.address and self.current() is None:
            return None
        return leader

    def release(self) -> None:
        """Hand authority back at once (shutting down)."""
        with self._lock:
            grant, self._grant = self._grant, None
            if grant is None:
                return
            try:
                with self._connection.session() as conn:
                    conn.execute(
                        "UPDATE authority_lease SET expires_at = least(expires_at, now()) "
                        "WHERE id = 1 AND controller_id = %s AND term = %s",
                        (self.controller_id, grant.term),
                    )
            except (TransientError, psycopg.Error):
                pass  # it expires by itself

    def close(self) -> None:
        self._connection.close()
