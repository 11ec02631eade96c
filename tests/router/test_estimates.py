"""Attribution and the completion estimate, without HTTP."""

from __future__ import annotations

from gridctl.router.attribution import EXPIRY_SECONDS, Attribution, Estimate
from gridctl.router.choosing import Candidate, choose, effective_concurrency, score, token_hint
from gridctl.routes import EngineRoute

OLD, NEW = "aa" * 32, "bb" * 32


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def route(host: str, slots: int | None = 4, **kw: object) -> EngineRoute:
    return EngineRoute(
        host,
        "m",
        f"http://{host}",
        None,
        advertised_concurrency=slots,
        **kw,  # type: ignore[arg-type]
    )


def test_confidence_ramps_over_eight_samples_and_decays_with_age() -> None:
    clock = Clock()
    measured = Attribution(clock)
    confidences = []
    for _ in range(9):
        measured.record("h", "m", OLD, 0.5, 10)
        confidences.append(measured.estimate("h", "m", OLD).latency_confidence)
    assert confidences[:8] == [n / 8 for n in range(1, 9)] and confidences[8] == 1.0
    clock.now += 600
    assert measured.estimate("h", "m", OLD).latency_confidence == 0.5
    clock.now += EXPIRY_SECONDS
    assert measured.estimate("h", "m", OLD).latency_seconds is None  # expired: dropped


def test_a_new_revision_is_not_credited_with_old_evidence() -> None:
    measured = Attribution(Clock())
    for _ in range(8):
        measured.record("h", "m", OLD, 0.1, 100)
    assert measured.estimate("h", "m", NEW).latency_seconds is None
    assert measured.estimate("h", "other-model", OLD).latency_seconds is None
    measured.record("h", "m", NEW, 2.0, 10)  # the first success resets the estimator
    fresh = measured.estimate("h", "m", NEW)
    assert fresh.latency_seconds == 2.0 and fresh.latency_confidence == 1 / 8
    assert measured.estimate("h", "m", OLD).latency_seconds is None


def test_a_latency_only_stream_does_not_refresh_the_token_rate() -> None:
    clock = Clock()
    measured = Attribution(clock)
    for _ in range(8):
        measured.record("h", "m", OLD, 1.0, 50)
    clock.now += 1200
    measured.record("h", "m", OLD, 1.0, None)
    estimate = measured.estimate("h", "m", OLD)
    assert estimate.latency_confidence > 0.9 and estimate.throughput_confidence == 0.25


def test_weak_evidence_blends_toward_comparable_engines() -> None:
    strong = Candidate(route("a"), estimate=Estimate(1.0, 1.0, None, 0.0))
    weak = Candidate(route("b"), estimate=Estimate(0.1, 0.125, None, 0.0))
    unknown = Candidate(route("c"))
    by_host = {
        s.candidate.route.host_id: s.estimate_seconds for s in score([strong, weak, unknown])
    }
    assert by_host["a"] == 1.0
    assert 0.1 < by_host["b"] < 1.0  # pulled toward the median (0.55), not trusted outright
    assert by_host["c"] == 0.55  # no evidence: the comparable median


def test_a_token_hint_favours_throughput_for_long_generations() -> None:
    quick = Candidate(route("quick"), estimate=Estimate(0.2, 1.0, 20.0, 1.0))
    wide = Candidate(route("wide"), estimate=Estimate(0.5, 1.0, 200.0, 1.0))
    assert choose([quick, wide], tokens=2) == quick.route
    assert choose([quick, wide], tokens=2000) == wide.route
    assert token_hint({"max_tokens": 2000}) == 2000
    assert token_hint({"max_completion_tokens": 5, "max_tokens": 9}) == 5
    assert token_hint({"max_tokens": 10**9}) is None and token_hint({"max_tokens": True}) is None


def test_capacity_rules() -> None:
    assert effective_concurrency(None, 1.0) == 1  # unknown: one at a time
    assert effective_concurrency(0, 1.0) == 0  # zero: closed
    assert effective_concurrency(8, 0.5) == 4
    assert effective_concurrency(1, 0.5) == 1
    assert effective_concurrency(8, 0.0) == 0
    closed = Candidate(route("z", slots=0))
    full = Candidate(route("f", slots=2), active=2)
    assert choose([closed, full]) is None
    raw = Candidate(route("u", slots=None), active=0)
    assert raw.load == 0 and Candidate(route("u", slots=None), active=3).load == 3


def test_fresher_leases_break_ties_and_the_clock_cannot_be_gamed() -> None:
    old = Candidate(route("a"), lease_age=20.0)
    fresh = Candidate(route("b"), lease_age=1.0)
    assert choose([old, fresh]) == fresh.route
    skewed = Candidate(route("c"), lease_age=0.0)  # a future timestamp is clamped to age 0
    same = Candidate(route("b"), lease_age=0.0)
    assert choose([skewed, same]) == same.route  # then host id, never input order
    assert choose([same, skewed]) == same.route
