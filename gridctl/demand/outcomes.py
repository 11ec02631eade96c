"""Outcome evidence: how well a model actually served a workload.

Evidence is keyed by (model, workload, artifact sha256), so a replacement
artifact starts uncertain and a late response from the previous revision
cannot update the new one. Two independent, decaying counters per key:

- service: requests the model served for the workload (success share, mean
  service time); confidence is full at ``outcome_full_confidence_requests``
  effective (decayed) requests;
- quality: operator-labelled evaluations (score 0..1); quality confidence is
  full at ``quality_full_confidence_evaluations`` effective evaluations.

Each halves every ``evidence_half_life_seconds`` on its own clock, so a fresh
latency-only request cannot revive stale quality. The optimism bonus is
``exploration_bonus_points`` x (1 - confidence): it lets an equally suitable,
untried model earn one canary and falls to zero as evidence accumulates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gridctl.domain import ControllerPolicy

MAX_OUTCOME_KEYS = 4096

EvidenceKey = tuple[str, str, str]  # (model, workload, artifact sha256 or "")


@dataclass(frozen=True, slots=True)
class Counter:
    """A decayed weight, a decayed weighted sum and when both were last updated."""

    weight: float = 0.0
    total: float = 0.0
    second: float = 0.0  # a second decayed sum (service seconds for requests)
    at: float | None = None

    def decayed(self, now: float, half_life: float) -> Counter:
        if self.at is None or now <= self.at:
            return self
        factor = 0.5 ** ((now - self.at) / half_life)
        return Counter(self.weight * factor, self.total * factor, self.second * factor, self.at)

    def add(self, now: float, half_life: float, value: float, second: float = 0.0) -> Counter:
        """``decayed`` to ``now`` plus one observation (the same arithmetic, one object)."""
        at = self.at
        if at is None or now <= at:
            return Counter(
                self.weight + 1.0,
                self.total + value,
                self.second + second,
                max(now, at if at is not None else now),
            )
        factor = 0.5 ** ((now - at) / half_life)
        return Counter(
            self.weight * factor + 1.0,
            self.total * factor + value,
            self.second * factor + second,
            max(now, at),
        )


EMPTY = Counter()


@dataclass(frozen=True, slots=True)
class OutcomeScore:
    """What the portfolio and status read about one (model, workload, artifact)."""

    model_id: str
    workload: str
    artifact_sha256: str
    samples: float
    confidence: float
    success_rate: float | None
    mean_service_seconds: float | None
    evaluations: float
    quality: float | None
    quality_confidence: float
    service_age_seconds: float | None
    quality_age_seconds: float | None
    exploration_bonus: float


def unknown_score(model_id: str, workload: str, sha: str, policy: ControllerPolicy) -> OutcomeScore:
    return OutcomeScore(
        model_id,
        workload,
        sha,
        0.0,
        0.0,
        None,
        None,
        0.0,
        None,
        0.0,
        None,
        None,
        policy.exploration_bonus_points,
    )


class OutcomeBook:
    """Bounded outcome evidence (no clock: every call carries ``now``)."""

    def __init__(self, policy: ControllerPolicy) -> None:
        self.policy = policy
        self.service: dict[EvidenceKey, Counter] = {}
        self.quality: dict[EvidenceKey, Counter] = {}

    def record_request(
        self,
        model_id: str,
        workload: str,
        sha: str | None,
        ok: bool,
        service_seconds: float,
        at: float,
    ) -> None:
        key = (model_id, workload, sha or "")
        book = self.service
        counter = book.get(key) or EMPTY
        book[key] = counter.add(
            at,
            self.policy.evidence_half_life_seconds,
            1.0 if ok else 0.0,
            max(0.0, service_seconds),
        )
        if len(book) > MAX_OUTCOME_KEYS:
            self._bound(book)

    def record_evaluation(
        self, model_id: str, workload: str, sha: str | None, quality: float, at: float
    ) -> None:
        key = (model_id, workload, sha or "")
        half = self.policy.evidence_half_life_seconds
        bounded = min(1.0, max(0.0, quality))
        self.quality[key] = self.quality.get(key, Counter()).add(at, half, bounded)
        self._bound(self.quality)

    def retain_artifacts(self, current: dict[str, str]) -> None:
        """Forget evidence of models no longer configured or of superseded artifacts."""
        for book in (self.service, self.quality):
            for key in list(book):
                model_id, _, sha = key
                if model_id not in current or (current[model_id] and sha != current[model_id]):
                    del book[key]

    def bodies(self) -> dict[EvidenceKey, dict[str, list[float] | None]]:
        """Every key's two counters, each with its own timestamp (for persistence)."""

        def row(counter: Counter | None) -> list[float] | None:
            if counter is None or counter.at is None:
                return None
            return [counter.weight, counter.total, counter.second, counter.at]

        return {
            key: {"service": row(self.service.get(key)), "quality": row(self.quality.get(key))}
            for key in sorted(set(self.service) | set(self.quality))
        }

    def restore(self, bodies: Mapping[EvidenceKey, Any]) -> int:
        """Load persisted bodies; returns how many keys were kept.

        Malformed counters are ignored. A legacy body with one shared ``at`` (three
        numbers per counter) keeps its service evidence but no quality: a shared
        timestamp cannot tell how old the labels are, so they are discarded.
        """
        kept = 0
        for key, body in sorted(bodies.items()):
            if not isinstance(body, Mapping):
                continue
            raw = body.get("service")
            legacy = "at" in body  # one timestamp shared by both counters
            if legacy and isinstance(raw, list) and len(raw) == 3:
                raw = [*raw, body["at"]]
            service = _counter(raw)
            quality = None if legacy else _counter(body.get("quality"))
            if service is not None:
                self.service[key] = service
            if quality is not None:
                self.quality[key] = quality
            kept += service is not None or quality is not None
        self._bound(self.service)
        self._bound(self.quality)
        return kept

    def _bound(self, book: dict[EvidenceKey, Counter]) -> None:
        while len(book) > MAX_OUTCOME_KEYS:
            stalest = min(book, key=lambda k: (book[k].at or 0.0, k))
            del book[stalest]

    def score(self, model_id: str, workload: str, sha: str | None, now: float) -> OutcomeScore:
        key = (model_id, workload, sha or "")
        policy = self.policy
        half = policy.evidence_half_life_seconds
        service = self.service.get(key, Counter()).decayed(now, half)
        quality = self.quality.get(key, Counter()).decayed(now, half)
        confidence = min(1.0, service.weight / policy.outcome_full_confidence_requests)
        quality_confidence = min(1.0, quality.weight / policy.quality_full_confidence_evaluations)
        return OutcomeScore(
            model_id=model_id,
            workload=workload,
            artifact_sha256=sha or "",
            samples=service.weight,
            confidence=confidence,
            success_rate=service.total / service.weight if service.weight > 0 else None,
            mean_service_seconds=service.second / service.weight if service.weight > 0 else None,
            evaluations=quality.weight,
            quality=quality.total / quality.weight if quality.weight > 0 else None,
            quality_confidence=quality_confidence,
            service_age_seconds=None if service.at is None else max(0.0, now - service.at),
            quality_age_seconds=None if quality.at is None else max(0.0, now - quality.at),
            exploration_bonus=policy.exploration_bonus_points * (1.0 - confidence),
        )

    def scores(self, now: float) -> tuple[OutcomeScore, ...]:
        keys = sorted(set(self.service) | set(self.quality))
        return tuple(self.score(m, w, s or None, now) for m, w, s in keys)


def _counter(raw: Any) -> Counter | None:
    if not isinstance(raw, list) or len(raw) != 4:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in raw):
        return None
    weight, total, second, at = (float(v) for v in raw)
    if not all(math.isfinite(v) and v >= 0 for v in (weight, total, second, at)):
        return None
    if total > weight + 1e-9:
        return None  # a success or quality sum never exceeds its weight
    return Counter(weight, total, second, at)
