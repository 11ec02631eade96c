"""Durable node state on SQLite: residencies and their child proofs, receipts, overrides.

Why SQLite: the node must survive SIGKILL at any instant with a consistent view of
which children it owns, and local CLI commands (``gridctl node drain``) write the
same state while the daemon runs. WAL mode plus one transaction per write gives
both. A database that cannot be opened or fails its integrity check is moved
aside as ``<name>.invalid-<utc>-<id>`` and a clean one starts, with a warning the
daemon reports in ``node status``.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from gridctl.domain.states import ResidencyState
from gridctl.errors import PermanentError
from gridctl.node.records import (
    CachedArtifact,
    FenceMemory,
    Override,
    ProcessIdentity,
    Receipt,
    ResidencyRecord,
)

SCHEMA_VERSION = 1
RECEIPTS_KEPT = 1000

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS residencies (
    model_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    memory_mb INTEGER NOT NULL DEFAULT 0,
    artifact_sha256 TEXT,
    runtime TEXT NOT NULL DEFAULT 'llama.cpp',
    model_path TEXT,
    port INTEGER,
    pid INTEGER,
    create_time REAL,
    executable TEXT,
    cmdline TEXT,
    fenced INTEGER NOT NULL DEFAULT 0,
    loaded_at REAL,
    last_used_at REAL,
    active_requests INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    updated_at REAL NOT NULL,
    split_term INTEGER
);
CREATE TABLE IF NOT EXISTS cached_artifacts (
    model_id TEXT PRIMARY KEY,
    sha256 TEXT NOT NULL,
    path TEXT NOT NULL,
    size_bytes INTEGER NOT NULL,
    cached_at REAL NOT NULL,
    provenance TEXT NOT NULL DEFAULT 'demand',
    last_used_at REAL,
    gguf TEXT
);
CREATE TABLE IF NOT EXISTS receipts (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    action_id TEXT NOT NULL UNIQUE,
    kind TEXT NOT NULL,
    model_id TEXT NOT NULL,
    status TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    duration_seconds REAL,
    artifact_fetched INTEGER NOT NULL DEFAULT 0,
    command TEXT NOT NULL DEFAULT '{}',
    received_at REAL NOT NULL,
    finished_at REAL,
    acked INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS override (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    kind TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    set_at REAL NOT NULL,
    expires_at REAL
);
CREATE TABLE IF NOT EXISTS last_used_watermarks (
    model_id TEXT PRIMARY KEY,
    last_used_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS split_claims (
    model_id TEXT NOT NULL,
    package_ref TEXT NOT NULL,
    manifest_sha256 TEXT NOT NULL,
    claim TEXT NOT NULL,
    serving INTEGER NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (model_id, package_ref, manifest_sha256)
);
"""

_RESIDENCY_COLUMNS = (
    "model_id, state, memory_mb, artifact_sha256, runtime, model_path, port, pid, "
    "create_time, executable, cmdline, fenced, loaded_at, last_used_at, active_requests, message, "
    "split_term"
)
_RECEIPT_COLUMNS = (
    "action_id, kind, model_id, status, message, reason, duration_seconds, artifact_fetched, "
    "command, received_at, finished_at, acked"
)


# Columns added after a table first shipped: (table, column, declaration).
_ADDED_COLUMNS = (
    ("cached_artifacts", "provenance", "TEXT NOT NULL DEFAULT 'demand'"),
    ("cached_artifacts", "last_used_at", "REAL"),
    ("cached_artifacts", "gguf", "TEXT"),
    ("residencies", "split_term", "INTEGER"),  # a split coordinator engine's term
)


def _json_object(text: object) -> dict[str, object] | None:
    if not isinstance(text, str):
        return None
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _add_missing_columns(conn: sqlite3.Connection) -> None:
    for table, column, declaration in _ADDED_COLUMNS:
        present = {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}
        if column not in present:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")


# how long opening waits for another process holding the database (a busy handler
# covers most waits; this covers the lock upgrades SQLite refuses at once)
OPEN_BUSY_SECONDS = 30.0


def _busy(exc: sqlite3.DatabaseError) -> bool:
    """Whether SQLite refused because another connection holds the file (not corruption)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def quarantine_name(path: Path, now: float) -> Path:
    """``<name>.invalid-<utc>-<id>``: a unique, sortable name for a corrupt file."""
    stamp = datetime.fromtimestamp(now, tz=UTC).strftime("%Y%m%dT%H%M%SZ")
    return path.with_name(f"{path.name}.invalid-{stamp}-{secrets.token_hex(4)}")


class NodeStateStore:
    """The node's SQLite database. Thread-safe; every write is one transaction."""

    def __init__(self, path: Path, *, now: float | None = None) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.warnings: list[str] = []
        self._lock = threading.RLock()
        try:
            self._conn = self._open_when_free()
        except sqlite3.DatabaseError as exc:
            if _busy(exc):
                raise  # another process held it past the deadline: in use, not corrupt
            moved = self._quarantine(time.time() if now is None else now)
            self.warnings.append(
                f"node state database was unreadable ({exc}); moved to {moved.name}, started clean"
            )
            self._conn = self._open()

    # --- opening and quarantine -------------------------------------------------------

    def _open_when_free(self) -> sqlite3.Connection:
        """``_open``, again while another process holds the file: the daemon and a CLI
        command (``node start`` polling for registration, ``node status``) may open a
        new database at the same instant, and SQLite answers one of them "database is
        locked" at once (a lock upgrade it refuses rather than wait for). That is the
        file in use, never a reason to move it aside: the daemon would go on writing to
        the moved file while everyone else read an empty one."""
        deadline = time.monotonic() + OPEN_BUSY_SECONDS
        while True:
            try:
                return self._open()
            except sqlite3.DatabaseError as exc:
                if not _busy(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(0.02)

    def _open(self) -> sqlite3.Connection:
        fresh = not self.path.exists()
        conn = sqlite3.connect(
            self.path, timeout=10.0, isolation_level=None, check_same_thread=False
        )
        try:
            if fresh:
                self.path.chmod(0o600)
            conn.execute("PRAGMA busy_timeout = 10000")
            check = conn.execute("PRAGMA quick_check").fetchone()
            if not check or check[0] != "ok":
                raise sqlite3.DatabaseError(f"integrity check failed: {check and check[0]}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            conn.executescript(_SCHEMA)
            _add_missing_columns(conn)
            # (OR IGNORE: a process opening the new file at the same time may have written it)
            conn.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES ('schema_version', ?)",
                (str(SCHEMA_VERSION),),
            )
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            if row is None or row[0] != str(SCHEMA_VERSION):
                raise sqlite3.DatabaseError(f"unknown node state schema version {row and row[0]}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _quarantine(self, now: float) -> Path:
        target = quarantine_name(self.path, now)
        try:
            self.path.rename(target)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    side.rename(target.with_name(target.name + suffix))
        except OSError as exc:
            detail = f"cannot quarantine corrupt node state {self.path}: {exc}"
            raise PermanentError(detail) from exc
        return target

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def _read(self, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
        with self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    # --- meta -------------------------------------------------------------------------

    def get_meta(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO meta(key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def bind_host(self, host_id: str) -> None:
        """Tie this state directory to one stable host id, refusing another one."""
        with self._write() as conn:
            row = conn.execute("SELECT value FROM meta WHERE key = 'host_id'").fetchone()
            if row is None:
                conn.execute("INSERT INTO meta(key, value) VALUES ('host_id', ?)", (host_id,))
            elif row[0] != host_id:
                raise PermanentError(
                    f"state directory {self.path.parent} belongs to host {row[0]}, not {host_id}"
                )

    def fence_memory(self) -> FenceMemory:
        raw = self.get_meta("fence")
        if raw is None:
            return FenceMemory()
        data = json.loads(raw)
        return FenceMemory(
            highest_term=int(data.get("highest_term", 0)),
            controller_id=data.get("controller_id"),
            fenced_seen=bool(data.get("fenced_seen", False)),
            latest_plan_generation=data.get("latest_plan_generation"),
        )

    def save_fence_memory(self, fence: FenceMemory) -> None:
        self.set_meta(
            "fence",
            json.dumps(
                {
                    "highest_term": fence.highest_term,
                    "controller_id": fence.controller_id,
                    "fenced_seen": fence.fenced_seen,
                    "latest_plan_generation": fence.latest_plan_generation,
                },
                sort_keys=True,
            ),
        )

    # --- residencies ------------------------------------------------------------------

    @staticmethod
    def _residency(row: tuple[object, ...]) -> ResidencyRecord:
        (model_id, state, memory_mb, sha, runtime, model_path, port, pid, create_time, exe,
         cmdline, fenced, loaded_at, last_used_at, active, message, split_term) = row  # fmt: skip
        identity = None
        if pid is not None and create_time is not None and exe is not None and cmdline:
            identity = ProcessIdentity(
                pid=int(pid),  # type: ignore[call-overload]
                create_time=float(create_time),  # type: ignore[arg-type]
                executable=str(exe),
                cmdline=tuple(json.loads(str(cmdline))),
            )
        return ResidencyRecord(
            model_id=str(model_id),
            state=ResidencyState(str(state)),
            memory_mb=int(memory_mb),  # type: ignore[call-overload]
            artifact_sha256=None if sha is None else str(sha),
            runtime=str(runtime),
            model_path=None if model_path is None else str(model_path),
            port=None if port is None else int(port),  # type: ignore[call-overload]
            pid=None if pid is None else int(pid),  # type: ignore[call-overload]
            identity=identity,
            fenced=bool(fenced),
            loaded_at=None if loaded_at is None else float(loaded_at),  # type: ignore[arg-type]
            last_used_at=None if last_used_at is None else float(last_used_at),  # type: ignore[arg-type]
            active_requests=int(active),  # type: ignore[call-overload]
            message=str(message),
            split_term=None if split_term is None else int(split_term),  # type: ignore[call-overload]
        )

    def residencies(self) -> list[ResidencyRecord]:
        rows = self._read(f"SELECT {_RESIDENCY_COLUMNS} FROM residencies ORDER BY model_id")
        return [self._residency(r) for r in rows]

    def residency(self, model_id: str) -> ResidencyRecord | None:
        rows = self._read(
            f"SELECT {_RESIDENCY_COLUMNS} FROM residencies WHERE model_id = ?", (model_id,)
        )
        return self._residency(rows[0]) if rows else None

    def put_residency(self, record: ResidencyRecord) -> None:
        ident = record.identity
        with self._write() as conn:
            conn.execute(
                f"INSERT OR REPLACE INTO residencies ({_RESIDENCY_COLUMNS}, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    record.model_id,
                    record.state.value,
                    record.memory_mb,
                    record.artifact_sha256,
                    record.runtime,
                    record.model_path,
                    record.port,
                    record.pid,
                    ident.create_time if ident else None,
                    ident.executable if ident else None,
                    json.dumps(list(ident.cmdline)) if ident else None,
                    int(record.fenced),
                    record.loaded_at,
                    record.last_used_at,
                    record.active_requests,
                    record.message,
                    record.split_term,
                    time.time(),
                ),
            )

    def delete_residency(self, model_id: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM residencies WHERE model_id = ?", (model_id,))

    # --- artifact cache index ---------------------------------------------------------

    def cached_artifacts(self) -> list[CachedArtifact]:
        rows = self._read(
            "SELECT model_id, sha256, path, size_bytes, cached_at, provenance, last_used_at, "
            "gguf FROM cached_artifacts ORDER BY model_id"
        )
        return [
            CachedArtifact(
                str(m),
                str(s),
                str(p),
                int(b),  # type: ignore[call-overload]
                float(c),  # type: ignore[arg-type]
                provenance=str(v),
                last_used_at=None if u is None else float(u),  # type: ignore[arg-type]
                gguf=_json_object(g),
            )
            for m, s, p, b, c, v, u, g in rows
        ]

    def cached_artifact(self, model_id: str) -> CachedArtifact | None:
        return next((c for c in self.cached_artifacts() if c.model_id == model_id), None)

    def put_cached_artifact(self, entry: CachedArtifact) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO cached_artifacts "
                "(model_id, sha256, path, size_bytes, cached_at, provenance, last_used_at, gguf) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    entry.model_id,
                    entry.sha256,
                    entry.path,
                    entry.size_bytes,
                    entry.cached_at,
                    entry.provenance,
                    entry.last_used_at,
                    None if entry.gguf is None else json.dumps(entry.gguf, sort_keys=True),
                ),
            )

    def delete_cached_artifact(self, model_id: str) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM cached_artifacts WHERE model_id = ?", (model_id,))

    # --- receipts ---------------------------------------------------------------------

    @staticmethod
    def _receipt(row: tuple[object, ...]) -> Receipt:
        (action_id, kind, model_id, status, message, reason, duration, fetched, command,
         received_at, finished_at, acked) = row  # fmt: skip
        return Receipt(
            action_id=str(action_id),
            kind=str(kind),
            model_id=str(model_id),
            status=str(status),
            message=str(message),
            reason=str(reason),
            duration_seconds=None if duration is None else float(duration),  # type: ignore[arg-type]
            artifact_fetched=bool(fetched),
            command=json.loads(str(command)),
            received_at=float(received_at),  # type: ignore[arg-type]
            finished_at=None if finished_at is None else float(finished_at),  # type: ignore[arg-type]
            acked=bool(acked),
        )

    def receipt(self, action_id: str) -> Receipt | None:
        rows = self._read(
            f"SELECT {_RECEIPT_COLUMNS} FROM receipts WHERE action_id = ?", (action_id,)
        )
        return self._receipt(rows[0]) if rows else None

    def receipts(self, *, unacked_only: bool = False, limit: int = 1024) -> list[Receipt]:
        where = "WHERE acked = 0" if unacked_only else ""
        rows = self._read(
            f"SELECT {_RECEIPT_COLUMNS} FROM receipts {where} ORDER BY seq DESC LIMIT ?",
            (limit,),
        )
        return [self._receipt(r) for r in reversed(rows)]

    def put_receipt(self, receipt: Receipt) -> None:
        """Insert or update a receipt; any new status must be acknowledged again."""
        with self._write() as conn:
            conn.execute(
                f"INSERT INTO receipts ({_RECEIPT_COLUMNS}) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(action_id) DO UPDATE SET status = excluded.status, "
                "message = excluded.message, reason = excluded.reason, "
                "duration_seconds = excluded.duration_seconds, "
                "artifact_fetched = excluded.artifact_fetched, "
                "finished_at = excluded.finished_at, acked = excluded.acked",
                (
                    receipt.action_id,
                    receipt.kind,
                    receipt.model_id,
                    receipt.status,
                    receipt.message,
                    receipt.reason,
                    receipt.duration_seconds,
                    int(receipt.artifact_fetched),
                    json.dumps(receipt.command, sort_keys=True),
                    receipt.received_at,
                    receipt.finished_at,
                    int(receipt.acked),
                ),
            )
            conn.execute(
                "DELETE FROM receipts WHERE acked = 1 AND seq <= "
                "(SELECT MAX(seq) FROM receipts) - ?",
                (RECEIPTS_KEPT,),
            )

    def mark_acked(self, action_ids: list[str], statuses: dict[str, str]) -> None:
        """Mark receipts acknowledged, but only if their status is still the one sent."""
        with self._write() as conn:
            for action_id in action_ids:
                conn.execute(
                    "UPDATE receipts SET acked = 1 WHERE action_id = ? AND status = ?",
                    (action_id, statuses[action_id]),
                )

    def mark_unacked(self, action_id: str) -> None:
        """Send a receipt again (the controller redelivered its command)."""
        with self._write() as conn:
            conn.execute("UPDATE receipts SET acked = 0 WHERE action_id = ?", (action_id,))

    # --- local override ---------------------------------------------------------------

    def override(self) -> Override | None:
        rows = self._read("SELECT kind, reason, set_at, expires_at FROM override WHERE id = 1")
        if not rows:
            return None
        kind, reason, set_at, expires_at = rows[0]
        return Override(
            kind=str(kind),
            reason=str(reason),
            set_at=float(set_at),  # type: ignore[arg-type]
            expires_at=None if expires_at is None else float(expires_at),  # type: ignore[arg-type]
        )

    def set_override(self, override: Override | None) -> None:
        with self._write() as conn:
            conn.execute("DELETE FROM override")
            if override is not None:
                conn.execute(
                    "INSERT INTO override (id, kind, reason, set_at, expires_at) "
                    "VALUES (1, ?, ?, ?, ?)",
                    (override.kind, override.reason, override.set_at, override.expires_at),
                )

    # --- server last-used watermarks --------------------------------------------------

    def raise_last_used_watermarks(self, marks: dict[str, float]) -> None:
        """Persist the controller's per-model last-used watermark; it only moves forward."""
        with self._write() as conn:
            for model_id, value in sorted(marks.items()):
                conn.execute(
                    "INSERT INTO last_used_watermarks VALUES (?, ?) ON CONFLICT(model_id) "
                    "DO UPDATE SET last_used_at = MAX(last_used_at, excluded.last_used_at)",
                    (model_id, float(value)),
                )

    def last_used_watermarks(self) -> dict[str, float]:
        rows = self._read("SELECT model_id, last_used_at FROM last_used_watermarks")
        return {str(m): float(v) for m, v in rows}  # type: ignore[arg-type]

    # --- accepted split claims (gridctl.node.stageclaims) -------------------------------

    def split_claims(self) -> list[tuple[dict[str, object], bool]]:
        """Every accepted split claim as stored (its JSON object) and whether it serves."""
        rows = self._read(
            "SELECT claim, serving FROM split_claims "
            "ORDER BY model_id, package_ref, manifest_sha256"
        )
        found: list[tuple[dict[str, object], bool]] = []
        for text, serving in rows:
            data = _json_object(text)
            if data is not None:
                found.append((data, bool(serving)))
        return found

    def put_split_claim(
        self, key: tuple[str, str, str], claim: dict[str, object], serving: bool
    ) -> None:
        """Store the claim accepted for one model artifact, replacing the one before."""
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO split_claims (model_id, package_ref, manifest_sha256, "
                "claim, serving, updated_at) VALUES (?, ?, ?, ?, ?, ?)",
                (*key, json.dumps(claim, sort_keys=True), int(serving), time.time()),
            )
