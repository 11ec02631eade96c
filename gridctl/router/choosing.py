"""Pick one admitted, ready engine for one request.

The pipeline, in order:

1. *Admission* (hard): a route whose circuit is open, whose effective
   concurrency is zero, or whose active requests already fill its effective
   concurrency (advertised slots times the host's throttle multiplier) is out.
2. *Protection class* (hard): only the best class left competes — fully
   accepting hosts before throttled ones.
3. *Estimated completion*: the request's service wave (1 while a slot is free,
   growing with active plus advertised queued work) times a latency estimate.
   Measured latency is confidence-weighted and blended toward the median of
   comparable engines for the same model; with no evidence every engine gets
   the same nominal latency, so the choice reduces to load. A bounded
   ``max_tokens`` hint adds a throughput lower bound.
4. *Affinity*: with a session key, rendezvous hashing among routes whose
   estimate is within 20% of the best.
5. Ties: lower load (active over effective concurrency; unknown capacity counts
   raw load), fresher lease (future timestamps clamp to age 0), then host id —
   never input order.

Pure: inputs are data, no clock and no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from gridctl.router.affinity import rendezvous_pick
from gridctl.router.attribution import NO_ESTIMATE, Estimate
from gridctl.routes import EngineRoute

AFFINITY_SLACK = 0.2  # a fraction of the best estimate
NOMINAL_LATENCY = 1.0
MAX_TOKEN_HINT = 1_000_000


@dataclass(frozen=True)
class Candidate:
    """One route plus everything the router knows about it right now."""

    route: EngineRoute
    active: int = 0
    circuit_open: bool = False
    estimate: Estimate = NO_ESTIMATE
    lease_age: float = 0.0

    @property
    def engine_id(self) -> str:
        return f"{self.route.host_id}|{self.route.endpoint}"

    @property
    def capacity(self) -> int:
        """Effective concurrency: 0 means closed; unknown capacity admits one at a time."""
        return effective_concurrency(
            self.route.advertised_concurrency, self.route.concurrency_multiplier
        )

    @property
    def load(self) -> float:
        if self.route.advertised_concurrency is None:
            return float(self.active)  # unknown capacity: conservative raw load
        return self.active / self.capacity if self.capacity else math.inf

    @property
    def admissible(self) -> bool:
        return not self.circuit_open and self.capacity > 0 and self.active < self.capacity


@dataclass(frozen=True)
class Scored:
    candidate: Candidate
    estimate_seconds: float

    @property
    def order(self) -> tuple[float, float, float, str]:
        c = self.candidate
        return (self.estimate_seconds, c.load, c.lease_age, c.route.host_id)


def effective_concurrency(advertised: int | None, multiplier: float) -> int:
    if advertised is None:
        advertised = 1
    if advertised <= 0 or not multiplier > 0:
        return 0
    return max(1, math.floor(advertised * min(1.0, multiplier)))


def token_hint(payload: dict[str, object]) -> int | None:
    """A bounded ``max_completion_tokens``/``max_tokens`` hint, or None."""
    for name in ("max_completion_tokens", "max_tokens"):
        value = payload.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_TOKEN_HINT:
            return value
    return None


def _median(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _blend(value: float | None, confidence: float, prior: float) -> float:
    if value is None or confidence <= 0:
        return prior
    return confidence * value + (1.0 - confidence) * prior


def score(candidates: Sequence[Candidate], tokens: int | None = None) -> list[Scored]:
    """Estimated completion for each candidate, best first."""
    latency_prior = (
        _median([c.estimate.latency_seconds for c in candidates if c.estimate.latency_seconds])
        or NOMINAL_LATENCY
    )
    tps_prior = _median(
        [c.estimate.tokens_per_second for c in candidates if c.estimate.tokens_per_second]
    )
    scored = []
    for c in candidates:
        capacity = max(1, c.capacity)
        waves = 1 + (c.active + max(0, c.route.queue_depth)) // capacity
        per_wave = _blend(c.estimate.latency_seconds, c.estimate.latency_confidence, latency_prior)
        if tokens is not None and tps_prior is not None:
            tps = _blend(c.estimate.tokens_per_second, c.estimate.throughput_confidence, tps_prior)
            if tps > 0:
                per_wave = max(per_wave, tokens / tps)
        scored.append(Scored(c, waves * per_wave))
    return sorted(scored, key=lambda s: s.order)


def choose(
    candidates: Sequence[Candidate],
    *,
    tokens: int | None = None,
    affinity: bytes | None = None,
    affinity_slack: float = AFFINITY_SLACK,
) -> EngineRoute | None:
    """The route for one request, or None when no route is admissible.

    An affinity key may pick any route within ``affinity_slack`` (the policy's
    ``affinity_route_slack``, a fraction) of the best estimate."""
    open_routes = [c for c in candidates if c.admissible]
    if len(open_routes) <= 1:  # nothing to rank (the usual case: one replica)
        return open_routes[0].route if open_routes else None
    best_class = min(c.route.protection_class for c in open_routes)
    ranked = score([c for c in open_routes if c.route.protection_class == best_class], tokens)
    if affinity is not None and len(ranked) > 1:
        bound = ranked[0].estimate_seconds * (1.0 + max(0.0, affinity_slack))
        near = {s.candidate.engine_id: s for s in ranked if s.estimate_seconds <= bound}
        picked = rendezvous_pick(affinity, sorted(near))
        if picked is not None:
            return near[picked].candidate.route
    return ranked[0].candidate.route


def choose_route(
    routes: Sequence[EngineRoute],
    active: object,
) -> EngineRoute | None:
    """Compatibility wrapper: load-only choice among ``routes`` (``active(route) -> int``)."""
    assert callable(active)
    return choose([Candidate(r, active=int(active(r))) for r in routes])
