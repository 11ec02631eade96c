"""How many replicas each model should have, and why.

From the short-horizon forecast (``ModelDemand``) the target adds demand
headroom over offered concurrency at the profile's target utilisation, asks
for one replica beyond the ready set under queue, latency or error pressure,
projects a rising trend across the fastest eligible load-plus-warm path
(confidence-weighted, capped at the policy's horizon and multiplier), ignores
falling trends, keeps recently ready replicas through the scale-down cooldown
and respects the profile's bounds. Each replica gets a demand class: pinned,
baseline, direct, then inferred-only.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from gridctl.domain import ControllerPolicy, DemandClass, ModelDemand, ModelProfile

ERROR_PRESSURE_RATE = 0.05  # error share that counts as service harm on its own
_EPSILON = 1e-9
# The demand classes ``class_of`` returns, as module names: the rounds ask it per model and
# replica, and reading a member through its Enum class runs ``EnumType.__getattr__``
# (about 900 instructions a read on Python 3.11, measured), a module global a few dozen.
_PINNED = DemandClass.PINNED
_BASELINE = DemandClass.BASELINE
_DIRECT = DemandClass.DIRECT
_INFERRED = DemandClass.INFERRED

# The target is computed once per model per plan. Its clamps are written as
# conditionals, each returning what ``min``/``max`` would (the first argument on
# a tie): a call of the builtin costs about 1,300 instructions in CPython 3.11
# (argument parsing), a conditional about 120. Measured with valgrind on the
# benchmark's cold 64x32 plan: 0.97 -> 0.5 M instructions for its 32 targets.

Harm = tuple[float, float, float, float, float]
_new_tuple = tuple.__new__


class ReplicaTarget(NamedTuple):
    """The target of one model: replica count, classes and the harm that orders ties.

    Immutable; a named tuple rather than a frozen dataclass because a plan builds one per
    model and a frozen dataclass of this many fields costs about twice as much to make.
    """

    model_id: str
    replicas: int
    pinned: int
    baseline: int
    direct: int  # replicas below this index (and above baseline) are direct demand
    reason: str
    harm: Harm
    performance_factor: float
    offered_concurrency: float
    # replicas only the scale-down cooldown keeps (beyond what any demand asks): an idle
    # one yields its host to direct or baseline demand of the same priority
    cooldown_held: int = 0

    def class_of(self, index: int) -> DemandClass:
        if index < self.pinned:
            return _PINNED
        if index < self.baseline:
            return _BASELINE
        if index < self.direct:
            return _DIRECT
        return _INFERRED

    @property
    def first_class(self) -> DemandClass | None:
        return self.class_of(0) if self.replicas > 0 else None


class FleetFacts(NamedTuple):
    """What the target needs to know about the fleet for one model (a named tuple, as
    ``ReplicaTarget``)."""

    ready: int  # healthy ready replicas on eligible hosts
    recent_ready: int  # of those, used or loaded within the scale-down cooldown
    startup_seconds: float | None  # fastest eligible load-plus-warm path
    # the narrowest live batch width the ready single-model engines report (0 = none
    # reported): it may prove a wider batch than the profile's replica_concurrency
    live_width: int = 0


def lookahead_factor(
    demand: ModelDemand, startup_seconds: float | None, policy: ControllerPolicy
) -> float:
    """Rate multiplier for a rising trend over the cold-start horizon (>= 1, <= the cap)."""
    rate = demand.requests_per_minute
    if demand.trend_per_minute <= 0 or rate <= 0 or startup_seconds is None:
        return 1.0  # a negative trend never accelerates scale-down
    horizon = min(startup_seconds, policy.lookahead_max_seconds)
    confidence = min(1.0, max(0.0, demand.confidence))
    projected = rate + demand.trend_per_minute * (horizon / 60.0) * confidence
    return min(projected, rate * policy.lookahead_max_multiplier) / rate


def direct_concurrency(profile: ModelProfile, demand: ModelDemand) -> float:
    """Offered concurrency: arrival rate x measured service time + queued work."""
    if demand.offered_concurrency > 0:
        return demand.offered_concurrency
    arrivals = demand.requests_per_minute / 60.0
    return arrivals * profile.expected_service_seconds + demand.queue_depth


def under_pressure(profile: ModelProfile, demand: ModelDemand) -> bool:
    slo = profile.latency_slo_ms
    slow = slo is not None and demand.p95_latency_ms is not None and demand.p95_latency_ms > slo
    return demand.queue_depth > 0 or slow or demand.error_rate >= ERROR_PRESSURE_RATE


def replicas_for(concurrency: float, per_replica: float, headroom: float) -> int:
    if concurrency <= 0:
        return 0
    replicas = math.ceil(concurrency * headroom / per_replica - _EPSILON)
    return replicas if replicas > 1 else 1  # max(1, replicas)


def harm_of(profile: ModelProfile, demand: ModelDemand | None, offered: float) -> Harm:
    """Attributable service harm, most telling first: queue, SLO ratio, errors, load, rate
    (``offered``: the demand's ``direct_concurrency``)."""
    if demand is None:
        return (0.0, 0.0, 0.0, 0.0, 0.0)
    ratio = 0.0
    if profile.latency_slo_ms and demand.p95_latency_ms is not None:
        ratio = demand.p95_latency_ms / profile.latency_slo_ms
    rate = demand.requests_per_minute or demand.correlated_requests_per_minute
    return (
        demand.queue_depth,
        ratio,
        demand.error_rate,
        offered,
        rate,
    )


def replica_target(
    profile: ModelProfile,
    demand: ModelDemand | None,
    facts: FleetFacts,
    policy: ControllerPolicy,
) -> ReplicaTarget:
    width = profile.replica_concurrency
    proven = facts.live_width > width
    if proven:
        width = facts.live_width  # a ready engine proved a wider batch than declared
    per_replica = width * profile.target_utilization
    if not per_replica > _EPSILON:
        per_replica = _EPSILON  # max(_EPSILON, per_replica)
    reasons: list[str] = []
    direct = 0
    inferred = 0
    concurrency = 0.0
    offered = 0.0  # direct_concurrency: the concurrency and the harm read it
    if demand is not None:
        offered = direct_concurrency(profile, demand)
        # one definition of direct demand (ModelDemand.has_direct_evidence): offered
        # concurrency with no request, queue or error signal behind it is not direct, so
        # it can neither place a direct replica nor authorise a preemption
        if demand.has_direct_evidence:
            # ``lookahead_factor`` is 1.0 without a rising trend: not called then
            rising = not demand.trend_per_minute <= 0
            ahead = lookahead_factor(demand, facts.startup_seconds, policy) if rising else 1.0
            concurrency = offered * ahead
            direct = replicas_for(concurrency, per_replica, policy.demand_headroom)
            if direct and proven:
                reasons.append("live batch width %d" % width)  # noqa: UP031
            if direct:
                # ``%`` writes what ``f"{concurrency:.2f}"`` writes, about 700 instructions
                # fewer (measured: no format-spec parse or ``__format__`` lookup)
                reasons.append("offered concurrency %.2f" % concurrency)  # noqa: UP031
            if under_pressure(profile, demand) and direct < facts.ready + 1:
                direct = facts.ready + 1
                reasons.append("queue/latency/error pressure")
        if demand.correlated_requests_per_minute > 0:
            rate = demand.correlated_requests_per_minute
            if demand.observed_peak_requests_per_minute > 0:
                cap = demand.observed_peak_requests_per_minute
                peak = cap * policy.inferred_demand_peak_multiplier
                if peak < rate:
                    rate = peak  # min(rate, peak)
            inferred_concurrency = rate / 60.0 * profile.expected_service_seconds
            inferred = replicas_for(inferred_concurrency, per_replica, policy.demand_headroom)
            if inferred > direct:
                reasons.append("correlated demand")
    recent = facts.recent_ready
    held = 0
    if recent > direct and recent > inferred:  # recent > max(direct, inferred)
        # hysteresis keeps recent replicas desired, but it is no request signal:
        # those replicas never preempt (they rank with inferred demand)
        held = recent - (inferred if inferred > direct else direct)
        inferred = recent
        reasons.append("scale-down cooldown")
    least = profile.min_replicas
    most = profile.max_replicas
    wanted = inferred if inferred > direct else direct
    if least > wanted:
        wanted = least  # wanted = max(direct, inferred, least)
    replicas = most if most < wanted else wanted
    if least > replicas:
        replicas = least  # replicas = max(min(wanted, most), least)
    if least and least >= wanted:
        reasons.append(f"min_replicas {least}")
    if wanted > most:
        reasons.append(f"capped at max_replicas {most}")
    pinned = 0
    if profile.pins:
        pinned = replicas = len(profile.pins)
        reasons = [f"pinned to {', '.join(profile.pins)}"]
    factor = concurrency / per_replica
    if not factor > 1.0:
        factor = 1.0
    if not factor < policy.performance_factor_max:
        factor = policy.performance_factor_max  # min(cap, max(1.0, factor))
    baseline = replicas if replicas < least else least
    if not baseline > pinned:
        baseline = pinned  # max(pinned, min(least, replicas))
    direct = least if least > direct else direct
    if replicas < direct:
        direct = replicas
    if not direct > pinned:
        direct = pinned  # max(pinned, min(max(direct, least), replicas))
    # positional, in field order, straight into the tuple: keywords cost about 4,000
    # instructions more per model, the named tuple's generated ``__new__`` about 1,000
    return _new_tuple(
        ReplicaTarget,
        (
            profile.name,  # model_id
            replicas,
            pinned,
            baseline,
            direct,
            "; ".join(reasons) if reasons else "no demand",  # reason
            harm_of(profile, demand, offered),  # harm
            factor,  # performance_factor
            concurrency,  # offered_concurrency
            held if direct == 0 and least == 0 else 0,  # cooldown_held
        ),
    )
