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
into the book's direct forecasts for the live plan; it, the forecast itself and
``portfolio_inputs`` are pure (``gridctl.demand.direct``,
``gridctl.planner.portfolio_inputs``) and re-exported here.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from collections.abc import Iterable
from typing import Any

from gridctl.demand import DemandLearner, DemandPicture, features_of
from gridctl.demand.direct import direct_forecast, retention, with_correlation
from gridctl.domain import (
    ControllerPolicy,
    DesiredState,
    ModelDemand,
    ModelProfile,
    WorkloadCatalog,
)
from gridctl.planner.portfolio_inputs import portfolio_inputs
from gridctl.router.telemetry import RequestObservation

MAX_OBSERVATIONS_PER_MODEL = 20_000
__all__ = ["DemandBook", "portfolio_inputs", "with_correlation"]


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
        """Demand per configured model that has crossed the evidence gate
        (``gridctl.demand.direct.direct_forecast`` on the window copied under the lock)."""
        keep = retention(policy)
        with self._lock:
            for series in self._series.values():
                while series and series[0].t < now - keep:
                    series.popleft()
            snapshot = {m: list(s) for m, s in self._series.items()}
        return direct_forecast(snapshot, now, policy)

    def preview(
        self, now: float, desired: DesiredState
    ) -> tuple[DemandPicture, tuple[ModelDemand, ...]]:
        """The picture and direct forecast a tick holding ``desired`` would plan with.

        Computed on copies (the learners configured for ``desired``'s policy, catalog
        and artifacts; series of models it does not declare dropped), so a dry run of a
        candidate desired state changes nothing here.
        """
        names = {p.name for p in desired.profiles}
        with self._lock:
            learner = copy.deepcopy(self._learner)
            series = {m: list(s) for m, s in self._series.items() if m in names}
        learner.policy = learner.sequences.policy = learner.outcomes.policy = desired.policy
        learner.catalog = desired.catalog
        learner.configure({p.name: p.artifact.sha256 for p in desired.profiles})
        return learner.picture(now), direct_forecast(series, now, desired.policy)
