"""Direct named-model demand for the live plan.

The controller plans named-model demand from the production learners
(``DemandLearner``: bucketed series, so a burst is folded into its bucket and
memory is bounded by the window): ``gated_demand`` keeps the forecasts behind
the evidence gate, and ``with_correlation`` merges the learners' correlated
(inferred-only) demand in. The scenario lab plans through the same functions
(see ``gridctl.demand.intake``). All are pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from gridctl.demand.buckets import BucketSeries, bucket_start
from gridctl.demand.learning import DemandPicture
from gridctl.domain import ControllerPolicy, ModelDemand

RATE_WINDOW_BUCKETS = 5  # the rate is measured over the most recent five buckets


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
