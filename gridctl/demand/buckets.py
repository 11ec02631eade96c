"""Bounded demand history: aggregate counts and timings per time bucket.

Each completed or failed request is folded into the bucket covering its
completion time: request and error counts, total service seconds, the largest
queue seen and a logarithmic latency histogram. A request the router refused
(no ready replica with a free slot) counts as a request and an error, but no
engine served it: its time is not service time, so it is counted apart
(``refused``) and the mean service time is taken over the served requests only.
Nothing about the request itself is kept. Bursts are folded into their bucket,
never truncated at a raw-request limit, and only the newest ``window`` buckets
survive. ``fold_many`` counts a batch (a minute of router reports) in one pass
with the same additions in the same order as folding them one by one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gridctl.demand.histograms import LatencyHistogram, bucket_index

# (at, service_seconds, latency_ms, ok, queue_depth, refused): an Observation's fields
ObservationRow = tuple[float, float, float, bool, float, bool]


@dataclass(frozen=True, slots=True)
class Observation:
    """Bounded features of one finished request (no prompt, no response, no identity)."""

    model_id: str
    at: float  # completion time, seconds
    service_seconds: float
    latency_ms: float
    ok: bool = True
    queue_depth: float = 0.0
    refused: bool = False  # refused by the router: no engine served it


@dataclass(frozen=True, slots=True)
class DemandBucket:
    """Aggregates of every observation whose completion fell in [start, start + width)."""

    start: float
    requests: int = 0
    errors: int = 0
    service_seconds: float = 0.0
    max_queue: float = 0.0
    latency: LatencyHistogram = field(default_factory=LatencyHistogram)
    refused: int = 0  # of ``requests`` (and of ``errors``): no service time in the total

    @property
    def served(self) -> int:
        """The requests an engine served, whose times make ``service_seconds``."""
        return self.requests - self.refused

    def with_observation(self, obs: Observation) -> DemandBucket:
        service = obs.service_seconds if math.isfinite(obs.service_seconds) else 0.0
        return replace(
            self,
            requests=self.requests + 1,
            errors=self.errors + (0 if obs.ok and not obs.refused else 1),
            refused=self.refused + (1 if obs.refused else 0),
            service_seconds=self.service_seconds + (0.0 if obs.refused else max(0.0, service)),
            max_queue=max(self.max_queue, obs.queue_depth),
            latency=self.latency.add(obs.latency_ms),
        )


def mean_service_seconds(buckets: Iterable[DemandBucket]) -> float | None:
    """Measured seconds per served request; None when no request in ``buckets`` was served
    (refusals alone measure nothing)."""
    served = 0
    total = 0.0
    for bucket in buckets:
        served += bucket.served
        total += bucket.service_seconds
    return total / served if served else None


def bucket_start(at: float, width: float) -> float:
    return math.floor(at / width) * width


@dataclass(frozen=True, slots=True)
class BucketSeries:
    """The bounded, time-ordered buckets of one model."""

    model_id: str
    width: float = 60.0
    window: int = 30
    buckets: tuple[DemandBucket, ...] = ()

    def fold(self, obs: Observation) -> BucketSeries:
        """A new series with ``obs`` counted; buckets older than the window are dropped."""
        start = bucket_start(obs.at, self.width)
        by_start = {b.start: b for b in self.buckets}
        current = by_start.get(start, DemandBucket(start=start))
        by_start[start] = current.with_observation(obs)
        newest = max(by_start)
        horizon = newest - (self.window - 1) * self.width
        kept = tuple(by_start[s] for s in sorted(by_start) if s >= horizon)
        return replace(self, buckets=kept)

    def fold_many(self, observations: Sequence[Observation]) -> BucketSeries:
        """``fold`` of each observation in order, in one pass (the same result)."""
        return self.fold_rows(
            [
                (o.at, o.service_seconds, o.latency_ms, o.ok, o.queue_depth, o.refused)
                for o in observations
            ]
        )

    def fold_rows(self, rows: Sequence[ObservationRow]) -> BucketSeries:
        """``fold_many`` of observations given as rows (no ``Observation`` built).

        The window's horizon only moves forward, so a row whose bucket is already
        behind it would be counted and dropped by ``fold``: it is skipped, and every
        bucket still behind the final horizon is dropped at the end. A kept bucket
        sees every one of its rows in order: the same float additions as ``fold``.
        """
        if not rows:
            return self
        width = self.width
        reach = (self.window - 1) * width
        by_start = {b.start: b for b in self.buckets}
        newest = max(by_start) if by_start else None
        open_: dict[float, list[Any]] = {}
        floor, isfinite = math.floor, math.isfinite
        for at, service_seconds, latency_ms, ok, queue_depth, refused in rows:
            start = floor(at / width) * width
            if newest is None or start > newest:
                newest = start
            if start < newest - reach:
                continue  # ``fold`` would count it in a bucket it drops at once
            cell = open_.get(start)
            if cell is None:
                base = by_start.get(start) or DemandBucket(start=start)
                counts: dict[int, int] = {}
                for index, count in base.latency.counts:
                    counts[index] = counts.get(index, 0) + count
                cell = open_[start] = [
                    base.requests,
                    base.errors,
                    base.service_seconds,
                    base.max_queue,
                    counts,
                    base.refused,
                    base.start,
                ]
            service = service_seconds if isfinite(service_seconds) else 0.0
            cell[0] += 1
            cell[1] += 0 if ok and not refused else 1
            cell[5] += 1 if refused else 0
            cell[2] = cell[2] + (0.0 if refused else max(0.0, service))
            cell[3] = max(cell[3], queue_depth)
            histogram = cell[4]
            index = bucket_index(latency_ms)
            histogram[index] = histogram.get(index, 0) + 1
        for start, (requests, errors, service, queue, histogram, refused, key) in open_.items():
            by_start[start] = DemandBucket(
                start=key,
                requests=requests,
                errors=errors,
                service_seconds=service,
                max_queue=queue,
                latency=LatencyHistogram(tuple(sorted(histogram.items()))),
                refused=refused,
            )
        assert newest is not None
        horizon = newest - reach
        kept = tuple(by_start[s] for s in sorted(by_start) if s >= horizon)
        return replace(self, buckets=kept)

    def fold_all(self, observations: Iterable[Observation]) -> BucketSeries:
        series = self
        for obs in sorted(observations, key=lambda o: (o.at, o.latency_ms, o.service_seconds)):
            series = series.fold(obs)
        return series
