"""Router observations turned into per-model demand for the planner.

The router hands over one bounded record per request (no content). Only
configured models create demand series, so arbitrary names cannot grow state.
The book keeps a bounded window per model and produces ``ModelDemand`` through
the demand forecaster. Every observation also feeds the workload learners
(``gridctl.demand.DemandLearner``: unbound workload demand, correlation,
affinity sequences, outcome evidence); ``picture`` copies their bounded state
under the telemetry lock, and portfolio planning runs on that immutable
picture after the lock is released, so request completion never waits on it.
``with_correlation`` merges the picture's correlated (inferred-only) demand
into the book's direct forecasts for the live plan.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from gridctl.demand import DemandLearner, DemandPicture, features_of
from gridctl.domain import (
    ControllerPolicy,
    DesiredState,
    FleetSnapshot,
    ModelDemand,
    ModelProfile,
    WorkloadCatalog,
)
from gridctl.planner.portfolio_types import MEDIA_WORKLOADS, PortfolioInputs
from gridctl.router.telemetry import RequestObservation

MAX_OBSERVATIONS_PER_MODEL = 20_000
RATE_WINDOW_BUCKETS = 5  # the rate is measured over the most recent five buckets


class DemandBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[str, deque[RequestObservation]] = {}
        self._configured: frozenset[str] = frozenset()
        self.revision = 0  # advances on every accepted observation
        self._learner = DemandLearner(ControllerPolicy(), WorkloadCatalog())

    def configure_learning(
        self,
        policy: ControllerPolicy,
        catalog: WorkloadCatalog,
        profiles: Iterable[ModelProfile],
    ) -> None:
        """Point the learners at the current policy, catalog and configured artifacts.

        Learned state survives a policy or catalog change; only the tunables move.
        """
        artifacts = {p.name: p.artifact.sha256 for p in profiles}
        with self._lock:
            learner = self._learner
            learner.policy = learner.sequences.policy = learner.outcomes.policy = policy
            learner.catalog = catalog
            learner.configure(artifacts)

    def picture(self, now: float) -> DemandPicture:
        """An immutable copy of the learners' state (taken under the lock)."""
        with self._lock:
            return self._learner.picture(now)

    def record_evaluation(
        self, model_id: str, workload: str, sha: str | None, quality: float, at: float
    ) -> None:
        with self._lock:
            self._learner.record_evaluation(model_id, workload, sha, quality, at)
            self.revision += 1

    def evidence_bodies(self) -> dict[tuple[str, str, str], dict[str, list[float] | None]]:
        """Outcome evidence per (model, workload, artifact), copied under the lock."""
        with self._lock:
            return self._learner.outcomes.bodies()

    def restore_evidence(self, bodies: dict[tuple[str, str, str], Any]) -> int:
        """Load outcome evidence persisted by an earlier controller process."""
        with self._lock:
            return self._learner.outcomes.restore(bodies)

    def _learn(self, observation: RequestObservation) -> None:
        modality = observation.modality if observation.modality in ("image", "video") else "text"
        self._learner.observe(
            features_of(
                t=observation.t,
                endpoint=observation.endpoint,
                model=observation.model,
                served_model=observation.served_model,
                workload=observation.workload,
                modality=modality,
                input_units=observation.input_units,
                output_units=observation.output_units,
                service_seconds=observation.service_seconds,
                queue_depth=observation.queue_depth,
                outcome=observation.outcome,
                session_hash=observation.session,
                evaluation=bool(getattr(observation, "evaluation", False)),
            )
        )

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
        with self._lock:
            self._learn(observation)
            if model is None or model == "auto":
                self.revision += 1
                return  # unbound: workload demand only, never a model's direct demand
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


def portfolio_inputs(
    desired: DesiredState, snapshot: FleetSnapshot, picture: DemandPicture | None
) -> PortfolioInputs:
    """Portfolio inputs: the tick's snapshot (its direct demand) plus the learners' picture."""
    media = frozenset(
        w.name
        for w in desired.catalog.workloads
        if {"image", "video"} & (set(w.endpoints) | set(w.modalities))
    )
    return PortfolioInputs(
        profiles=tuple(sorted(desired.profiles, key=lambda p: p.name)),
        snapshot=snapshot,
        policy=desired.policy,
        workloads=picture.workloads if picture is not None else (),
        outcomes=picture.outcomes if picture is not None else (),
        media_workloads=media or MEDIA_WORKLOADS,
    )
