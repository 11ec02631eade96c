"""Opening the controller's SQLite database: schema, version, corruption quarantine.

A database that SQLite cannot read, that fails ``PRAGMA quick_check``, or whose
tables do not match is moved aside to ``<name>.invalid-<utc>-<id>`` (with its
``-wal`` and ``-shm`` companions) and a clean database is created in its place.
If it cannot be moved aside or a clean one cannot be written, the caller gets
no durable connection and must refuse automatic mode.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from gridctl.errors import PermanentError

SCHEMA_VERSION = 1
DATABASE_NAME = "controller.sqlite3"

DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS profiles (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    revision TEXT NOT NULL, body TEXT NOT NULL, stored_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS overrides (
    key TEXT PRIMARY KEY, value TEXT NOT NULL, set_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS actions (
    action_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL, host_id TEXT NOT NULL, model_id TEXT NOT NULL,
    artifact_sha256 TEXT, attempt INTEGER NOT NULL,
    state TEXT NOT NULL,            -- 'pending' or a terminal receipt status
    progress TEXT,                  -- last non-terminal acknowledgement
    acknowledged INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL, queued INTEGER NOT NULL, demand_class TEXT,
    session TEXT NOT NULL, plan_generation TEXT,
    created_at REAL NOT NULL, finished_at REAL, observed_at REAL,
    body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS actions_by_state ON actions (state, queued);
CREATE TABLE IF NOT EXISTS receipts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, action_id TEXT NOT NULL, status TEXT NOT NULL,
    outcome TEXT NOT NULL, message TEXT, duration_seconds REAL,
    artifact_fetched INTEGER NOT NULL, observed_at REAL, received_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS timings (
    host_id TEXT NOT NULL, model_id TEXT NOT NULL, artifact TEXT NOT NULL, kind TEXT NOT NULL,
    seconds REAL NOT NULL, samples INTEGER NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (host_id, model_id, artifact, kind));
CREATE TABLE IF NOT EXISTS watermarks (
    model_id TEXT PRIMARY KEY, last_used_at REAL, peak REAL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS evidence (
    model_id TEXT NOT NULL, workload TEXT NOT NULL, artifact TEXT NOT NULL,
    body TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (model_id, workload, artifact));
CREATE TABLE IF NOT EXISTS withdrawn (
    action_id TEXT PRIMARY KEY, kind TEXT NOT NULL, host_id TEXT NOT NULL,
    model_id TEXT NOT NULL, withdrawn_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS tombstones (
    model_id TEXT PRIMARY KEY, retired_at REAL NOT NULL, artifact_sha256 TEXT,
    min_residency_seconds REAL NOT NULL);
"""

# added after the first release: created when missing, so an older database opens as is
DEMAND_DDL = """
CREATE TABLE IF NOT EXISTS demand_state (
    kind TEXT NOT NULL, name TEXT NOT NULL, slot REAL NOT NULL,
    body TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (kind, name, slot));
"""
ADDED_TABLES = frozenset({"demand_state"})

TABLES = frozenset(
    {"meta", "profiles", "overrides", "actions", "receipts", "timings", "watermarks"}
    | {"evidence", "withdrawn", "tombstones"}
    | ADDED_TABLES
)
REQUIRED_TABLES = TABLES - ADDED_TABLES


@dataclass(frozen=True)
class Opened:
    connection: sqlite3.Connection
    durable: bool
    warnings: tuple[str, ...]
    quarantined_to: Path | None = None


def connect(target: str) -> sqlite3.Connection:
    conn = sqlite3.connect(target, isolation_level=None, check_same_thread=False, timeout=10.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _initialise(conn: sqlite3.Connection, now: float) -> None:
    conn.execute("BEGIN IMMEDIATE")
    for statement in (DDL + DEMAND_DDL).split(";"):
        if statement.strip():
            conn.execute(statement)
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None:
        rows = [
            ("schema_version", str(SCHEMA_VERSION)),
            ("epoch", secrets.token_hex(8)),
            ("sequence", "0"),
            ("queue", "0"),
            ("created_at", repr(now)),
            ("warnings", "[]"),
        ]
        conn.executemany("INSERT INTO meta (key, value) VALUES (?, ?)", rows)
    conn.execute("COMMIT")


def _verify(conn: sqlite3.Connection) -> None:
    """Raise ``sqlite3.DatabaseError`` unless this is a healthy gridctl database."""
    check = conn.execute("PRAGMA quick_check").fetchone()
    if check is None or check[0] != "ok":
        raise sqlite3.DatabaseError(f"quick_check: {check[0] if check else 'no answer'}")
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not names:
        return  # a brand-new file
    if REQUIRED_TABLES - names:
        raise sqlite3.DatabaseError(f"missing tables: {sorted(REQUIRED_TABLES - names)}")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    if row is None or not str(row[0]).isdigit():
        raise sqlite3.DatabaseError("no schema version")
    if int(row[0]) > SCHEMA_VERSION:
        raise PermanentError(
            f"controller state schema {row[0]} is newer than this gridctl ({SCHEMA_VERSION})"
        )


def quarantine_name(path: Path, now: float) -> Path:
    stamp = datetime.fromtimestamp(now, UTC).strftime("%Y%m%dT%H%M%SZ")
    return path.with_name(f"{path.name}.invalid-{stamp}-{secrets.token_hex(4)}")


def quarantine(path: Path, now: float) -> Path:
    """Move a corrupt database (and its WAL and shared-memory files) aside."""
    target = quarantine_name(path, now)
    os.replace(path, target)
    for suffix in ("-wal", "-shm"):
        companion = path.with_name(path.name + suffix)
        if companion.exists():
            os.replace(companion, target.with_name(target.name + suffix))
    return target


def _open_verified(path: Path, now: float) -> sqlite3.Connection:
    conn = connect(str(path))
    try:
        _verify(conn)
        _initialise(conn, now)
    except BaseException:
        conn.close()
        raise
    return conn


def open_database(state_dir: Path | None, now: float) -> Opened:
    """A verified connection, quarantining a corrupt file; in-memory when not durable."""
    if state_dir is None:
        return _volatile("no durable state path", now)
    path = state_dir / DATABASE_NAME
    try:
        state_dir.mkdir(parents=True, exist_ok=True)
        return Opened(_open_verified(path, now), True, ())
    except sqlite3.DatabaseError as exc:
        problem = str(exc)
    except OSError as exc:
        return _volatile(f"state path {state_dir} is not usable ({exc.strerror})", now)
    try:
        moved = quarantine(path, now)
        conn = _open_verified(path, now)
    except (OSError, sqlite3.Error) as exc:
        return _volatile(f"corrupt state {path} could not be quarantined ({exc})", now)
    warning = (
        f"controller state {path.name} was corrupt ({problem}); moved to {moved.name}; "
        "started clean in recommend mode"
    )
    return Opened(conn, True, (warning,), moved)


def _volatile(reason: str, now: float) -> Opened:
    conn = connect(":memory:")
    _initialise(conn, now)
    return Opened(conn, False, (f"{reason}: automatic mode is refused",))
