"""The short-horizon forecast: bucketed EWMA plus a positive trend.

Per-minute request rates of the complete buckets in the window (empty buckets
count as zero) feed an EWMA; the trend is an EWMA of bucket-to-bucket changes,
kept only when positive, because a falling rate must never accelerate
scale-down. Offered concurrency is the forecast arrival rate times the
measured mean service time (over the requests an engine served: a refusal is
arrival, not service) plus the work queued now. While no request in the window
was served there is no measurement, and it is 0: the planner then takes the
profile's expected service time (``direct_concurrency``). Latency is the
approximate request-level p95 of the merged histograms. The error rate counts
the window's failed requests; a refused one (no engine took it) counts only in
its own bucket and the next, as the queue does, so the refusals of a cold start
stop asking for replicas once the first one serves.
"""

from __future__ import annotations

from itertools import pairwise

from gridctl.demand.buckets import BucketSeries, DemandBucket, bucket_start, mean_service_seconds
from gridctl.demand.histograms import merge
from gridctl.domain import ControllerPolicy, ModelDemand

FULL_CONFIDENCE_REQUESTS = 20


def complete_rates(series: BucketSeries, now: float) -> list[float]:
    """Requests per minute of each complete bucket in the window, oldest first."""
    current = bucket_start(now, series.width)
    last = current - series.width
    first = last - (series.window - 1) * series.width
    by_start = {b.start: b for b in series.buckets}
    present = [s for s in by_start if first <= s <= last]
    if not present:
        return []
    start = min(present)
    rates: list[float] = []
    while start <= last:
        bucket = by_start.get(start)
        count = bucket.requests if bucket is not None else 0
        rates.append(count * 60.0 / series.width)
        start += series.width
    return rates


def ewma_with_trend(rates: list[float], alpha: float) -> tuple[float, float]:
    """(level, positive trend per bucket) of a rate series."""
    if not rates:
        return 0.0, 0.0
    level = rates[0]
    trend = 0.0
    for previous, rate in pairwise(rates):
        level = alpha * rate + (1.0 - alpha) * level
        trend = alpha * (rate - previous) + (1.0 - alpha) * trend
    return level, max(0.0, trend)


def current_queue(series: BucketSeries, now: float) -> float:
    """Queue of the current or previous bucket only: a queue seen minutes ago is not
    current pressure, however long ago the series' last request came."""
    oldest = bucket_start(now, series.width) - series.width
    return max((b.max_queue for b in series.buckets if oldest <= b.start <= now), default=0.0)


def forecast(
    series: BucketSeries,
    now: float,
    policy: ControllerPolicy,
) -> ModelDemand:
    """The ``ModelDemand`` a planner consumes, from one model's bucketed history."""
    window_start = bucket_start(now, series.width) - series.window * series.width
    recent: list[DemandBucket] = [b for b in series.buckets if window_start <= b.start <= now]
    rates = complete_rates(series, now)
    level, trend = ewma_with_trend(rates, policy.demand_ewma_alpha)
    requests = sum(b.requests for b in recent)
    # a refusal is unmet work, pressure only while current (as the queue is): one refused
    # minutes ago, while the first replica was still starting, asks for no replica now
    current = bucket_start(now, series.width) - series.width
    errors = sum(b.errors - (b.refused if b.start < current else 0) for b in recent)
    service = mean_service_seconds(recent)
    queue = current_queue(series, now)
    per_minute_trend = trend * 60.0 / series.width
    return ModelDemand(
        model_id=series.model_id,
        requests_per_minute=level,
        offered_concurrency=0.0 if service is None else level / 60.0 * service + queue,
        queue_depth=queue,
        p95_latency_ms=merge(b.latency for b in recent).p95(),
        error_rate=errors / requests if requests else 0.0,
        trend_per_minute=per_minute_trend,
        confidence=min(1.0, requests / FULL_CONFIDENCE_REQUESTS),
        sample_count=requests,
        observed_peak_requests_per_minute=max(rates, default=0.0),
    )
