"""Soft preferences: bounded, named score components for one (model, host).

Higher is better. Bonuses: an existing live residency, cached exact weights,
a failure domain the model does not use yet, measured throughput (or, before
any measurement, hardware priors), and best fit. Costs: host load, measured
latency, host priority, cold start, throttling, persisted failed attempts and
the scarcity penalty for a flexible model on a host a constrained model needs.
Throughput and hardware are multiplied by the hot-demand performance factor
(at most ``policy.performance_factor_max``); the ready and cached bonuses stay
larger than the unmultiplied speed terms, so light demand keeps cached hosts.

Every component is bounded, so ``STATIC_BOUND``-style pruning is exact: the
dynamic part can add at most ``DYNAMIC_MAX``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat

from gridctl.domain import (
    ControllerPolicy,
    HostResources,
    LearnedOnHost,
    ModelProfile,
    ResidencyState,
)
from gridctl.planner.host_views import HostView, LiveResidency
from gridctl.planner.startup_paths import start_seconds

EXISTING_READY = 100.0
EXISTING_STARTING = 80.0
CACHED_WEIGHTS = 40.0
FAILURE_DOMAIN = 30.0
THROUGHPUT = 10.0
HARDWARE = 7.5
BEST_FIT = 10.0
LOAD_MAX = 10.0
LATENCY_MAX = 10.0
HOST_PRIORITY_MAX = 10.0
COLD_START_MAX = 15.0
THROTTLED = 15.0
FAILED_ATTEMPTS = 100.0
SCARCITY = 20.0

DYNAMIC_MAX = FAILURE_DOMAIN + BEST_FIT

Components = tuple[tuple[str, float], ...]


# ``round(x, 6)`` is a decimal conversion (about 3,400 instructions); a plan rounds the
# same few values again and again (a cold 64x32 plan over 500 times), so roundings are
# kept, keyed by the float itself: exact, as only non-zero floats are kept (zeros of
# either sign and ints compare equal to other keys). Bounded (cleared when full) and
# cleared at the start of every plan (``forget_roundings``), so no plan is faster for
# the plans before it.
_ROUNDED: dict[float, float] = {}
_ROUNDED_MAX = 1 << 14


def forget_roundings() -> None:
    """Start a plan with no roundings kept: its cost is its own work, whatever ran before."""
    _ROUNDED.clear()


def round6(value: float) -> float:
    """``round(value, 6)``, memoised."""
    found = _ROUNDED.get(value)
    if found is None:
        if value.__class__ is not float or not value:
            return round(value, 6)
        if len(_ROUNDED) >= _ROUNDED_MAX:
            _ROUNDED.clear()
        # ``round(value, 6)`` bit for bit, mostly without its decimal conversion (about
        # 3,300 instructions, this path about 1,200): ``round`` returns the double nearest
        # to ``n / 10**6``, ``n`` the integer nearest to the exact ``value * 10**6``. The
        # float product is within 2**-23 of the exact one below ``_SCALED_MAX``; adding and
        # taking away ``_ROUND_TO_INTEGER`` rounds it to the nearest integer (ties to
        # even), exactly, as does ``scaled - whole`` (the two are within a factor of two,
        # or ``whole`` is 0). Farther than ``_HALF_MARGIN`` from a half, the exact product
        # rounds to the same ``whole``, and ``whole / 1e6`` is the correctly rounded
        # quotient. A zero ``whole`` would lose a negative value's sign: it, and
        # near-halves, take ``round`` itself.
        scaled = value * 1e6
        if -_SCALED_MAX < scaled < _SCALED_MAX:
            whole = scaled + _ROUND_TO_INTEGER - _ROUND_TO_INTEGER
            gap = scaled - whole
            if whole and -_HALF_MARGIN < gap < _HALF_MARGIN:
                found = _ROUNDED[value] = whole / 1e6
                return found
        found = _ROUNDED[value] = round(value, 6)
    return found


_SCALED_MAX = 2147483648.0  # 2**31: a double's half ulp there is 2**-23
_ROUND_TO_INTEGER = 6755399441055744.0  # 1.5 * 2**52: doubles beyond it are integers
_HALF_MARGIN = 0.499999


_r = round6


@dataclass(frozen=True, slots=True)
class FleetNorms:
    """Fleet-wide maxima that normalise speed terms into [0, 1]."""

    tokens_per_second: float
    bandwidth_gbps: float
    compute_gflops: float
    # per model: the fastest speed measured for that model anywhere (never another's)
    model_tokens_per_second: Mapping[str, float]

    @classmethod
    def of(cls, views: Sequence[HostView]) -> FleetNorms:
        def top(values: list[float | None]) -> float:
            present = [v for v in values if v is not None and v > 0]
            return max(present) if present else 0.0

        res = [v.host.resources for v in views]
        per_model: dict[str, float] = {}
        for view in views:
            for model_id, row in view.learned.items():
                if row.tokens_per_second is not None and row.tokens_per_second > 0:
                    per_model[model_id] = max(per_model.get(model_id, 0.0), row.tokens_per_second)
        return cls(
            tokens_per_second=top([r.measured_tokens_per_second for r in res]),
            bandwidth_gbps=top([r.memory_bandwidth_gbps for r in res]),
            compute_gflops=top([r.compute_gflops for r in res]),
            model_tokens_per_second=per_model,
        )

    def model_norm(self, model_id: str) -> float:
        return self.model_tokens_per_second.get(model_id, 0.0)


class ScarcityIndex:
    """Fleet-wide topology option value: how much a host is needed by models more
    constrained than the one being placed, queried per flexible model in O(log n).

    Every enabled model (``max_replicas`` > 0) with eligible hosts ``E`` claims
    ``max(target, 1)`` model slots (a model with no demand yet keeps its option
    open). Its *slot pressure* is the share of the model slots on ``E`` that the
    models at least as constrained as it claim there: a model ``d`` claims
    ``want_d * |E_d & E| / |E_d|`` of its slots on ``E`` (a direct eligible-set
    intersection), and ``pressure = min(1, claims / slots(E))``, a host without a
    per-host model limit counting one slot per enabled model. Models sharing one
    eligible set are summed once per set.

    The host-to-model index keeps, for every host class (hosts every model
    judges alike, see ``StaticEligibility``), the (eligible-host count,
    pressure) of each enabled model that may run there, sorted by count with
    running maxima, so "the largest pressure of a model more constrained than
    mine" is one bisection. A model with fewer eligible hosts always has a
    destination outside the constrained set, so the penalty only ever falls on
    a model with another valid destination.
    """

    def __init__(
        self,
        eligible: Mapping[str, Collection[str]],
        targets: Mapping[str, int],
        host_class: Mapping[str, int],
        class_reps: Sequence[str],
        slots: Mapping[str, int] | None = None,
        ceilings: Mapping[str, int] | None = None,
    ) -> None:
        enabled_models = sorted(
            m for m in eligible if eligible[m] and (ceilings is None or ceilings.get(m, 0) > 0)
        )
        unlimited = max(1, len(enabled_models))
        # models grouped by eligible set: (set, summed want), in first-model order
        groups: dict[frozenset[str], float] = {}
        for model in enabled_models:
            hosts = frozenset(eligible[model])
            ceiling = 1 if ceilings is None else ceilings[model]
            groups[hosts] = groups.get(hosts, 0.0) + float(max(targets.get(model, 0), ceiling))
        # model slots per host, a host without a per-host limit counting one per enabled
        # model; capacities are sums of ints, exact in any order (summed in C: a generator
        # over sorted hosts cost about 250 instructions per host and eligible set, measured)
        counts = None if slots is None else {h: n or unlimited for h, n in slots.items()}
        pressure: dict[frozenset[str], float] = {}
        for hosts in groups:
            if counts is None:
                capacity = len(hosts)
            else:
                capacity = sum(map(counts.get, hosts, repeat(unlimited)))
            claims = 0.0
            for other, want in groups.items():
                if len(other) <= len(hosts):
                    claims += want * len(other & hosts) / len(other)
            pressure[hosts] = _r(min(1.0, claims / capacity)) if capacity else 1.0
        demanded: list[tuple[int, float, frozenset[str]]] = []
        for hosts, value in pressure.items():
            if value > 0:
                demanded.append((len(hosts), value, hosts))
        self._class = host_class
        self._counts: list[list[int]] = []
        self._running: list[list[float]] = []
        for rep in class_reps:
            entries = sorted((count, need) for count, need, hosts in demanded if rep in hosts)
            best = 0.0
            running: list[float] = []
            for _, need in entries:
                best = max(best, need)
                running.append(best)
            self._counts.append([count for count, _ in entries])
            self._running.append(running)

    def need(self, host_id: str, my_count: int) -> float:
        """Largest pressure on ``host_id`` of a model with fewer eligible hosts than
        ``my_count``."""
        index = self._class.get(host_id)
        if index is None or my_count <= 1:
            return 0.0  # no alternative destination: never penalised
        counts = self._counts[index]
        if not counts:
            return 0.0
        found = bisect_left(counts, my_count)
        return self._running[index][found - 1] if found > 0 else 0.0


def static_components(
    profile: ModelProfile,
    view: HostView,
    incumbent: LiveResidency | None,
    norms: FleetNorms,
    factor: float,
    scarcity_need: float,
    policy: ControllerPolicy,
) -> Components:
    """The parts of the score that do not change while the plan fills the fleet.

    Each part is rounded as it is added, and ``min`` of two floats is written as a
    conditional (a builtin call costs about 1,300 instructions on CPython 3.11): a
    cold 64x32 plan scores about 34 shapes, and this saves about 0.3 M of its
    instructions (measured)."""
    name = profile.name
    parts: list[tuple[str, float]] = []
    res = view.host.resources
    learned = view.learned.get(name) if view.learned else None
    cached = False
    if incumbent is not None:
        ready = incumbent.residency.state is ResidencyState.READY
        parts.append(("existing_residency", EXISTING_READY if ready else EXISTING_STARTING))
    elif view.cached_digests and view.has_exact_artifact(profile):
        cached = True
        parts.append(("cached_weights", CACHED_WEIGHTS))
    _add_speed_parts(parts, name, learned, res, norms, factor)
    if view.active_requests:
        load = 2.0 * view.active_requests
        parts.append(("host_load", _r(-(load if load < LOAD_MAX else LOAD_MAX))))
    latency_ms = res.measured_latency_ms
    if learned is not None and learned.latency_ms is not None:
        latency_ms = learned.latency_ms  # this model's own latency on this host
    if latency_ms:
        latency = latency_ms / 200.0
        parts.append(("latency", _r(-(latency if latency < LATENCY_MAX else LATENCY_MAX))))
    if res.host_priority:
        parts.append(("host_priority", _r(-HOST_PRIORITY_MAX * res.host_priority / 1000.0)))
    if incumbent is None:
        points = start_seconds(profile, learned, cached) / 20.0  # ``cold_start_points``
        parts.append(("cold_start", _r(-(points if points < COLD_START_MAX else COLD_START_MAX))))
    if view.throttled:
        parts.append(("throttled", _r(-THROTTLED)))
    failures = view.failures.get(name, 0)
    if failures:
        share = min(policy.failed_attempt_penalty_max, failures * policy.failed_attempt_penalty)
        parts.append(("failed_attempts", _r(-FAILED_ATTEMPTS * share)))
    if scarcity_need and incumbent is None:
        parts.append(("scarcity", _r(-SCARCITY * scarcity_need)))
    return tuple(parts)


def _hardware_share(res: HostResources, norms: FleetNorms) -> float:
    prior = 0.0
    if res.memory_bandwidth_gbps and norms.bandwidth_gbps:
        prior += 0.5 * res.memory_bandwidth_gbps / norms.bandwidth_gbps
    if res.compute_gflops and norms.compute_gflops:
        prior += 0.5 * res.compute_gflops / norms.compute_gflops
    return prior


def _add_speed_parts(
    parts: list[tuple[str, float]],
    model_id: str,
    learned: LearnedOnHost | None,
    res: HostResources,
    norms: FleetNorms,
    factor: float,
) -> None:
    """Speed measured for this model on this host, weighted by its confidence, with the
    host's declared measurement or hardware prior covering the rest; another model's
    measurements never enter (``learned``: what was learned of this model here)."""
    confidence = 0.0
    if learned is not None and learned.tokens_per_second:
        norm = norms.model_norm(model_id)
        if norm:
            confidence = min(1.0, max(0.0, learned.speed_confidence))
            if confidence > 0:
                share = learned.tokens_per_second / norm
                parts.append(("model_throughput", _r(THROUGHPUT * share * factor * confidence)))
                if confidence >= 1.0:
                    return
    rest = 1.0 - confidence
    if res.measured_tokens_per_second and norms.tokens_per_second:
        share = res.measured_tokens_per_second / norms.tokens_per_second
        parts.append(("measured_throughput", _r(THROUGHPUT * share * factor * rest)))
    else:
        prior = _hardware_share(res, norms)
        if prior:
            parts.append(("hardware_prior", _r(HARDWARE * prior * factor * rest)))


def cold_start_points(startup_seconds: float) -> float:
    """The cold-start cost of a start path: a point per 20 seconds, at most ``COLD_START_MAX``."""
    return min(COLD_START_MAX, startup_seconds / 20.0)


def best_fit(free_after_mb: int, capacity_mb: int) -> float:
    """How snugly the replica fills the host (``capacity_mb`` > 0): 0 empty, 10 full."""
    # ``_r(BEST_FIT * min(1.0, max(0.0, tightness)))``, without the calls (a hot path)
    tightness = 1.0 - (free_after_mb if free_after_mb > 0 else 0) / capacity_mb
    if not tightness > 0.0:
        tightness = 0.0
    elif tightness > 1.0:
        tightness = 1.0
    return round6(BEST_FIT * tightness)


def dynamic_components(new_domain: bool, free_after_mb: int, capacity_mb: int) -> Components:
    """Failure-domain spread and best fit, which change as the plan fills hosts."""
    parts: list[tuple[str, float]] = []
    if new_domain:
        parts.append(("failure_domain", FAILURE_DOMAIN))
    if capacity_mb > 0:
        parts.append(("best_fit", best_fit(free_after_mb, capacity_mb)))
    return tuple(parts)


def score_with_dynamic(
    static_sum: float, new_domain: bool, free_after_mb: int, capacity_mb: int
) -> float:
    """``total(static + dynamic_components(...))`` from the unrounded static sum.

    The dynamic parts are added in the same order, so the value is identical.
    """
    # ``best_fit`` and ``round6``'s memo read inline: the class search asks this for
    # every class it prunes, and the two calls were about a third of its cost
    value = static_sum
    if new_domain:
        value += FAILURE_DOMAIN
    if capacity_mb > 0:
        tightness = 1.0 - (free_after_mb if free_after_mb > 0 else 0) / capacity_mb
        if not tightness > 0.0:
            tightness = 0.0
        elif tightness > 1.0:
            tightness = 1.0
        fit = BEST_FIT * tightness
        rounded = _ROUNDED.get(fit)
        value += round6(fit) if rounded is None else rounded
    rounded = _ROUNDED.get(value)
    return round6(value) if rounded is None else rounded


def total(components: Components) -> float:
    return _r(sum(value for _, value in components))
