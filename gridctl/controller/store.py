"""The controller's durable state, over a SQL backend (SQLite by default, or PostgreSQL).

Holds the last good profile revision, the operator's mode override, pending
and finished actions with their receipts, learned warm/transfer timings,
demand watermarks, outcome evidence, the demand learners' bucket series and
affinity sequences (rows of ``gridctl.demand.rows``), withdrawn destructive batches,
retirement tombstones, and the plan-generation epoch and sequence. Every write
is one transaction. Opening quarantines a corrupt SQLite database (see
``store_schema``); the clean store then starts in recommend mode and keeps a
warning. Without a durable path the store lives in memory and automatic mode
is refused; a shared backend that cannot be reached refuses it too, and reads
answer from the last values seen until it returns. Time comes from the
``clock`` callable, so tests control it. SQL is written once, with ``?``
placeholders and ``ON CONFLICT`` upserts that both backends understand.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gridctl.controller import store_rows
from gridctl.controller.hostclaims import ForeignClaims
from gridctl.controller.stores import Backend, Transaction
from gridctl.controller.stores.sqlite import SqliteBackend
from gridctl.domain import ControllerPolicy, Mode, Receipt, ReceiptStatus
from gridctl.errors import PermanentError, TransientError
from gridctl.reconcile import (
    AckDecision,
    Cancellation,
    ControllerMemory,
    HistoryEntry,
    PendingAction,
    PlanGeneration,
    Tombstone,
    WithdrawnDestructive,
    judge_acknowledgement,
)
from gridctl.tick.timings import LearnedTiming, TimingKind, learn, timing_key, valid_report

DEFAULT_HISTORY_LIMIT = 10_000
MODE_OVERRIDE = "mode"
READ_MEMORY = 512  # distinct reads a shared store remembers for an outage
UPSERT_OVERRIDE = (
    "INSERT INTO overrides (key, value, set_at) VALUES (?, ?, ?) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, set_at = excluded.set_at"
)


@dataclass(frozen=True)
class AckResult:
    """What one acknowledgement did: the decision, and the action it concerned."""

    decision: AckDecision
    entry: HistoryEntry | None  # the finished action, when it is now terminal
    learned: TimingKind | None = None


class ControllerStore:
    """Single-process access to the controller database; thread-safe."""

    def __init__(
        self,
        state_dir: str | Path | None,
        *,
        clock: Callable[[], float] = time.time,
        history_limit: int = DEFAULT_HISTORY_LIMIT,
        backend: Backend | None = None,
    ) -> None:
        self._clock = clock
        self._lock = threading.RLock()
        self._history_limit = history_limit
        self.foreign_claims = ForeignClaims()  # acknowledgements of another host's actions
        self._session = secrets.token_hex(8)
        if backend is None:
            backend = SqliteBackend(Path(state_dir) if state_dir is not None else None, clock())
        self._backend = backend
        self._remembered: dict[tuple[str, tuple[Any, ...]], list[tuple[Any, ...]]] = {}
        self.unreachable: str | None = None  # why the shared backend cannot be reached
        self.durable = backend.durable
        self.shared = backend.shared
        self.quarantined_to = backend.quarantined_to
        for warning in backend.warnings:
            self.add_warning(warning)
        if backend.quarantined_to is not None:
            self.set_mode_override(Mode.RECOMMEND, source="quarantine")

    # --- plumbing ------------------------------------------------------------------------

    @contextmanager
    def _tx(self) -> Iterator[Transaction]:
        """One write transaction; rolled back on any error."""
        with self._lock, self._reaching(), self._backend.transaction() as tx:
            yield tx

    @contextmanager
    def _reaching(self) -> Iterator[None]:
        """Track whether a shared backend answers (a TransientError means it did not)."""
        try:
            yield
        except TransientError as exc:
            if self.shared:
                self.unreachable = str(exc)
            raise
        if self.shared:
            self.unreachable = None

    def _read(self, sql: str, args: Sequence[object] = ()) -> list[tuple[Any, ...]]:
        key = (sql, tuple(args))
        with self._lock:
            try:
                with self._reaching():
                    rows = self._backend.read(sql, args)
            except TransientError:
                if key in self._remembered:  # status keeps answering through an outage
                    return self._remembered[key]
                raise
            if self.shared:
                if len(self._remembered) >= READ_MEMORY:
                    self._remembered.clear()
                self._remembered[key] = rows
            return rows

    def _meta(self, key: str, default: str | None = None) -> str | None:
        rows = self._read("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else default

    @staticmethod
    def _set_meta(conn: Transaction, key: str, value: str) -> None:
        conn.execute(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, value),
        )

    def close(self) -> None:
        with self._lock:
            self._backend.close()

    # --- warnings, mode and overrides ------------------------------------------------------

    @property
    def warnings(self) -> tuple[str, ...]:
        try:
            found = tuple(json.loads(self._meta("warnings", "[]") or "[]"))
        except TransientError:
            found = ()
        return found + ((self._unreachable_warning(),) if self.unreachable else ())

    def _unreachable_warning(self) -> str:
        return f"controller state store unreachable ({self.unreachable}): automatic mode refused"

    def add_warning(self, text: str) -> None:
        with self._tx() as conn:
            current = json.loads(self._meta("warnings", "[]") or "[]")
            if text not in current:
                current.append(text)
            self._set_meta(conn, "warnings", json.dumps(current))

    def clear_warnings(self) -> None:
        with self._tx() as conn:
            self._set_meta(conn, "warnings", "[]")

    def mode_override(self) -> Mode | None:
        rows = self._read("SELECT value FROM overrides WHERE key = ?", (MODE_OVERRIDE,))
        return Mode(json.loads(rows[0][0])["mode"]) if rows else None

    def set_mode_override(self, mode: Mode | None, *, source: str = "operator") -> None:
        """Persist the operator's mode (None clears it). Automatic needs a durable store."""
        if mode is Mode.AUTOMATIC and not self.durable:
            raise PermanentError("automatic mode refused: controller state is not durable")
        with self._tx() as conn:
            if mode is None:
                conn.execute("DELETE FROM overrides WHERE key = ?", (MODE_OVERRIDE,))
            else:
                conn.execute(
                    UPSERT_OVERRIDE,
                    (
                        MODE_OVERRIDE,
                        json.dumps({"mode": mode.value, "source": source}),
                        self._clock(),
                    ),
                )

    def effective_mode(self, policy_mode: Mode) -> tuple[Mode, str | None]:
        """The mode in force and, when automatic was asked for but refused, why."""
        try:
            wanted = self.mode_override() or policy_mode
        except TransientError:
            wanted = policy_mode
        if wanted is Mode.AUTOMATIC and self.unreachable:
            return Mode.RECOMMEND, self._unreachable_warning()
        if wanted is Mode.AUTOMATIC and not self.durable:
            return Mode.RECOMMEND, "automatic mode refused: controller state is not durable"
        return wanted, None

    def overrides(self) -> dict[str, Any]:
        return {k: json.loads(v) for k, v in self._read("SELECT key, value FROM overrides")}

    def set_override(self, key: str, value: Any) -> None:
        with self._tx() as conn:
            conn.execute(UPSERT_OVERRIDE, (key, json.dumps(value), self._clock()))

    # --- profiles and plan generations -------------------------------------------------------

    def save_profiles(self, revision: str, body: Mapping[str, Any] | Sequence[Any]) -> None:
        """Remember the last good desired-state revision (raw documents, JSON)."""
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO profiles (id, revision, body, stored_at) VALUES (1, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET revision = excluded.revision, "
                "body = excluded.body, stored_at = excluded.stored_at",
                (revision, json.dumps(body, sort_keys=True), self._clock()),
            )

    def last_good_profiles(self) -> tuple[str, Any] | None:
        rows = self._read("SELECT revision, body FROM profiles WHERE id = 1")
        return (str(rows[0][0]), json.loads(rows[0][1])) if rows else None

    @property
    def epoch(self) -> str:
        return self._meta("epoch") or ""

    def next_plan_generation(self, input_digest: str) -> PlanGeneration:
        """Advance the persistent sequence; the generation orders plans across clock jumps."""
        digest = input_digest.split(":")[-1].lower()
        if not digest or any(c not in "0123456789abcdef" for c in digest):
            digest = "0"
        with self._tx() as conn:
            sequence = int(self._meta("sequence", "0") or 0) + 1
            self._set_meta(conn, "sequence", str(sequence))
        return PlanGeneration(self.epoch, sequence, digest)

    def note_term(self, term: int) -> None:
        """Mirror the highest authority term, so a lost lease file cannot lower it."""
        with self._tx() as conn:
            if term > int(self._meta("highest_term", "0") or 0):
                self._set_meta(conn, "highest_term", str(term))

    def highest_term(self) -> int:
        return int(self._meta("highest_term", "0") or 0)

    # --- actions -------------------------------------------------------------------------

    def apply_tick(
        self,
        enqueue: Iterable[PendingAction],
        cancellations: Iterable[Cancellation],
        memory: ControllerMemory,
        *,
        plan_generation: PlanGeneration | None = None,
    ) -> tuple[PendingAction, ...]:
        """Persist one tick's decisions in one transaction; returns the queued entries."""
        now = self._clock()
        stored: list[PendingAction] = []
        with self._tx() as conn:
            queue = int(self._meta("queue", "0") or 0)
            for entry in enqueue:
                row = store_rows.pending_row(entry, queue + 1, self._session, plan_generation)
                if conn.execute(store_rows.INSERT_ACTION, row).rowcount == 0:
                    self._check_reenqueue(conn, entry.action_id)
                    continue  # already pending: enqueueing twice is harmless
                queue += 1
                stored.append(store_rows.with_queue(entry, queue))
            self._set_meta(conn, "queue", str(queue))
            for c in cancellations:
                conn.execute(
                    "UPDATE actions SET state = ?, acknowledged = 0, finished_at = ? "
                    "WHERE action_id = ? AND state = 'pending'",
                    (ReceiptStatus.CANCELLED.value, now, c.action_id),
                )
            store_rows.replace_memory(conn, memory)
            self._trim_history(conn)
        return tuple(stored)

    @staticmethod
    def _check_reenqueue(conn: Transaction, action_id: str) -> None:
        (state,) = conn.execute(
            "SELECT state FROM actions WHERE action_id = ?", (action_id,)
        ).fetchone()
        if state != "pending":
            raise PermanentError(f"action id {action_id} already finished ({state}); not reused")

    def latest_finish(self) -> float | None:
        """The latest finish or observation time recorded (the controller's clock)."""
        ((finished, observed),) = self._read(
            "SELECT MAX(finished_at), MAX(observed_at) FROM actions"
        )
        times = [float(t) for t in (finished, observed) if t is not None]
        return max(times) if times else None

    def rebase_future(self, now: float) -> int:
        """The wall clock stepped back: move every finish and observation time later than
        ``now`` to ``now``, in one transaction, so failure backoff, mutation cooldown and
        observation fencing run their configured length from the corrected time instead
        of waiting until the old future timestamps come round. Returns the rows moved."""
        with self._tx() as conn:
            (count,) = conn.execute(
                "SELECT COUNT(*) FROM actions WHERE finished_at > ? OR observed_at > ?",
                (now, now),
            ).fetchone()
            conn.execute("UPDATE actions SET finished_at = ? WHERE finished_at > ?", (now, now))
            conn.execute("UPDATE actions SET observed_at = ? WHERE observed_at > ?", (now, now))
        return int(count)

    def mark_delivered(self, action_ids: Iterable[str], at: float | None = None) -> None:
        """The durable delivery marker, written before the response reaches the node."""
        when = self._clock() if at is None else at
        with self._tx() as conn:
            conn.executemany(
                "UPDATE actions SET delivered_at = ? WHERE action_id = ? AND delivered_at IS NULL",
                [(when, a) for a in action_ids],
            )

    def clear_delivered(self, action_ids: Iterable[str]) -> None:
        """Compensate markers prepared by a poll whose response was suppressed."""
        with self._tx() as conn:
            conn.executemany(
                "UPDATE actions SET delivered_at = NULL WHERE action_id = ? AND state = 'pending'",
                [(a,) for a in action_ids],
            )

    def pending(self) -> tuple[PendingAction, ...]:
        rows = self._read(store_rows.SELECT_ACTION + " WHERE state = 'pending' ORDER BY queued")
        return tuple(store_rows.pending_from_row(r, self._session) for r in rows)

    def history(self, limit: int | None = None) -> tuple[HistoryEntry, ...]:
        sql = store_rows.SELECT_ACTION + " WHERE state != 'pending' ORDER BY finished_at, queued"
        rows = self._read(sql)
        entries = tuple(store_rows.history_from_row(r) for r in rows)
        return entries[-limit:] if limit else entries

    def memory(self) -> ControllerMemory:
        withdrawn = tuple(
            WithdrawnDestructive(a, store_rows.kind(k), h, m, t)
            for a, k, h, m, t in self._read(
                "SELECT action_id, kind, host_id, model_id, withdrawn_at FROM withdrawn "
                "ORDER BY action_id"
            )
        )
        tombstones = tuple(
            Tombstone(m, t, s, r)
            for m, t, s, r in self._read(
                "SELECT model_id, retired_at, artifact_sha256, min_residency_seconds "
                "FROM tombstones ORDER BY model_id"
            )
        )
        return ControllerMemory(withdrawn=withdrawn, tombstones=tombstones)

    def record_acknowledgement(
        self, receipt: Receipt, policy: ControllerPolicy | None = None, *, host_id: str | None
    ) -> AckResult | None:
        """Apply one acknowledgement sent by ``host_id``; None for an unknown action or
        another host's (nothing is written; the foreign one is counted and logged).
        ``host_id`` None is an in-process caller that speaks for every host."""
        policy = policy or ControllerPolicy()
        now = self._clock()
        with self._tx() as conn:
            row = conn.execute(
                store_rows.SELECT_ACTION + " WHERE action_id = ?", (receipt.action_id,)
            ).fetchone()
            if row is None:
                return None
            record = store_rows.record_from_row(row)
            if host_id is not None and record.host_id != host_id:
                self.foreign_claims.refuse(
                    host_id, record.host_id, "acknowledgement", receipt.action_id
                )
                return None
            decision = judge_acknowledgement(
                record.status, receipt.status, acknowledged=record.acknowledged
            )
            conn.execute(
                "INSERT INTO receipts (action_id, status, outcome, message, duration_seconds, "
                "artifact_fetched, observed_at, received_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    receipt.action_id,
                    receipt.status.value,
                    decision.outcome.value,
                    receipt.message[:4096],
                    receipt.duration_seconds
                    if valid_report(receipt.duration_seconds, policy)
                    else None,
                    int(receipt.artifact_fetched),
                    receipt.observed_at,
                    now,
                ),
            )
            learned: TimingKind | None = None
            if decision.changed:
                store_rows.update_status(conn, receipt, decision, now)
                if decision.status is ReceiptStatus.SUCCEEDED:
                    learned = self._learn(conn, record, receipt, policy, now)
            self._trim_history(conn)
            after = conn.execute(
                store_rows.SELECT_ACTION + " WHERE action_id = ?", (receipt.action_id,)
            ).fetchone()
        entry = store_rows.history_from_row(after) if after[store_rows.STATE] != "pending" else None
        return AckResult(decision, entry, learned)

    def _trim_history(self, conn: Transaction) -> None:
        """Bound finished actions, keeping the newest of every key (ids never repeat)
        and every action a withdrawn batch still names."""
        (count,) = conn.execute("SELECT count(*) FROM actions WHERE state != 'pending'").fetchone()
        if count <= self._history_limit:
            return
        conn.execute(store_rows.TRIM_HISTORY, (count - self._history_limit,))
        conn.execute("DELETE FROM receipts WHERE action_id NOT IN (SELECT action_id FROM actions)")

    # --- learned timings ----------------------------------------------------------------------

    def _learn(
        self,
        conn: Transaction,
        record: store_rows.ActionRecord,
        receipt: Receipt,
        policy: ControllerPolicy,
        now: float,
    ) -> TimingKind | None:
        key = timing_key(
            record.kind,
            record.host_id,
            record.model_id,
            record.artifact_sha256,
            receipt.artifact_fetched,
        )
        if key is None or not valid_report(receipt.duration_seconds, policy):
            return None
        assert receipt.duration_seconds is not None
        previous = store_rows.read_timing(conn, key)
        updated = learn(previous, float(receipt.duration_seconds), now, policy)
        conn.execute(
            "INSERT INTO timings (host_id, model_id, artifact, kind, seconds, samples, "
            "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (host_id, model_id, artifact, kind) DO UPDATE SET "
            "seconds = excluded.seconds, samples = excluded.samples, "
            "updated_at = excluded.updated_at",
            (*key, updated.seconds, updated.samples, updated.updated_at),
        )
        return TimingKind(key[3])

    def timing(
        self, host_id: str, model_id: str, artifact_sha256: str | None, kind: TimingKind
    ) -> LearnedTiming | None:
        rows = self._read(
            store_rows.SELECT_TIMING, (host_id, model_id, artifact_sha256 or "", kind.value)
        )
        return store_rows.timing_from_row(rows[0]) if rows else None

    def timings(self) -> dict[tuple[str, str, str, str], LearnedTiming]:
        rows = self._read(
            "SELECT host_id, model_id, artifact, kind, seconds, samples, updated_at FROM timings"
        )
        return {(h, m, a, k): LearnedTiming(s, n, u) for h, m, a, k, s, n, u in rows}

    # --- demand watermarks and outcome evidence -------------------------------------------------

    def set_watermark(self, model_id: str, last_used_at: float | None, peak: float = 0.0) -> None:
        most = self._backend.greatest
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO watermarks (model_id, last_used_at, peak, updated_at) "
                "VALUES (?, ?, ?, ?) "
                "ON CONFLICT (model_id) DO UPDATE SET "
                f"last_used_at = {most}("
                "coalesce(watermarks.last_used_at, excluded.last_used_at), "
                "coalesce(excluded.last_used_at, watermarks.last_used_at)), "
                f"peak = {most}(watermarks.peak, excluded.peak), "
                "updated_at = excluded.updated_at",
                (model_id, last_used_at, peak, self._clock()),
            )

    def watermarks(self) -> dict[str, tuple[float | None, float]]:
        rows = self._read("SELECT model_id, last_used_at, peak FROM watermarks ORDER BY model_id")
        return {m: (u, p) for m, u, p in rows}

    def put_evidence(
        self, model_id: str, workload: str, artifact_sha256: str | None, body: Mapping[str, Any]
    ) -> None:
        with self._tx() as conn:
            conn.execute(
                "INSERT INTO evidence (model_id, workload, artifact, body, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (model_id, workload, artifact) "
                "DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
                (
                    model_id,
                    workload,
                    artifact_sha256 or "",
                    json.dumps(body, sort_keys=True),
                    self._clock(),
                ),
            )

    def evidence(self) -> dict[tuple[str, str, str], Any]:
        rows = self._read("SELECT model_id, workload, artifact, body FROM evidence")
        return {(m, w, a): json.loads(b) for m, w, a, b in rows}

    def clear_demand(self, model_id: str) -> None:
        """A retired model's demand history goes with it."""
        with self._tx() as conn:
            conn.execute("DELETE FROM watermarks WHERE model_id = ?", (model_id,))
            conn.execute("DELETE FROM evidence WHERE model_id = ?", (model_id,))
            conn.execute("DELETE FROM demand_state WHERE kind = 'direct' AND name = ?", (model_id,))

    # --- demand learner state -------------------------------------------------------------

    def demand_rows(self) -> list[tuple[Any, Any, Any, Any]]:
        """Every persisted (kind, name, slot, body) row, unvalidated (the learner checks)."""
        return self._read(
            "SELECT kind, name, slot, body FROM demand_state ORDER BY kind, name, slot"
        )

    def write_demand(
        self,
        upserts: Mapping[tuple[str, str, float], str],
        deletes: Iterable[tuple[str, str, float]],
    ) -> None:
        """Write changed rows and remove dropped ones, in one transaction."""
        now = self._clock()
        with self._tx() as conn:
            conn.executemany(
                "DELETE FROM demand_state WHERE kind = ? AND name = ? AND slot = ?",
                [tuple(key) for key in deletes],
            )
            conn.executemany(
                "INSERT INTO demand_state (kind, name, slot, body, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (kind, name, slot) "
                "DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
                [(*key, body, now) for key, body in upserts.items()],
            )
