"""The demand learner: one place that folds request features into bounded state.

Direct named-model demand and unbound (``model: "auto"`` or none) workload
demand are kept in separate series. Only configured, non-retiring model ids
create direct series; workloads outside the catalog fold into its default.
The served model of an unbound request gains outcome evidence, never direct
demand. Evaluation-marked inference teaches outcomes only. ``picture`` turns
the state into an immutable ``DemandPicture`` at an explicit instant; the
controller takes it under its telemetry lock and plans on it afterwards.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from gridctl.demand.buckets import (
    BucketSeries,
    Observation,
    ObservationRow,
    bucket_start,
    mean_service_seconds,
)
from gridctl.demand.correlation import CorrelationReport, Relation, infer
from gridctl.demand.features import UNBOUND_MODEL_NAMES, RequestFeatures
from gridctl.demand.forecasting import current_queue, forecast
from gridctl.demand.outcomes import OutcomeBook, OutcomeScore
from gridctl.demand.sequences import SequenceLearner, WorkloadTransition
from gridctl.domain import ControllerPolicy, ModelDemand, WorkloadCatalog

RECENT_RATE_BUCKETS = 5  # arrival rate also counts the current, incomplete bucket
RECURRENCE_ARRIVALS = 4  # per workload, the last arrivals (distinct buckets) remembered


@dataclass(frozen=True, slots=True)
class WorkloadDemand:
    """Unbound demand of one workload (never attributed to a model)."""

    workload: str
    requests: int  # observations in the window
    requests_per_minute: float
    offered_concurrency: float
    queue_depth: float
    error_rate: float
    mean_service_seconds: float
    anticipated_requests_per_minute: float = 0.0  # from mature affinity transitions
    anticipated_from: tuple[str, ...] = ()
    anticipated_confidence: float = 0.0  # the learned edge's confidence
    # a sparse workload's rhythm, beyond the demand window: the longest gap between its
    # last few arrivals (0 with fewer than two) and how long ago the last one came
    recurrence_gap_seconds: float = 0.0
    last_arrival_age_seconds: float = 0.0

    @property
    def failures(self) -> float:
        return self.error_rate * self.requests

    def recurs(self, policy: ControllerPolicy) -> bool:
        """Whether its next arrival is still expected: its last one is no older than
        half again the longest gap seen between its recent ones, and that gap is within
        ``sparse_recurrence_max_gap_seconds``."""
        gap = self.recurrence_gap_seconds
        return 0.0 < gap <= policy.sparse_recurrence_max_gap_seconds and (
            self.last_arrival_age_seconds <= 1.5 * gap
        )


@dataclass(frozen=True, slots=True)
class DemandPicture:
    """An immutable snapshot of everything the learners know at ``now``."""

    now: float
    revision: int
    models: tuple[ModelDemand, ...]
    correlation_sources: tuple[tuple[str, tuple[str, ...]], ...]
    workloads: tuple[WorkloadDemand, ...]
    transitions: tuple[WorkloadTransition, ...]
    relations: tuple[Relation, ...]
    outcomes: tuple[OutcomeScore, ...]

    def workload(self, name: str) -> WorkloadDemand | None:
        for w in self.workloads:
            if w.workload == name:
                return w
        return None


def recent_rate(series: BucketSeries, now: float, buckets: int = RECENT_RATE_BUCKETS) -> float:
    """Requests per minute over the last ``buckets`` buckets including the current one."""
    first = bucket_start(now, series.width) - (buckets - 1) * series.width
    count = sum(b.requests for b in series.buckets if first <= b.start <= now)
    return count * 60.0 / (buckets * series.width)


class DemandLearner:
    """Direct, workload, correlation, sequence and outcome learners behind one ``observe``."""

    def __init__(self, policy: ControllerPolicy, catalog: WorkloadCatalog) -> None:
        self.policy = policy
        self.catalog = catalog
        self.direct: dict[str, BucketSeries] = {}
        self.unbound: dict[str, BucketSeries] = {}
        self.sequences = SequenceLearner(policy)
        self.outcomes = OutcomeBook(policy)
        self.artifacts: dict[str, str] = {}  # configured model -> sha256 ("" when undeclared)
        # per workload, the bucket starts of its last unbound arrivals, oldest first: a
        # sparse workload's rhythm outlives the demand window
        self.arrivals: dict[str, tuple[float, ...]] = {}
        self.revision = 0

    def configure(self, artifacts: Mapping[str, str | None], retiring: Iterable[str] = ()) -> None:
        """Set the configured, non-retiring models; everything else is forgotten."""
        gone = set(retiring)
        self.artifacts = {m: sha or "" for m, sha in sorted(artifacts.items()) if m not in gone}
        for model in [m for m in self.direct if m not in self.artifacts]:
            del self.direct[model]
        self.outcomes.retain_artifacts(self.artifacts)

    def retarget(
        self,
        policy: ControllerPolicy,
        catalog: WorkloadCatalog,
        artifacts: Mapping[str, str | None],
    ) -> None:
        """Point the learners at a desired state's policy, catalog and configured artifacts.
        Learned state survives a policy or catalog change; only the tunables move."""
        self.policy = self.sequences.policy = self.outcomes.policy = policy
        self.catalog = catalog
        self.configure(artifacts)

    def _series(self, book: dict[str, BucketSeries], name: str) -> BucketSeries:
        return book.get(name) or BucketSeries(
            name, self.policy.demand_bucket_seconds, self.policy.demand_window_buckets
        )

    def observe(self, features: RequestFeatures) -> None:
        workload = features.workload
        if workload not in self.catalog.names:
            workload = self.catalog.default_workload
            features = replace(features, workload=workload)
        self.revision += 1
        served = features.served_model
        if served in self.artifacts and features.outcome != "rejected":
            sha = features.artifact_sha256
            current = self.artifacts[served]
            if sha is None or not current or sha == current:
                self.outcomes.record_request(
                    served,
                    workload,
                    current or sha,
                    features.outcome == "ok",
                    features.service_seconds,
                    features.t,
                )
        if features.evaluation:
            return  # evaluation traffic is never demand
        observation = Observation(
            model_id="",
            at=features.t,
            service_seconds=features.service_seconds,
            latency_ms=features.service_seconds * 1000.0,
            ok=features.outcome == "ok",
            queue_depth=float(features.queue_depth),
            refused=features.outcome == "rejected",
        )
        if features.unbound:
            series = self._series(self.unbound, workload)
            self.unbound[workload] = series.fold(replace(observation, model_id=workload))
            self._arrived(workload, (features.t,))
        elif features.model in self.artifacts:
            model = str(features.model)
            series = self._series(self.direct, model)
            self.direct[model] = series.fold(replace(observation, model_id=model))
        self.sequences.observe(features)

    def observe_all(self, batch: Sequence[RequestFeatures]) -> None:
        """``observe`` of each request in order (a minute of router reports at once).

        Outcome and sequence evidence is taken request by request as ``observe``
        takes it; each series folds its share of the batch in one ``fold_rows``,
        which adds the same numbers in the same order as folding them one by one.
        """
        names = frozenset(self.catalog.names)
        default = self.catalog.default_workload
        artifacts = self.artifacts
        record = self.outcomes.record_request
        sequence = self.sequences.observe
        unbound_rows: dict[str, list[ObservationRow]] = {}  # per workload, first seen first
        direct_rows: dict[str, list[ObservationRow]] = {}  # per configured model
        for features in batch:
            workload = features.workload
            if workload not in names:
                workload = default
                features = replace(features, workload=workload)
            served = features.served_model
            outcome = features.outcome
            if served in artifacts and outcome != "rejected":
                sha = features.artifact_sha256
                current = artifacts[served]
                if sha is None or not current or sha == current:
                    record(
                        served,
                        workload,
                        current or sha,
                        outcome == "ok",
                        features.service_seconds,
                        features.t,
                    )
            if features.evaluation:
                continue  # evaluation traffic is never demand
            model = features.model
            if model is None or model.strip().lower() in UNBOUND_MODEL_NAMES:  # ``unbound``
                book, key = unbound_rows, workload
            elif model in artifacts:
                book, key = direct_rows, model
            else:
                book = None
            if book is not None:
                service = features.service_seconds
                row = (
                    features.t,
                    service,
                    service * 1000.0,
                    outcome == "ok",
                    float(features.queue_depth),
                    outcome == "rejected",
                )
                found = book.get(key)
                if found is None:
                    book[key] = [row]
                else:
                    found.append(row)
            if features.session is not None:
                sequence(features)
        self.revision += len(batch)
        for name, series_rows in unbound_rows.items():
            self.unbound[name] = self._series(self.unbound, name).fold_rows(series_rows)
            self._arrived(name, [row[0] for row in series_rows])
        for name, series_rows in direct_rows.items():
            self.direct[name] = self._series(self.direct, name).fold_rows(series_rows)

    def _arrived(self, workload: str, times: Iterable[float]) -> None:
        """Remember the buckets of ``workload``'s unbound arrivals at ``times``."""
        width = self.policy.demand_bucket_seconds
        kept = list(self.arrivals.get(workload, ()))
        for at in times:
            start = bucket_start(at, width)
            if not kept or start > kept[-1]:
                kept.append(start)
            elif start not in kept:  # late: in its place
                kept = sorted({*kept, start})
        self.arrivals[workload] = tuple(kept[-RECURRENCE_ARRIVALS:])

    def record_evaluation(
        self, model_id: str, workload: str, sha: str | None, quality: float, at: float
    ) -> None:
        self.revision += 1
        self.outcomes.record_evaluation(model_id, workload, sha, quality, at)

    def state(self) -> dict[str, object]:
        """Everything the learners hold, JSON-shaped (persistence and privacy checks)."""

        def buckets(book: dict[str, BucketSeries]) -> dict[str, object]:
            return {
                name: [
                    [
                        b.start,
                        b.requests,
                        b.errors,
                        b.service_seconds,
                        b.max_queue,
                        list(b.latency.counts),
                        b.refused,
                    ]
                    for b in series.buckets
                ]
                for name, series in sorted(book.items())
            }

        return {
            "revision": self.revision,
            "direct": buckets(self.direct),
            "unbound": buckets(self.unbound),
            "arrivals": {name: list(times) for name, times in sorted(self.arrivals.items())},
            "sequences": self.sequences.state(),
            "outcomes": [
                [*key, c.weight, c.total, c.second, c.at]
                for book in (self.outcomes.service, self.outcomes.quality)
                for key, c in sorted(book.items())
            ],
        }

    def picture(self, now: float) -> DemandPicture:
        self.sequences.expire(now)
        report = infer(self.direct, now, self.policy)
        models = self._model_demand(now, report)
        transitions = self.sequences.edges(now)
        workloads = self._workload_demand(now, transitions)
        return DemandPicture(
            now=now,
            revision=self.revision,
            models=models,
            correlation_sources=tuple((i.model_id, i.sources) for i in report.inferences),
            workloads=workloads,
            transitions=transitions,
            relations=report.relations,
            outcomes=self.outcomes.scores(now),
        )

    def _model_demand(self, now: float, report: CorrelationReport) -> tuple[ModelDemand, ...]:
        result: list[ModelDemand] = []
        for model in sorted(set(self.direct) | {i.model_id for i in report.inferences}):
            series = self._series(self.direct, model)
            demand = forecast(series, now, self.policy)
            rate = max(demand.requests_per_minute, recent_rate(series, now))
            if rate != demand.requests_per_minute:
                extra = (rate - demand.requests_per_minute) / 60.0 * _mean_service(series)
                demand = replace(
                    demand,
                    requests_per_minute=rate,
                    offered_concurrency=demand.offered_concurrency + extra,
                )
            inference = report.inference_for(model)
            if inference is not None:
                demand = replace(
                    demand, correlated_requests_per_minute=inference.requests_per_minute
                )
            if demand.sample_count or demand.correlated_requests_per_minute > 0:
                result.append(demand)
        return tuple(result)

    def _workload_demand(
        self, now: float, transitions: tuple[WorkloadTransition, ...]
    ) -> tuple[WorkloadDemand, ...]:
        rows: dict[str, WorkloadDemand] = {}
        for name, series in sorted(self.unbound.items()):
            demand = forecast(series, now, self.policy)
            if not demand.sample_count:
                continue
            rate = max(demand.requests_per_minute, recent_rate(series, now))
            service = _mean_service(series)
            queue = max(current_queue(series, now), _unmet_work(series, now))
            rows[name] = WorkloadDemand(
                workload=name,
                requests=demand.sample_count,
                requests_per_minute=rate,
                offered_concurrency=rate / 60.0 * service + queue,
                queue_depth=queue,
                error_rate=demand.error_rate,
                mean_service_seconds=service,
            )
        width = self.policy.demand_bucket_seconds
        for name, times in sorted(self.arrivals.items()):
            if name not in self.catalog.names:
                continue
            gap = max((b - a for a, b in pairwise(times)), default=0.0)
            age = max(0.0, bucket_start(now, width) - times[-1])
            row = rows.get(name) or WorkloadDemand(name, 0, 0.0, 0.0, 0.0, 0.0, 0.0)
            rhythm = replace(row, recurrence_gap_seconds=gap, last_arrival_age_seconds=age)
            if name in rows or rhythm.recurs(self.policy):
                rows[name] = rhythm
        for edge in transitions:
            source = rows.get(edge.source)
            if source is None or source.requests_per_minute <= 0:
                continue
            anticipated = source.requests_per_minute * edge.confidence
            target = rows.get(edge.target) or WorkloadDemand(
                edge.target, 0, 0.0, 0.0, 0.0, 0.0, 0.0
            )
            if anticipated > target.anticipated_requests_per_minute:
                rows[edge.target] = replace(
                    target,
                    anticipated_requests_per_minute=anticipated,
                    anticipated_from=(edge.source,),
                    anticipated_confidence=edge.confidence,
                )
        return tuple(rows[n] for n in sorted(rows))


def _mean_service(series: BucketSeries) -> float:
    """Seconds per served request over the series (0 while none was served)."""
    return mean_service_seconds(series.buckets) or 0.0


def _unmet_work(series: BucketSeries, now: float) -> float:
    """Requests of the current or previous bucket that no model took: an unbound workload's
    queue (its work waits for a model, not behind a busy engine, so no engine reports it)."""
    oldest = bucket_start(now, series.width) - series.width
    return float(sum(b.refused for b in series.buckets if oldest <= b.start <= now))
