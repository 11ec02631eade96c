"""The authority lease in PostgreSQL: clocked by the database server, terms only grow."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gridctl.controller.stores.postgres import PostgresLease, PostgresLocation

from .storefixtures import FakeClock


class Monotonic(FakeClock):
    """A monotonic clock the test moves by hand (starts at the real one)."""

    def __init__(self) -> None:
        super().__init__(time.monotonic())


def _lease(location: PostgresLocation, name: str, **kw: Any) -> PostgresLease:
    kw.setdefault("lease_seconds", 15.0)
    return PostgresLease(location, name, address=f"http://127.0.0.1:1/{name}", **kw)


def _admin(location: PostgresLocation, sql: str) -> None:
    admin = PostgresLocation(location.url.rsplit("/", 1)[0] + "/postgres", location.password_file)
    with admin.connect() as conn:
        conn.execute(sql)  # type: ignore[arg-type]


def _wait_for_grant(lease: PostgresLease, deadline: float = 20.0) -> Any:
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        grant = lease.acquire()
        if grant is not None:
            return grant
        time.sleep(0.05)
    raise AssertionError(f"{lease.controller_id} never acquired the lease")


def test_first_holder_renews_in_its_term_and_others_see_its_address(
    pg_location: PostgresLocation,
) -> None:
    a, b = _lease(pg_location, "ctl-a"), _lease(pg_location, "ctl-b")
    first = a.acquire()
    assert first is not None and first.term == 1
    assert b.acquire() is None and b.current() is None
    assert b.leader_address() == "http://127.0.0.1:1/ctl-a"
    renewed = a.acquire()
    assert renewed is not None and renewed.term == 1
    holder = b.holder()
    assert holder is not None and (holder.controller_id, holder.term) == ("ctl-a", 1)


def test_controller_clocks_do_not_move_the_lease(pg_location: PostgresLocation) -> None:
    a = _lease(pg_location, "ctl-a", clock=FakeClock(1_000.0))
    b = _lease(pg_location, "ctl-b", clock=FakeClock(9_000_000_000.0))  # years ahead
    assert a.acquire() is not None
    assert b.acquire() is None  # only the database's now() decides expiry


def test_takeover_after_expiry_increments_the_term(pg_location: PostgresLocation) -> None:
    a = _lease(pg_location, "ctl-a", lease_seconds=1.0)
    b = _lease(pg_location, "ctl-b", lease_seconds=1.0)
    first = a.acquire()
    assert first is not None
    taken = _wait_for_grant(b)
    assert taken.term == first.term + 1
    assert taken.previous is not None and taken.previous.controller_id == "ctl-a"
    assert a.acquire() is None and a.current() is None  # the old holder cannot renew


def test_the_holder_stops_when_its_own_monotonic_clock_says_the_lease_ran_out(
    pg_location: PostgresLocation,
) -> None:
    mono = Monotonic()
    a = _lease(pg_location, "ctl-a", monotonic=mono)
    assert a.acquire() is not None and a.current() is not None
    mono.advance(15.0)  # the database would still call it valid: the holder stops anyway
    assert a.current() is None
    assert a.leader_address() is None  # it no longer knows who leads, and it is not itself


def test_a_failed_renewal_ends_authority_at_once(pg_location: PostgresLocation) -> None:
    a = _lease(pg_location, "ctl-a")
    assert a.acquire() is not None
    database = pg_location.url.rsplit("/", 1)[1]
    _admin(pg_location, f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
    _admin(
        pg_location,
        f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'",
    )
    try:
        assert a.acquire() is None
        assert a.current() is None and a.last_error and "unreachable" in a.last_error
    finally:
        _admin(pg_location, f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")


def test_release_hands_over_at_once_and_terms_respect_the_floor(
    pg_location: PostgresLocation,
) -> None:
    a = _lease(pg_location, "ctl-a", term_floor=41)
    first = a.acquire()
    assert first is not None and first.term == 42
    a.release()
    assert a.current() is None
    b = _lease(pg_location, "ctl-b")
    taken = b.acquire()
    assert taken is not None and taken.term == 43


def test_a_url_with_a_password_is_refused() -> None:
    with pytest.raises(Exception, match="password"):
        PostgresLocation("postgresql://gridctl:secret@127.0.0.1/x")
    with pytest.raises(Exception, match="postgresql://"):
        PostgresLocation("mysql://127.0.0.1/x")


class _StoppedAfterLock:
    """A lease session whose holder stops (SIGSTOP, a frozen VM) right after taking the
    lease row's lock, inside its transaction, until ``resume`` is set."""

    def __init__(self, conn: Any, stopped: threading.Event, resume: threading.Event) -> None:
        self._conn, self._stopped, self._resume = conn, stopped, resume

    def execute(self, sql: Any, *args: Any, **kwargs: Any) -> Any:
        result = self._conn.execute(sql, *args, **kwargs)
        if "FOR UPDATE" in str(sql):
            self._stopped.set()
            self._resume.wait(60)
        return result

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def test_a_holder_stopped_inside_its_lease_transaction_does_not_block_failover(
    pg_location: PostgresLocation,
) -> None:
    a = _lease(pg_location, "ctl-a", lease_seconds=1.0)
    b = _lease(pg_location, "ctl-b", lease_seconds=1.0)
    first = a.acquire()
    assert first is not None
    stopped, resume = threading.Event(), threading.Event()
    real_session = a._connection.session

    @contextlib.contextmanager
    def stalling_session() -> Iterator[Any]:
        with real_session() as conn:
            yield _StoppedAfterLock(conn, stopped, resume)

    a._connection.session = stalling_session  # type: ignore[method-assign]
    renewal: list[Any] = []
    holder = threading.Thread(target=lambda: renewal.append(a.acquire()), daemon=True)
    holder.start()
    assert stopped.wait(20)  # a holds the row lock, stopped
    taken: list[Any] = []
    follower = threading.Thread(target=lambda: taken.append(_wait_for_grant(b)), daemon=True)
    follower.start()
    follower.join(30)
    resume.set()
    holder.join(30)
    assert taken and taken[0].term == first.term + 1  # the follower was not held by the lock
    assert renewal == [None] and a.current() is None  # the stopped holder's renewal failed


def test_a_controller_stopped_inside_a_store_write_does_not_hold_the_others_writes(
    pg_location: PostgresLocation,
) -> None:
    """A leader stopped mid-way through a store write (it holds the write lock) must not
    stall the follower that takes over: the follower's own writes (``note_term`` right
    after its takeover) and every store read queued behind them in its process."""
    from gridctl.controller.store import ControllerStore
    from gridctl.controller.stores.postgres import STALLED_WRITER_SECONDS, PostgresBackend
    from gridctl.errors import TransientError

    stalled = ControllerStore(None, backend=PostgresBackend(pg_location))
    follower = ControllerStore(None, backend=PostgresBackend(pg_location))
    stopped, resume = threading.Event(), threading.Event()
    outcome: list[str] = []

    def stalled_writer() -> None:
        try:
            with stalled._tx() as tx:
                tx.execute("UPDATE meta SET value = '99' WHERE key = 'sequence'")
                stopped.set()
                resume.wait(60)  # the server sees a session idle inside its transaction
            outcome.append("committed")
        except TransientError as exc:
            outcome.append(f"ended: {exc}")

    holder = threading.Thread(target=stalled_writer, daemon=True)
    holder.start()
    assert stopped.wait(20)
    started = time.monotonic()
    wrote = threading.Thread(target=lambda: follower.note_term(7), daemon=True)
    wrote.start()
    wrote.join(30)
    waited = time.monotonic() - started
    resume.set()
    holder.join(30)
    try:
        assert not wrote.is_alive(), "the follower's write waited on the stopped writer"
        assert follower.highest_term() == 7
        assert waited < STALLED_WRITER_SECONDS + 10
        assert outcome == [
            "ended: PostgreSQL ended a stalled write transaction: "
            "terminating connection due to idle-in-transaction timeout"
        ]
        assert follower._meta("sequence") != "99"  # the stopped writer's change was rolled back
    finally:
        stalled.close()
        follower.close()
