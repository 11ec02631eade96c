"""Outcome evidence: 20 requests / 8 evaluations, independent 7-day half-lives, the bonus."""

from __future__ import annotations

import json

import pytest

from gridctl.demand import OutcomeBook
from gridctl.domain import ControllerPolicy

POLICY = ControllerPolicy()
T0 = 1_800_000_000.0
WEEK = 604_800.0
SHA = "a" * 64


def served(book: OutcomeBook, n: int, at: float = T0, ok: bool = True) -> None:
    for _ in range(n):
        book.record_request("coder", "coding", SHA, ok, 2.0, at)


def test_confidence_is_full_at_20_requests_not_19() -> None:
    nineteen, twenty = OutcomeBook(POLICY), OutcomeBook(POLICY)
    served(nineteen, 19)
    served(twenty, 20)
    assert nineteen.score("coder", "coding", SHA, T0).confidence == pytest.approx(0.95)
    assert twenty.score("coder", "coding", SHA, T0).confidence == 1.0


def test_quality_confidence_is_full_at_8_evaluations_not_7() -> None:
    book = OutcomeBook(POLICY)
    for _ in range(7):
        book.record_evaluation("coder", "coding", SHA, 0.9, T0)
    assert book.score("coder", "coding", SHA, T0).quality_confidence == pytest.approx(7 / 8)
    book.record_evaluation("coder", "coding", SHA, 0.9, T0)
    score = book.score("coder", "coding", SHA, T0)
    assert score.quality_confidence == 1.0 and score.quality == pytest.approx(0.9)


def test_evidence_halves_every_seven_days() -> None:
    book = OutcomeBook(POLICY)
    served(book, 20)
    assert book.score("coder", "coding", SHA, T0 + WEEK).confidence == pytest.approx(0.5)
    assert book.score("coder", "coding", SHA, T0 + 2 * WEEK).confidence == pytest.approx(0.25)


def test_a_fresh_request_does_not_revive_stale_quality() -> None:
    book = OutcomeBook(POLICY)
    for _ in range(8):
        book.record_evaluation("coder", "coding", SHA, 1.0, T0)
    served(book, 20, at=T0 + WEEK)
    score = book.score("coder", "coding", SHA, T0 + WEEK)
    assert score.confidence == 1.0
    assert score.quality_confidence == pytest.approx(0.5)
    assert score.quality_age_seconds == WEEK


def test_bonus_is_six_points_and_falls_to_zero() -> None:
    book = OutcomeBook(POLICY)
    assert book.score("coder", "coding", SHA, T0).exploration_bonus == 6.0
    served(book, 10)
    assert book.score("coder", "coding", SHA, T0).exploration_bonus == pytest.approx(3.0)
    served(book, 10)
    assert book.score("coder", "coding", SHA, T0).exploration_bonus == 0.0


def test_evidence_is_keyed_by_artifact() -> None:
    book = OutcomeBook(POLICY)
    served(book, 20)
    assert book.score("coder", "coding", "b" * 64, T0).confidence == 0.0
    book.retain_artifacts({"coder": "b" * 64})
    assert book.score("coder", "coding", SHA, T0).confidence == 0.0


def test_success_rate_and_service_time() -> None:
    book = OutcomeBook(POLICY)
    served(book, 3)
    served(book, 1, ok=False)
    score = book.score("coder", "coding", SHA, T0)
    assert score.success_rate == 0.75 and score.mean_service_seconds == 2.0


def test_evidence_bodies_round_trip_through_json() -> None:
    book = OutcomeBook(POLICY)
    served(book, 5)
    served(book, 2, ok=False)
    book.record_evaluation("coder", "coding", SHA, 0.8, T0 + 10)
    stored = {key: json.loads(json.dumps(body)) for key, body in book.bodies().items()}
    restored = OutcomeBook(POLICY)
    assert restored.restore(stored) == len(stored) == 1
    (body,) = stored.values()
    assert body["service"][3] == T0 and body["quality"][3] == T0 + 10  # own timestamps
    assert restored.bodies() == book.bodies()
    assert restored.scores(T0 + 3600) == book.scores(T0 + 3600)


def test_restore_discards_legacy_shared_timestamp_quality_and_bad_counters() -> None:
    book = OutcomeBook(POLICY)
    kept = book.restore(
        {
            ("m", "coding", "sha"): {
                "service": [4.0, 3.0, 8.0],
                "quality": [2.0, 1.8, 0.0],
                "at": T0,
            },
            ("m", "general", "sha"): {"service": [1.0, 2.0, 0.0, T0], "quality": None},
            ("m", "research", "sha"): {"service": [1.0, 1.0, 0.0, float("nan")]},
            ("m", "design", "sha"): "not an object",
        }
    )
    assert kept == 1
    (score,) = book.scores(T0)
    assert (score.workload, score.samples, score.success_rate) == ("coding", 4.0, 0.75)
    assert score.evaluations == 0.0 and score.quality is None  # legacy quality discarded
