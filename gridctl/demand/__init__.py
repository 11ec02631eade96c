"""Demand observation and the short-horizon forecast (pure: no clock, no I/O).

Observations are folded into bounded time buckets of aggregate counts and a
logarithmic latency histogram; the forecast is a bucketed EWMA plus a positive
trend, and offered concurrency is arrival rate x measured service time plus
queued work. Time always arrives as an argument.
"""

from gridctl.demand.buckets import BucketSeries, DemandBucket, Observation
from gridctl.demand.correlation import CorrelationReport, Inference, Relation, infer
from gridctl.demand.features import (
    RequestFeatures,
    affinity_hash,
    classify_workload,
    features_of,
    is_unbound,
    workflow_key,
)
from gridctl.demand.forecasting import ewma_with_trend, forecast
from gridctl.demand.histograms import LatencyHistogram
from gridctl.demand.learning import DemandLearner, DemandPicture, WorkloadDemand
from gridctl.demand.outcomes import OutcomeBook, OutcomeScore
from gridctl.demand.sequences import SequenceLearner, WorkloadTransition

__all__ = [
    "BucketSeries",
    "CorrelationReport",
    "DemandBucket",
    "DemandLearner",
    "DemandPicture",
    "Inference",
    "LatencyHistogram",
    "Observation",
    "OutcomeBook",
    "OutcomeScore",
    "Relation",
    "RequestFeatures",
    "SequenceLearner",
    "WorkloadDemand",
    "WorkloadTransition",
    "affinity_hash",
    "classify_workload",
    "ewma_with_trend",
    "features_of",
    "forecast",
    "infer",
    "is_unbound",
    "workflow_key",
]
