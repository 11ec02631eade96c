"""A sparse workload's rhythm outlives the demand window.

A video job every forty minutes has nothing in a thirty-minute window most of the day.
The learner remembers the buckets of each workload's last four unbound arrivals; while
the last is no older than half again the longest gap between them (and that gap is
within ``sparse_recurrence_max_gap_seconds``), the picture keeps a row for the workload,
with no requests, saying its next arrival is still expected.
"""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.demand import DemandLearner, features_of
from gridctl.domain import ControllerPolicy, WorkloadCatalog

POLICY = ControllerPolicy()
T0 = 1_800_000_000.0
MINUTE = 60.0


def learner(policy: ControllerPolicy = POLICY) -> DemandLearner:
    book = DemandLearner(policy, WorkloadCatalog())
    book.configure({"video-gen": None})
    return book


def job(book: DemandLearner, minute: float, outcome: str = "ok") -> None:
    book.observe(
        features_of(
            t=T0 + minute * MINUTE,
            endpoint="video",
            model="auto",
            served_model="video-gen" if outcome == "ok" else None,
            workload="video",
            service_seconds=120.0,
            outcome=outcome,
        )
    )


def video_row(book: DemandLearner, minute: float):  # type: ignore[no-untyped-def]
    return book.picture(T0 + minute * MINUTE).workload("video")


def test_a_workload_seen_twice_is_expected_again_until_half_again_its_gap_passes() -> None:
    book = learner()
    job(book, 0, outcome="rejected")  # refused: an arrival all the same
    job(book, 34)
    inside = video_row(book, 34 + 50)  # 50 min after the last, gap 34: 1.5 x 34 = 51
    assert inside is not None and inside.requests == 0
    assert inside.recurrence_gap_seconds == 34 * MINUTE
    assert inside.last_arrival_age_seconds == 50 * MINUTE
    assert inside.recurs(POLICY)
    assert video_row(book, 34 + 52) is None  # overdue: nothing is expected any more


def test_one_arrival_is_no_rhythm() -> None:
    book = learner()
    job(book, 0)
    assert video_row(book, 31) is None  # out of the 30-minute window, and no second one


def test_a_gap_longer_than_the_policys_bound_is_no_rhythm() -> None:
    book = learner(replace(POLICY, sparse_recurrence_max_gap_seconds=30 * MINUTE))
    job(book, 0)
    job(book, 34)
    assert video_row(book, 34 + 31) is None
    off = learner(replace(POLICY, sparse_recurrence_max_gap_seconds=0.0))
    job(off, 0)
    job(off, 34)
    assert video_row(off, 34 + 31) is None


def test_a_row_in_the_window_carries_its_rhythm_too() -> None:
    book = learner()
    job(book, 0)
    job(book, 10)
    row = video_row(book, 12)
    assert row is not None and row.requests == 2
    assert row.recurrence_gap_seconds == 10 * MINUTE


@settings(max_examples=150, deadline=None)
@given(
    minutes=st.lists(st.integers(0, 600), min_size=1, max_size=20),
    later=st.integers(0, 200),
)
def test_the_rhythm_is_the_longest_gap_of_the_last_four_arrivals(
    minutes: list[int], later: int
) -> None:
    """Whatever order the arrivals are reported in, the learner remembers the newest four
    distinct arrival minutes (a batch the same as one by one), and the row's rhythm is
    theirs."""
    book, batch = learner(), learner()
    for minute in minutes:
        job(book, minute)
    batch.observe_all(
        [
            features_of(
                t=T0 + m * MINUTE,
                endpoint="video",
                model="auto",
                served_model="video-gen",
                workload="video",
                service_seconds=120.0,
            )
            for m in minutes
        ]
    )
    assert book.arrivals == batch.arrivals
    last = sorted(set(minutes))[-4:]  # the newest four distinct minutes, in order
    assert book.arrivals["video"] == tuple(T0 + m * MINUTE for m in last)
    now = last[-1] + later
    row = video_row(book, now)
    gap = max((b - a for a, b in pairwise(last)), default=0) * MINUTE
    expected = 0.0 < gap <= POLICY.sparse_recurrence_max_gap_seconds and (
        later * MINUTE <= 1.5 * gap
    )
    if expected:
        assert row is not None and row.recurs(POLICY)
    if row is not None:  # in the window, or expected
        assert row.recurrence_gap_seconds == gap
        assert row.last_arrival_age_seconds == later * MINUTE
        assert row.recurs(POLICY) == expected
        assert row.requests > 0 or expected
