"""Demand observation and the short-horizon forecast (pure: no clock, no I/O).

Observations are folded into bounded time buckets of aggregate counts and a
logarithmic latency histogram; the forecast is a bucketed EWMA plus a positive
trend, and offered concurrency is arrival rate x measured service time plus
queued work. Time always arrives as an argument.
"""

from gridctl.demand.buckets import BucketSeries, DemandBucket, Observation
from gridctl.demand.forecasting import ewma_with_trend, forecast
from gridctl.demand.histograms import LatencyHistogram

__all__ = [
    "BucketSeries",
    "DemandBucket",
    "LatencyHistogram",
    "Observation",
    "ewma_with_trend",
    "forecast",
]
