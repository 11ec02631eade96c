"""The authority lease, in process with a hand-moved clock."""

from __future__ import annotations

from pathlib import Path

import pytest

from gridctl.controller.authority import LEASE_DATABASE, AuthorityLease

from .storefixtures import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def _pair(tmp_path: Path, clock: FakeClock) -> tuple[AuthorityLease, AuthorityLease]:
    return (
        AuthorityLease(tmp_path, "ctl-a", lease_seconds=15, clock=clock),
        AuthorityLease(tmp_path, "ctl-b", lease_seconds=15, clock=clock),
    )


def test_first_holder_gets_term_one_and_renews_in_the_same_term(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = _pair(tmp_path, clock)
    grant = a.acquire()
    assert grant is not None and (grant.term, grant.expires_at) == (1, clock.now + 15)
    assert b.acquire() is None and b.current() is None
    clock.advance(10)
    renewed = a.acquire()
    assert renewed is not None and renewed.term == 1 and renewed.expires_at == clock.now + 15
    assert renewed.remaining(clock.now) == 15


def test_takeover_only_after_expiry_and_with_term_plus_one(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = _pair(tmp_path, clock)
    first = a.acquire()
    assert first is not None
    clock.now = first.expires_at - 0.001
    assert b.acquire() is None
    clock.now = first.expires_at
    assert a.current() is None  # the old holder stops at the same instant
    taken = b.acquire()
    assert taken is not None and taken.term == 2
    assert taken.previous is not None and taken.previous.term == 1
    assert taken.previous.controller_id == "ctl-a"
    assert a.acquire() is None  # the old holder cannot renew a lease it lost


def test_an_old_holder_coming_back_after_expiry_takes_a_new_term(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, _ = _pair(tmp_path, clock)
    a.acquire()
    clock.advance(16)
    again = a.acquire()
    assert again is not None and again.term == 2


def test_release_hands_over_at_once(tmp_path: Path, clock: FakeClock) -> None:
    a, b = _pair(tmp_path, clock)
    a.acquire()
    a.release()
    assert a.current() is None
    taken = b.acquire()
    assert taken is not None and taken.term == 2


def test_terms_survive_reopening_and_never_go_below_the_floor(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = _pair(tmp_path, clock)
    a.acquire()
    a.close()
    b.close()  # the last connection checkpoints the WAL into the file
    clock.advance(20)
    reopened = AuthorityLease(tmp_path, "ctl-c", lease_seconds=15, clock=clock)
    grant = reopened.acquire()
    assert grant is not None and grant.term == 2
    reopened.close()
    (tmp_path / LEASE_DATABASE).write_bytes(b"\x00garbage" * 512)
    clock.advance(20)
    rebuilt = AuthorityLease(tmp_path, "ctl-d", lease_seconds=15, clock=clock, term_floor=2)
    assert rebuilt.warnings and "corrupt" in rebuilt.warnings[0]
    fresh = rebuilt.acquire()
    assert fresh is not None and fresh.term == 3


def test_a_backwards_clock_never_shortens_the_holders_lease(
    tmp_path: Path, clock: FakeClock
) -> None:
    a, b = _pair(tmp_path, clock)
    a.acquire()
    clock.advance(-3600)
    assert b.acquire() is None
