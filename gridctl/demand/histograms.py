"""A bounded logarithmic latency histogram per time bucket.

Latencies fall into buckets whose bounds grow by ``GROWTH`` (about 19% apart),
so one histogram holds any range of latencies in at most ``BUCKETS`` counters
and a quantile is exact to within one bucket. Aggregate SLO decisions use the
approximate request-level p95: one slow outlier among ninety-nine fast
requests stays tail evidence without making the whole minute look slow.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

GROWTH = 2.0**0.25
FLOOR_MS = 1.0
BUCKETS = 96  # 1 ms .. ~16 minutes


def bucket_index(latency_ms: float) -> int:
    if not latency_ms > FLOOR_MS:  # also catches NaN
        return 0
    return min(BUCKETS - 1, int(math.log(latency_ms / FLOOR_MS, GROWTH)) + 1)


def bucket_upper_ms(index: int) -> float:
    """The upper bound of a bucket: a conservative representative latency."""
    return FLOOR_MS * GROWTH**index


@dataclass(frozen=True, slots=True)
class LatencyHistogram:
    """Counts per logarithmic bucket, as sorted (index, count) pairs."""

    counts: tuple[tuple[int, int], ...] = ()

    @property
    def total(self) -> int:
        return sum(count for _, count in self.counts)

    def add(self, latency_ms: float, count: int = 1) -> LatencyHistogram:
        return merge((self, LatencyHistogram(((bucket_index(latency_ms), count),))))

    def quantile(self, q: float) -> float | None:
        """Approximate latency below which a share ``q`` of requests fell (None when empty)."""
        total = self.total
        if total == 0:
            return None
        rank = max(1, math.ceil(q * total))
        seen = 0
        for index, count in self.counts:
            seen += count
            if seen >= rank:
                return bucket_upper_ms(index)
        return bucket_upper_ms(self.counts[-1][0])  # pragma: no cover - rank <= total

    def p95(self) -> float | None:
        return self.quantile(0.95)


def merge(histograms: Iterable[LatencyHistogram]) -> LatencyHistogram:
    merged: dict[int, int] = {}
    for histogram in histograms:
        for index, count in histogram.counts:
            merged[index] = merged.get(index, 0) + count
    return LatencyHistogram(tuple(sorted(merged.items())))
