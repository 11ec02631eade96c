"""Router observations turned into per-model demand for the planner.

The router hands over one bounded record per request (no content). Only
configured models create demand series, so arbitrary names cannot grow state.
The book keeps a bounded window per model and produces ``ModelDemand`` through
the demand forecaster.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable

from gridctl.domain import ControllerPolicy, ModelDemand
from gridctl.router.telemetry import RequestObservation

MAX_OBSERVATIONS_PER_MODEL = 20_000
RATE_WINDOW_BUCKETS = 5  # the rate is measured over the most recent five buckets


class DemandBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[str, deque[RequestObservation]] = {}
        self._configured: frozenset[str] = frozenset()
        self.revision = 0  # advances on every accepted observation

    def configure(self, models: Iterable[str]) -> None:
        with self._lock:
            self._configured = frozenset(models)
            for model in list(self._series):
                if model not in self._configured:
                    del self._series[model]

    def clear(self, model_id: str) -> None:
        with self._lock:
            self._series.pop(model_id, None)

    def observe(self, observation: RequestObservation) -> None:
        model = observation.model
        if model is None:
            return
        with self._lock:
            if model not in self._configured:
                return
            series = self._series.setdefault(model, deque(maxlen=MAX_OBSERVATIONS_PER_MODEL))
            series.append(observation)
            self.revision += 1

    def forecast(self, now: float, policy: ControllerPolicy) -> tuple[ModelDemand, ...]:
        """Demand per configured model that has crossed the evidence gate.

        A model needs ``portfolio_min_observations`` requests in the window, or
        ``portfolio_min_offered_concurrency`` of device-time pressure, before its
        demand can place a replica: one cheap request never churns a model in.
        """
        window = policy.demand_bucket_seconds * RATE_WINDOW_BUCKETS
        retention = policy.demand_bucket_seconds * policy.demand_window_buckets
        with self._lock:
            for series in self._series.values():
                while series and series[0].t < now - max(window, retention):
                    series.popleft()
            snapshot = {m: list(s) for m, s in self._series.items()}
        result = []
        for model in sorted(snapshot):
            demand = _forecast_one(model, snapshot[model], now, window)
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
    model: str, observations: list[RequestObservation], now: float, window: float
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
