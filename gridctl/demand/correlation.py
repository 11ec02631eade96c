"""Model correlation: co-active groups and one-bucket-apart transitions.

From the complete buckets of each configured model's direct series the
learner finds two kinds of mature relation:

- a co-active pair: both models active in the same buckets, with at least
  ``correlation_min_buckets`` shared buckets and a Jaccard association of at
  least ``correlation_threshold``;
- a directional transition A -> B: B active in the bucket right after an
  active A bucket, with the same support and threshold, where the confidence
  counts only A buckets whose next bucket is already complete (an incomplete
  future bucket is not a failure).

Current demand of a source then infers demand for a quiet peer: the source's
latest complete rate times the confidence-weighted historical rate ratio,
capped at ``inferred_demand_peak_multiplier`` x the target's observed peak,
taking the maximum (not the sum) over at most ``correlation_max_sources``
current sources. Inference never chains: only direct rates are sources. It
fills the separate ``correlated_requests_per_minute`` field and never touches
the target's own queue, latency or error evidence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gridctl.demand.buckets import BucketSeries, bucket_start
from gridctl.domain import ControllerPolicy


@dataclass(frozen=True, slots=True)
class Relation:
    """One mature relation: ``kind`` is "group" (same bucket) or "transition" (next bucket)."""

    kind: str
    source: str
    target: str
    support: int
    confidence: float
    rate_ratio: float  # mean target rate / source rate over the supporting buckets


@dataclass(frozen=True, slots=True)
class Inference:
    """Inferred demand for one target and the sources that justify it."""

    model_id: str
    requests_per_minute: float
    sources: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class CorrelationReport:
    relations: tuple[Relation, ...]
    inferences: tuple[Inference, ...]

    def inference_for(self, model_id: str) -> Inference | None:
        for inference in self.inferences:
            if inference.model_id == model_id:
                return inference
        return None


def complete_rates_by_start(series: BucketSeries, now: float) -> dict[float, float]:
    """Requests per minute of every complete, in-window bucket that saw traffic."""
    current = bucket_start(now, series.width)
    first = current - series.window * series.width
    return {
        b.start: b.requests * 60.0 / series.width
        for b in series.buckets
        if first <= b.start < current and b.requests > 0
    }


def _group(
    a: str,
    b: str,
    ra: dict[float, float],
    rb: dict[float, float],
    policy: ControllerPolicy,
) -> list[Relation]:
    shared = sorted(set(ra) & set(rb))
    union = set(ra) | set(rb)
    if len(shared) < policy.correlation_min_buckets or not union:
        return []
    association = len(shared) / len(union)
    if association < policy.correlation_threshold:
        return []
    ab = sum(rb[s] / ra[s] for s in shared) / len(shared)
    ba = sum(ra[s] / rb[s] for s in shared) / len(shared)
    return [
        Relation("group", a, b, len(shared), association, ab),
        Relation("group", b, a, len(shared), association, ba),
    ]


def _transition(
    a: str,
    b: str,
    ra: dict[float, float],
    rb: dict[float, float],
    width: float,
    current: float,
    policy: ControllerPolicy,
) -> Relation | None:
    judged = [s for s in sorted(ra) if s + width < current]  # the next bucket is complete
    supporting = [s for s in judged if s + width in rb]
    if len(supporting) < policy.correlation_min_buckets:
        return None
    confidence = len(supporting) / len(judged)
    if confidence < policy.correlation_threshold:
        return None
    ratio = sum(rb[s + width] / ra[s] for s in supporting) / len(supporting)
    return Relation("transition", a, b, len(supporting), confidence, ratio)


def learn_relations(
    series: Mapping[str, BucketSeries], now: float, policy: ControllerPolicy
) -> tuple[Relation, ...]:
    """Every mature group pair (both directions) and transition, in a stable order."""
    rates = {m: complete_rates_by_start(s, now) for m, s in sorted(series.items())}
    active = [m for m in rates if rates[m]]
    relations: list[Relation] = []
    for i, a in enumerate(active):
        for b in active[i + 1 :]:
            relations.extend(_group(a, b, rates[a], rates[b], policy))
    for a in active:
        width = series[a].width
        current = bucket_start(now, width)
        for b in active:
            if a == b:
                continue
            found = _transition(a, b, rates[a], rates[b], width, current, policy)
            if found is not None:
                relations.append(found)
    relations.sort(key=lambda r: (r.target, r.source, r.kind))
    return tuple(relations)


def current_source_rate(series: BucketSeries, now: float) -> float:
    """The direct rate of the latest complete bucket (0 when it was quiet)."""
    last = bucket_start(now, series.width) - series.width
    for b in series.buckets:
        if b.start == last:
            return b.requests * 60.0 / series.width
    return 0.0


def infer(
    series: Mapping[str, BucketSeries], now: float, policy: ControllerPolicy
) -> CorrelationReport:
    """Mature relations and the inferred demand they give each quiet or busy target."""
    relations = learn_relations(series, now, policy)
    source_rates = {m: current_source_rate(s, now) for m, s in series.items()}
    by_target: dict[str, list[tuple[float, str]]] = {}
    for relation in relations:
        rate = source_rates.get(relation.source, 0.0)
        if rate <= 0:
            continue
        inferred = rate * relation.rate_ratio * relation.confidence
        by_target.setdefault(relation.target, []).append((inferred, relation.source))
    inferences: list[Inference] = []
    for target in sorted(by_target):
        candidates = sorted(by_target[target], key=lambda c: (-source_rates[c[1]], c[1], -c[0]))
        limited = _distinct_sources(candidates, policy.correlation_max_sources)
        peak = max(complete_rates_by_start(series[target], now).values(), default=0.0)
        cap = peak * policy.inferred_demand_peak_multiplier
        best = min(cap, max(rate for rate, _ in limited))
        if best <= 0:
            continue
        ranked = sorted(limited, key=lambda c: (-c[0], c[1]))
        names = tuple(dict.fromkeys(name for _, name in ranked))
        inferences.append(Inference(target, best, names))
    return CorrelationReport(relations, tuple(inferences))


def _distinct_sources(candidates: list[tuple[float, str]], limit: int) -> list[tuple[float, str]]:
    chosen: list[tuple[float, str]] = []
    seen: set[str] = set()
    for rate, name in candidates:
        if name not in seen and len(seen) >= limit:
            continue
        seen.add(name)
        chosen.append((rate, name))
    return chosen
