"""The minimal forecaster: log histogram p95, bounded buckets, EWMA + positive trend."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.demand import BucketSeries, LatencyHistogram, Observation, ewma_with_trend, forecast
from gridctl.demand.histograms import BUCKETS, GROWTH, bucket_index
from gridctl.domain import ControllerPolicy

T0 = 1_800_000_000.0  # on a minute boundary
POLICY = ControllerPolicy()


def obs(
    at: float, service: float = 2.0, latency: float = 100.0, ok: bool = True, queue: float = 0.0
) -> Observation:
    return Observation("m", at, service, latency, ok, queue)


def steady(per_minute: int, minutes: int, service: float = 2.0) -> BucketSeries:
    rows = [
        obs(T0 + m * 60 + i * (60 / per_minute), service)
        for m in range(minutes)
        for i in range(per_minute)
    ]
    return BucketSeries("m").fold_all(rows)


def test_one_slow_outlier_among_99_fast_requests_stays_out_of_p95() -> None:
    h = LatencyHistogram()
    for _ in range(99):
        h = h.add(100.0)
    h = h.add(60_000.0)
    p95 = h.p95()
    assert p95 is not None and 100.0 <= p95 <= 100.0 * GROWTH
    assert h.quantile(1.0) is not None and h.quantile(1.0) >= 60_000.0  # type: ignore[operator]


def test_many_slow_requests_move_p95() -> None:
    h = LatencyHistogram()
    for i in range(100):
        h = h.add(5_000.0 if i < 10 else 100.0)
    assert h.p95() is not None and h.p95() >= 5_000.0  # type: ignore[operator]


@settings(max_examples=500, deadline=None)
@given(st.floats(min_value=0.0, max_value=1e7, allow_nan=False))
def test_histogram_bucket_bounds_the_latency(latency: float) -> None:
    index = bucket_index(latency)
    assert 0 <= index < BUCKETS
    if 1.0 < latency < 1e6:
        assert GROWTH ** (index - 1) <= latency * (1 + 1e-9)
        assert latency <= GROWTH**index * (1 + 1e-9)


def test_buckets_fold_bursts_and_keep_only_the_window() -> None:
    burst = [obs(T0 + 0.001 * i) for i in range(5000)]
    series = BucketSeries("m", window=3).fold_all(burst)
    assert len(series.buckets) == 1 and series.buckets[0].requests == 5000
    later = series.fold(obs(T0 + 10 * 60))
    assert [b.start for b in later.buckets] == [T0 + 600]


def test_steady_rate_forecasts_rate_and_offered_concurrency() -> None:
    series = steady(per_minute=30, minutes=10, service=4.0)
    demand = forecast(series, T0 + 10 * 60 + 1, POLICY)
    assert math.isclose(demand.requests_per_minute, 30.0)
    assert demand.trend_per_minute == 0.0
    # 0.5 requests/s x 4 s of service = 2 concurrent requests
    assert math.isclose(demand.offered_concurrency, 2.0)
    assert demand.confidence == 1.0


def test_queued_work_adds_to_offered_concurrency() -> None:
    series = steady(per_minute=6, minutes=5).fold(obs(T0 + 5 * 60 + 5, queue=3.0))
    demand = forecast(series, T0 + 5 * 60 + 10, POLICY)
    assert demand.queue_depth == 3.0
    assert math.isclose(demand.offered_concurrency, 6 / 60 * 2.0 + 3.0)


@given(st.integers(min_value=2, max_value=29), st.floats(min_value=1.0, max_value=50.0))
@settings(max_examples=40, deadline=None)
def test_a_queue_is_pressure_for_its_bucket_and_the_next_only(
    minutes_later: int, queue: float
) -> None:
    """However long ago the series' last request came, a queue it saw then is not current
    pressure: it counts in its own bucket and the one after, never later."""
    series = steady(per_minute=6, minutes=5).fold(obs(T0 + 5 * 60 + 5, queue=queue))
    assert forecast(series, T0 + 6 * 60 + 30, POLICY).queue_depth == queue
    later = forecast(series, T0 + (5 + minutes_later) * 60 + 30, POLICY)
    assert later.queue_depth == 0.0
    assert later.sample_count > 0  # the requests are still in the window


@given(
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=0, max_value=3),
    st.integers(min_value=2, max_value=25),
)
@settings(max_examples=60, deadline=None)
def test_a_refusal_is_error_pressure_for_its_bucket_and_the_next_only(
    refused: int, failed: int, minutes_later: int
) -> None:
    """Refused requests (no engine took them) are unmet work, pressure while current like a
    queue: they count as errors in their own bucket and the next, never later. Requests an
    engine served and failed stay errors for the whole window."""
    rows = [
        Observation("m", T0 + 5 * 60 + i, 0.0, 0.0, ok=False, refused=True) for i in range(refused)
    ] + [obs(T0 + 5 * 60 + 20 + i, ok=False) for i in range(failed)]
    series = steady(per_minute=6, minutes=5).fold_all(rows)
    requests = 30 + refused + failed
    now = forecast(series, T0 + 6 * 60 + 30, POLICY)
    assert math.isclose(now.error_rate, (refused + failed) / requests)
    later = forecast(series, T0 + (5 + minutes_later) * 60 + 30, POLICY)
    assert later.sample_count == requests  # every request is still in the window
    assert math.isclose(later.error_rate, failed / requests)


def test_rising_rate_has_positive_trend_falling_rate_none() -> None:
    rising = [obs(T0 + m * 60 + i) for m in range(8) for i in range(5 * (m + 1))]
    up = forecast(BucketSeries("m").fold_all(rising), T0 + 8 * 60 + 1, POLICY)
    assert up.trend_per_minute > 0
    falling = [obs(T0 + m * 60 + i) for m in range(8) for i in range(5 * (8 - m))]
    down = forecast(BucketSeries("m").fold_all(falling), T0 + 8 * 60 + 1, POLICY)
    assert down.trend_per_minute == 0.0


def test_incomplete_current_bucket_is_not_a_rate_drop() -> None:
    series = steady(per_minute=30, minutes=5).fold(obs(T0 + 5 * 60 + 1))
    demand = forecast(series, T0 + 5 * 60 + 2, POLICY)
    assert math.isclose(demand.requests_per_minute, 30.0)


def test_errors_and_peak() -> None:
    rows = [obs(T0 + i, ok=i % 10 != 0) for i in range(50)] + [obs(T0 + 60 + i) for i in range(10)]
    demand = forecast(BucketSeries("m").fold_all(rows), T0 + 121, POLICY)
    assert math.isclose(demand.error_rate, 5 / 60)
    assert demand.observed_peak_requests_per_minute == 50.0


@settings(max_examples=500, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=30))
def test_ewma_stays_within_the_observed_range_and_trend_is_never_negative(
    rates: list[float],
) -> None:
    level, trend = ewma_with_trend(rates, 0.3)
    assert trend >= 0.0
    if rates:
        assert min(rates) - 1e-6 <= level <= max(rates) + 1e-6


def test_empty_history_forecasts_nothing() -> None:
    demand = forecast(BucketSeries("m"), T0, POLICY)
    assert demand.requests_per_minute == 0 and demand.offered_concurrency == 0
    assert demand.p95_latency_ms is None and not demand.has_direct_evidence
