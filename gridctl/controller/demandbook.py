"""Router observations turned into per-model and per-workload demand for the planner.

The router hands over one bounded record per request (no content). Every
observation feeds the production learners (``gridctl.demand.DemandLearner``):
bucketed series per configured model and per unbound workload (a burst is
folded into its bucket; memory is bounded by the window, never by a raw
request count), log-histogram latency, correlation, affinity sequences and
outcome evidence. Only configured models create demand series, so arbitrary
names cannot grow state. ``forecast`` is the learners' direct per-model
forecast behind the evidence gate (``gridctl.demand.direct.gated_demand``);
``picture`` copies the learners' bounded state under the telemetry lock, and
portfolio planning runs on that immutable picture after the lock is released,
so request completion never waits on it. ``demand_rows`` and ``restore_demand``
carry the bucket series and affinity sequences across a restart
(``gridctl.demand.rows``). ``with_correlation`` merges the
picture's correlated (inferred-only) demand into the direct forecasts for the
live plan; it, the gate and ``portfolio_inputs`` are pure and re-exported here.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Iterable
from typing import Any

from gridctl.demand import DemandLearner, DemandPicture, SequenceLearner
from gridctl.demand.direct import gated_demand, with_correlation
from gridctl.demand.intake import RequestObservation, learned_forecast, observation_features
from gridctl.demand.rows import Restored, Row, RowKey, learner_rows, overlay, restore_rows
from gridctl.domain import (
    ControllerPolicy,
    DesiredState,
    ModelDemand,
    ModelProfile,
    WorkloadCatalog,
)
from gridctl.planner.portfolio_inputs import portfolio_inputs

__all__ = ["DemandBook", "portfolio_inputs", "with_correlation"]


class DemandBook:
    def __init__(self) -> None:
        self._lock = threading.Lock()
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
            self._learner.retarget(policy, catalog, artifacts)

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

    def demand_rows(
        self, unless_revision: int | None = None
    ) -> tuple[int, dict[RowKey, str]] | None:
        """The learners' series and sequences as store rows, with the learner revision
        they reflect; None when that revision is still ``unless_revision``."""
        with self._lock:  # series and sequence entries are immutable: copy the maps only
            learner = self._learner
            if learner.revision == unless_revision:
                return None
            revision = learner.revision
            direct, unbound = dict(learner.direct), dict(learner.unbound)
            sequences = SequenceLearner(learner.sequences.policy)
            sequences.restore(dict(learner.sequences.cursors), dict(learner.sequences.transitions))
            arrivals = dict(learner.arrivals)
        # serialised outside the lock
        return revision, learner_rows(direct, unbound, sequences, arrivals)

    def restore_demand(
        self, rows: list[Row], policy: ControllerPolicy, now: float, *, over: bool = False
    ) -> Restored:
        """Load series and sequences persisted by an earlier controller process, within
        their windows at ``now``; invalid rows are refused one by one (``Restored``).
        ``over``: lay them over this process's own state (taking over from another
        controller) instead of replacing it (a restart)."""
        restored = restore_rows(rows, policy, now)
        with self._lock:
            learner = self._learner
            if over:
                restored = overlay(
                    restored,
                    learner.direct,
                    learner.unbound,
                    learner.sequences,
                    policy,
                    learner.arrivals,
                )
            learner.direct = dict(restored.direct)
            learner.arrivals = dict(restored.arrivals)
            learner.unbound = dict(restored.unbound)
            learner.sequences.restore(restored.cursors, restored.transitions)
            learner.revision += 1
            self.revision += 1
        return restored

    def _learn(self, observation: RequestObservation) -> None:
        self._learner.observe(observation_features(observation))

    def configure(self, models: Iterable[str]) -> None:
        with self._lock:
            self._configured = frozenset(models)
            for model in [m for m in self._learner.direct if m not in self._configured]:
                del self._learner.direct[model]

    def clear(self, model_id: str) -> None:
        with self._lock:
            self._learner.direct.pop(model_id, None)

    def observe(self, observation: RequestObservation) -> None:
        model = observation.model
        with self._lock:
            self._learn(observation)
            if model is None or model == "auto" or model in self._configured:
                self.revision += 1  # unbound: workload demand only, never a model's

    def forecast(self, now: float, policy: ControllerPolicy) -> tuple[ModelDemand, ...]:
        """Direct demand per configured model that has crossed the evidence gate, from
        the learners' bucketed series (computed under the lock)."""
        with self._lock:
            picture = self._learner.picture(now)
            series = dict(self._learner.direct)  # immutable series: a shallow copy suffices
        return gated_demand(picture.models, series, now, policy)

    def series_sizes(self) -> dict[str, int]:
        """Buckets held per configured model (bounded by the policy's window)."""
        with self._lock:
            return {m: len(s.buckets) for m, s in sorted(self._learner.direct.items())}

    def preview(
        self, now: float, desired: DesiredState
    ) -> tuple[DemandPicture, tuple[ModelDemand, ...]]:
        """The picture and direct forecast a tick holding ``desired`` would plan with.

        Computed on a copy of the learners configured for ``desired``'s policy,
        catalog and artifacts (series of models it does not declare dropped), so a
        dry run of a candidate desired state changes nothing here.
        """
        with self._lock:
            learner = copy.deepcopy(self._learner)
        artifacts = {p.name: p.artifact.sha256 for p in desired.profiles}
        learner.retarget(desired.policy, desired.catalog, artifacts)
        return learned_forecast(learner, now, desired.policy)
