"""Moving a controller's state from its SQLite files into a shared PostgreSQL database.

The source is read in one read transaction (a consistent snapshot, even of a
file a controller still has open) and written to the target in one
transaction: every table row for row, the plan-generation epoch and sequence
with the rest of ``meta``, and the authority term, so nodes that saw the old
controller's term accept the new one. A target that already holds controller
state is refused; nothing is half-copied.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gridctl.controller.authority import LEASE_DATABASE
from gridctl.controller.store_schema import (
    ADDED_TABLES,
    DATABASE_NAME,
    REQUIRED_TABLES,
    SCHEMA_VERSION,
    TABLES,
)
from gridctl.controller.stores.postgres import PostgresLocation, _Connection
from gridctl.errors import PermanentError

# parents before the rows that name them; meta is merged, not inserted
TABLE_ORDER = (
    "meta",
    "profiles",
    "overrides",
    "actions",
    "receipts",
    "timings",
    "watermarks",
    "evidence",
    "withdrawn",
    "tombstones",
    "demand_state",
)
STATE_TABLES = ("profiles", "actions", "receipts", "evidence", "withdrawn", "tombstones")
assert set(TABLE_ORDER) == TABLES


@dataclass(frozen=True)
class Copied:
    source: Path
    target: str
    rows: dict[str, int] = field(default_factory=dict)
    term: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "source": str(self.source),
            "target": self.target,
            "rows": dict(self.rows),
            "term": self.term,
        }


def source_database(path: Path) -> Path:
    """The controller database a path names: the file, a state dir, or a `gridctl up` root."""
    for candidate in (path, path / DATABASE_NAME, path / "controller" / DATABASE_NAME):
        if candidate.is_file():
            return candidate
    raise PermanentError(f"--from {path}: no {DATABASE_NAME} there (nor in {path}/controller)")


def _read_source(database: Path) -> tuple[dict[str, tuple[list[str], list[tuple[Any, ...]]]], int]:
    try:
        conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, isolation_level=None)
    except sqlite3.Error as exc:
        raise PermanentError(f"--from {database}: {exc}") from exc
    try:
        conn.execute("BEGIN")
        check = conn.execute("PRAGMA quick_check").fetchone()
        if check is None or check[0] != "ok":
            raise PermanentError(f"--from {database}: not a healthy database ({check})")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if REQUIRED_TABLES - names:
            missing = sorted(REQUIRED_TABLES - names)
            raise PermanentError(f"--from {database}: missing tables {missing}")
        version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        if version is None or int(version[0]) != SCHEMA_VERSION:
            raise PermanentError(f"--from {database}: schema version {version} is not ours")
        tables: dict[str, tuple[list[str], list[tuple[Any, ...]]]] = {}
        for table in TABLE_ORDER:
            if table in ADDED_TABLES and table not in names:
                tables[table] = ([], [])  # a database no newer gridctl has opened yet
                continue
            cursor = conn.execute(f"SELECT * FROM {table}")
            columns = [d[0] for d in cursor.description]
            tables[table] = (columns, list(cursor.fetchall()))
        conn.execute("COMMIT")
    except sqlite3.DatabaseError as exc:
        raise PermanentError(f"--from {database}: {exc}") from exc
    finally:
        conn.close()
    return tables, _lease_term(database.parent / LEASE_DATABASE)


def _lease_term(path: Path) -> int:
    if not path.is_file():
        return 0
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            row = conn.execute("SELECT term FROM lease WHERE id = 1").fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return 0  # a damaged lease file: the store's mirrored highest_term still counts
    return int(row[0]) if row else 0


def migrate_sqlite_to_postgres(path: Path, location: PostgresLocation) -> Copied:
    """Copy everything; raises PermanentError (nothing written) when it cannot."""
    database = source_database(path)
    tables, lease_term = _read_source(database)
    meta = dict(tables["meta"][1])
    term = max(lease_term, int(meta.get("highest_term", "0") or 0))
    connection = _Connection(location)
    try:
        with connection.session() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (0x67726964,))
            for table in STATE_TABLES:
                row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
                if row and row[0]:
                    raise PermanentError(
                        f"--to {location.describe()}: already holds controller state "
                        f"({row[0]} rows in {table}); refusing to overwrite it"
                    )
            for table in TABLE_ORDER:
                columns, rows = tables[table]
                if table == "meta":  # the target's own migrations set its schema version
                    rows = [r for r in rows if r[0] != "schema_version"]
                _copy(conn, table, columns, rows)
            conn.execute(
                "SELECT setval(pg_get_serial_sequence('receipts', 'seq'), "
                "greatest(1, (SELECT coalesce(max(seq), 0) FROM receipts)))"
            )
            conn.execute(
                "UPDATE authority_lease SET term = greatest(term, %s), controller_id = '', "
                "expires_at = least(expires_at, now()) WHERE id = 1",
                (term,),
            )
            counted = {
                t: int((conn.execute(f"SELECT count(*) FROM {t}").fetchone() or (0,))[0])
                for t in TABLE_ORDER
            }
    finally:
        connection.close()
    return Copied(database, location.describe(), counted, term)


def _copy(conn: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    names = ", ".join(columns)
    marks = ", ".join("%s" for _ in columns)
    sql = f"INSERT INTO {table} ({names}) VALUES ({marks})"
    if table == "meta":
        sql += " ON CONFLICT (key) DO UPDATE SET value = excluded.value"
    with conn.cursor() as cursor:
        cursor.executemany(sql, rows)
