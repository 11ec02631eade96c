"""Direct named-model demand for the live plan.

The controller plans named-model demand from the production learners
(``DemandLearner``: bucketed series, so a burst is folded into its bucket and
memory is bounded by the window): ``gated_demand`` keeps the forecasts behind
the evidence gate, and ``with_correlation`` merges the learners' correlated
(inferred-only) demand in. ``direct_forecast`` is the sample-window forecast
the scenario lab's simulated requests still use. All are pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Protocol

from gridctl.demand.buckets import BucketSeries, bucket_start
from gridctl.demand.learning import DemandPicture
from gridctl.domain import ControllerPolicy, ModelDemand

RATE_WINDOW_BUCKETS = 5  # the rate is measured over the most recent five buckets


class DirectSample(Protocol):
    """What the forecast reads of one finished request naming a model."""

    @property
    def t(self) -> float: ...

    @property
    def outcome(self) -> str: ...

    @property
    def service_seconds(self) -> float: ...


def rate_window(policy: ControllerPolicy) -> float:
    return policy.demand_bucket_seconds * RATE_WINDOW_BUCKETS


def retention(policy: ControllerPolicy) -> float:
    """How long samples must be kept for the forecast (older ones may be dropped)."""
    return max(rate_window(policy), policy.demand_bucket_seconds * policy.demand_window_buckets)


def direct_forecast(
    samples: Mapping[str, Sequence[DirectSample]], now: float, policy: ControllerPolicy
) -> tuple[ModelDemand, ...]:
    """Demand per model that has crossed the evidence gate.

    A model needs ``portfolio_min_observations`` requests in the window, or
    ``portfolio_min_offered_concurrency`` of device-time pressure, before its
    demand can place a replica: one cheap request never churns a model in.
    """
    window = rate_window(policy)
    result = []
    for model in sorted(samples):
        demand = _forecast_one(model, samples[model], now, window)
        if demand is None:
            continue
        if (
            demand.sample_count < policy.portfolio_min_observations
            and demand.offered_concurrency < policy.portfolio_min_offered_concurrency
        ):
            continue
        result.append(demand)
    return tuple(result)


def _forecast_one(
    model: str, observations: Sequence[DirectSample], now: float, window: float
) -> ModelDemand | None:
    recent = [o for o in observations if now - window <= o.t <= now]
    if not recent:
        return None
    minutes = window / 60.0
    served = [o for o in recent if o.outcome == "ok"]
    rejected = [o for o in recent if o.outcome == "rejected"]
    errors = [o for o in recent if o.outcome == "error"]
    service = sorted(o.service_seconds for o in served) or [0.0]
    mean_service = sum(service) / len(service)
    rate_per_second = len(recent) / window
    last_minute_rejected = sum(1 for o in rejected if now - o.t <= 60.0)
    p95 = service[min(len(service) - 1, int(0.95 * len(service)))] * 1000.0 if served else None
    half = [o for o in recent if o.t >= now - window / 2]
    trend = (2 * len(half) - len(recent)) / minutes  # positive when the recent half is busier
    return ModelDemand(
        model_id=model,
        requests_per_minute=len(recent) / minutes,
        offered_concurrency=rate_per_second * mean_service + last_minute_rejected,
        queue_depth=float(last_minute_rejected),
        p95_latency_ms=p95,
        error_rate=len(errors) / len(recent),
        trend_per_minute=max(0.0, trend),
        confidence=min(1.0, len(recent) / 20.0),
        sample_count=len(recent),
        observed_peak_requests_per_minute=len(recent) / minutes,
    )


def recent_requests(series: BucketSeries, now: float) -> int:
    """Requests in the current bucket and the ones before it within the rate window."""
    oldest = bucket_start(now, series.width) - (RATE_WINDOW_BUCKETS - 1) * series.width
    return sum(b.requests for b in series.buckets if oldest <= b.start <= now)


def gated_demand(
    models: Iterable[ModelDemand],
    series: Mapping[str, BucketSeries],
    now: float,
    policy: ControllerPolicy,
) -> tuple[ModelDemand, ...]:
    """The learners' per-model forecasts (bucketed EWMA with trend, log-histogram p95,
    offered concurrency) that carry recent direct evidence and have crossed the
    evidence gate, with their correlated part removed (``with_correlation`` merges
    it back).

    A model needs ``portfolio_min_observations`` requests in the rate window (five
    buckets), or ``portfolio_min_offered_concurrency`` of device-time pressure,
    before its demand can place a replica: one cheap request never churns a model
    in, and traffic older than the window is history for correlation, not demand.
    """
    result = []
    for demand in sorted(models, key=lambda d: d.model_id):
        found = series.get(demand.model_id)
        recent = recent_requests(found, now) if found is not None else 0
        if not recent:
            continue
        if (
            recent < policy.portfolio_min_observations
            and demand.offered_concurrency < policy.portfolio_min_offered_concurrency
        ):
            continue
        result.append(replace(demand, correlated_requests_per_minute=0.0))
    return tuple(result)


def with_queued_work(
    demand: Iterable[ModelDemand], queued: Mapping[str, int], configured: Iterable[str]
) -> tuple[ModelDemand, ...]:
    """Direct forecasts with the work queued in the engines themselves included.

    A model's queue is at least what its engines advertise as waiting for a
    slot; queued work is direct evidence, so a model with a queue and no
    forecast yet gets a row of its own.
    """
    allowed = frozenset(configured)
    merged = {d.model_id: d for d in demand}
    for model, waiting in sorted(queued.items()):
        if waiting <= 0 or model not in allowed:
            continue
        old = merged.get(model) or ModelDemand(model)
        if waiting > old.queue_depth:
            extra = waiting - old.queue_depth
            merged[model] = replace(
                old,
                queue_depth=float(waiting),
                offered_concurrency=old.offered_concurrency + extra,
            )
    return tuple(merged[m] for m in sorted(merged))


def with_correlation(
    direct: Iterable[ModelDemand], picture: DemandPicture, configured: Iterable[str]
) -> tuple[ModelDemand, ...]:
    """Direct forecasts with the learners' correlated demand merged in.

    Direct evidence (rate, queue, latency, errors) comes only from ``direct``;
    the learner contributes ``correlated_requests_per_minute`` and the observed
    peak that caps it. A model with correlation but no direct forecast gets a
    correlation-only row (no direct field set), which the planner ranks as
    inferred demand: it fills spare capacity and never preempts.
    """
    allowed = frozenset(configured)
    merged = {d.model_id: d for d in direct}
    for learned in picture.models:
        rate = learned.correlated_requests_per_minute
        if rate <= 0 or learned.model_id not in allowed:
            continue
        peak = learned.observed_peak_requests_per_minute
        old = merged.get(learned.model_id)
        if old is None:
            merged[learned.model_id] = ModelDemand(
                learned.model_id,
                correlated_requests_per_minute=rate,
                observed_peak_requests_per_minute=peak,
            )
        else:
            merged[learned.model_id] = replace(
                old,
                correlated_requests_per_minute=max(old.correlated_requests_per_minute, rate),
                observed_peak_requests_per_minute=max(old.observed_peak_requests_per_minute, peak),
            )
    return tuple(merged[m] for m in sorted(merged))
