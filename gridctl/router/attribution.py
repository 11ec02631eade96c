"""Private proxy measurements: latency and completion-token throughput per engine.

Every successful response is attributed to (host, model) and bound to the
residency's artifact sha256: a new revision resets that engine's estimator on
its first success, and routing ignores evidence of a previous revision at once.
Each EWMA averages its first ``full_samples`` samples equally (the policy's
``attribution_full_samples``, eight by default) and then moves with weight
1/``full_samples``; its *confidence* ramps to full over as many samples and
decays against its own last-update timestamp, so a stream without token counts
can refresh latency without making an old token rate look fresh. Expired
evidence falls away entirely. Placement reads ``model_speeds``: evidence per
(host, model) with the artifact it was measured on, never mixed across models.
Nothing here is exposed in discovery or status beyond aggregates.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

RAMP_SAMPLES = 8
HALF_LIFE_SECONDS = 600.0
EXPIRY_SECONDS = 3600.0
MAX_ENGINES = 4096


@dataclass
class Ewma:
    value: float = 0.0
    samples: int = 0
    updated_at: float = 0.0
    full_samples: int = RAMP_SAMPLES

    def add(self, sample: float, now: float) -> None:
        self.samples += 1
        alpha = max(1.0 / self.samples, 1.0 / self.full_samples)
        self.value = sample if self.samples == 1 else self.value + alpha * (sample - self.value)
        self.updated_at = now

    def confidence(self, now: float) -> float:
        """0..1: ramp over ``full_samples`` samples times freshness; 0 once expired."""
        if self.samples == 0:
            return 0.0
        age = max(0.0, now - self.updated_at)
        if age > EXPIRY_SECONDS:
            return 0.0
        ramp = min(1.0, self.samples / self.full_samples)
        return float(ramp * 0.5 ** (age / HALF_LIFE_SECONDS))


@dataclass
class EngineMeasurements:
    artifact_sha256: str | None
    latency: Ewma = field(default_factory=Ewma)  # end-to-end seconds
    throughput: Ewma = field(default_factory=Ewma)  # completion tokens per second


@dataclass(frozen=True)
class Estimate:
    """What routing uses for one engine: a value and how much to trust it."""

    latency_seconds: float | None
    latency_confidence: float
    tokens_per_second: float | None
    throughput_confidence: float


NO_ESTIMATE = Estimate(None, 0.0, None, 0.0)


@dataclass(frozen=True)
class SpeedEvidence:
    """One model's measured speed on one host, bound to the artifact it ran."""

    artifact_sha256: str | None
    tokens_per_second: float | None
    throughput_confidence: float
    latency_ms: float | None
    samples: int


class Attribution:
    """Bounded per-engine measurements; thread-safe."""

    def __init__(self, clock: Callable[[], float], full_samples: int = RAMP_SAMPLES) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._engines: dict[tuple[str, str], EngineMeasurements] = {}
        self.full_samples = full_samples  # the policy's ``attribution_full_samples``

    def configure(self, full_samples: int) -> None:
        """Follow the policy's confidence ramp; existing estimators keep their samples."""
        full = max(1, int(full_samples))
        if full == self.full_samples:
            return
        with self._lock:
            self.full_samples = full
            for engine in self._engines.values():
                engine.latency.full_samples = engine.throughput.full_samples = full

    def record(
        self,
        host_id: str,
        model_id: str,
        artifact_sha256: str | None,
        seconds: float,
        completion_tokens: int | None,
    ) -> None:
        if not math.isfinite(seconds) or seconds <= 0 or seconds > 3600:
            return
        now = self._clock()
        key = (host_id, model_id)
        with self._lock:
            engine = self._engines.get(key)
            if engine is None or engine.artifact_sha256 != artifact_sha256:
                if engine is None and len(self._engines) >= MAX_ENGINES:
                    self._evict_oldest()
                engine = self._engines[key] = EngineMeasurements(
                    artifact_sha256,
                    Ewma(full_samples=self.full_samples),
                    Ewma(full_samples=self.full_samples),
                )
            engine.latency.add(seconds, now)
            if completion_tokens:
                engine.throughput.add(completion_tokens / seconds, now)

    def _evict_oldest(self) -> None:
        oldest = min(self._engines, key=lambda k: self._engines[k].latency.updated_at)
        del self._engines[oldest]

    def estimate(self, host_id: str, model_id: str, artifact_sha256: str | None) -> Estimate:
        """Evidence for this exact revision only (another model or revision counts as none)."""
        now = self._clock()
        with self._lock:
            engine = self._engines.get((host_id, model_id))
            if engine is None or engine.artifact_sha256 != artifact_sha256:
                return NO_ESTIMATE
            lat_c = engine.latency.confidence(now)
            tps_c = engine.throughput.confidence(now)
            return Estimate(
                engine.latency.value if lat_c > 0 else None,
                lat_c,
                engine.throughput.value if tps_c > 0 else None,
                tps_c,
            )

    def model_speeds(self) -> dict[tuple[str, str], SpeedEvidence]:
        """Speed evidence per (host, model), each with its artifact — placement input.

        Every model keeps its own evidence: a fast model on a host never lends
        another model on that host its speed.
        """
        now = self._clock()
        result: dict[tuple[str, str], SpeedEvidence] = {}
        with self._lock:
            for key, engine in sorted(self._engines.items()):
                tps_c = engine.throughput.confidence(now)
                lat_c = engine.latency.confidence(now)
                if tps_c <= 0 and lat_c <= 0:
                    continue
                result[key] = SpeedEvidence(
                    engine.artifact_sha256,
                    engine.throughput.value if tps_c > 0 else None,
                    tps_c,
                    engine.latency.value * 1000 if lat_c >= 0.5 else None,
                    engine.throughput.samples,
                )
        return result

    def size(self) -> int:
        with self._lock:
            return len(self._engines)
