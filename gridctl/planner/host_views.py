"""Per-host facts computed once per plan from one observation.

A ``HostView`` answers the questions every filter and scorer asks about a host
without rescanning its residencies: may it take new work at all (lifecycle,
heartbeat freshness, lifecycle authority), how much memory the two ledgers
start from, which models are live there, which artifacts are cached, and how
often a model has failed to start there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Never

from gridctl.domain import (
    ControllerPolicy,
    HostResources,
    HostSnapshot,
    HostState,
    LearnedOnHost,
    ModelProfile,
    Ownership,
    Residency,
    ResidencyState,
)
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.runtimes import accounted_memory

UNCONFIGURED_PRIORITY = -1
SATISFYING_STATES = frozenset(
    {ResidencyState.READY, ResidencyState.LOADING, ResidencyState.WARMING}
)
UNMANAGED_HOST_KINDS = frozenset({"external-endpoint", "external"})
# ``HostState.admits_new_work`` as a tuple: asked once per host, without a property call
_ADMITTING = tuple(state for state in HostState if state.admits_new_work)
# Members read per host and residency, as module names: reading one through its Enum class
# runs ``EnumType.__getattr__``, about 900 instructions on Python 3.11 (measured), a module
# global a few dozen.
_THROTTLED = HostState.THROTTLED
_CACHED = ResidencyState.CACHED
_MANAGED = Ownership.MANAGED


@dataclass(frozen=True, slots=True)
class LiveResidency:
    """A memory-occupying residency with what the planner charges for it."""

    residency: Residency
    memory_mb: int
    priority: int
    configured: bool

    @property
    def model_id(self) -> str:
        return self.residency.model_id

    @property
    def managed(self) -> bool:
        return self.residency.ownership is _MANAGED

    @property
    def removable(self) -> bool:
        """Only managed, unpinned work may ever be drained by a plan."""
        return self.residency.actuatable


class HostView(NamedTuple):
    """Everything the planner needs to know about one host, computed once.

    Immutable; a named tuple rather than a frozen dataclass because a plan builds one
    per host and a frozen dataclass of this many fields is several times slower to make.
    """

    host: HostSnapshot
    admission: Rejection | None  # why no new work at all, or None
    raw_mb: int  # allocatable after reserve and thermal derating
    new_capacity_mb: int  # what new placement may use (throttled fraction)
    unmanaged_mb: int  # external workloads, consumed first
    live_managed_mb: int
    live: tuple[LiveResidency, ...]
    live_models: frozenset[str]
    fixed_mb: int  # live managed memory that no plan may remove (pinned residencies)
    fixed_models: frozenset[str]  # models no plan may remove (unmanaged or pinned)
    cached: frozenset[tuple[str, str | None]]
    cached_digests: Mapping[str, frozenset[str | None]]
    failures: Mapping[str, int]
    active_requests: int
    by_model: Mapping[str, tuple[LiveResidency, ...]]
    learned: Mapping[str, LearnedOnHost]  # per model: learned timings and speed
    shape: tuple[object, ...]  # every fact static eligibility reads, except the host id
    score_shape: tuple[object, ...]  # every host fact static scoring reads

    @property
    def host_id(self) -> str:
        return self.host.host_id

    @property
    def domain(self) -> str:
        return self.host.resources.failure_domain

    @property
    def throttled(self) -> bool:
        return self.host.state is _THROTTLED

    def has_exact_artifact(self, profile: ModelProfile) -> bool:
        """Cached weights of exactly the profile's artifact (any digest when none is declared)."""
        digests = self.cached_digests.get(profile.name)
        if digests is None:
            return False
        sha = profile.artifact.sha256
        return sha is None or sha in digests

    def residencies_of(self, model_id: str) -> tuple[LiveResidency, ...]:
        return self.by_model.get(model_id, ())


def admission_rejection(
    host: HostSnapshot, now: float, policy: ControllerPolicy
) -> Rejection | None:
    """Lifecycle, heartbeat and authority gates: only fresh accepting/throttled managed hosts."""
    if host.state not in _ADMITTING:
        return Rejection(RejectionCode.HOST_STATE, f"host is {host.state.value}")
    if host.last_heartbeat is None:
        return Rejection(RejectionCode.HEARTBEAT_MISSING, "no heartbeat")
    age = now - host.last_heartbeat
    if age > policy.heartbeat_stale_seconds:
        return Rejection(RejectionCode.HEARTBEAT_STALE, f"heartbeat {age:.0f}s old")
    if -age > policy.heartbeat_future_skew_seconds:
        return Rejection(RejectionCode.HEARTBEAT_FUTURE, f"heartbeat {-age:.0f}s in the future")
    if host.kind in UNMANAGED_HOST_KINDS:
        return Rejection(RejectionCode.HOST_UNMANAGED, f"host kind {host.kind} is inventory only")
    return None


# Shared by every host with nothing on it: views are read-only, so one empty value serves all.
_NO_NAMES: frozenset[str] = frozenset()
_NO_CACHED: frozenset[tuple[str, str | None]] = frozenset()
_NO_ENTRIES: Mapping[str, Never] = {}


def build_host_view(
    host: HostSnapshot,
    profiles: Mapping[str, ModelProfile],
    now: float,
    policy: ControllerPolicy,
    shapes: dict[tuple[object, ...], tuple[object, ...]] | None = None,
) -> HostView:
    """The host's view. ``shapes`` (one dict per fleet) shares equal eligibility shapes
    between hosts: a shape is only ever compared, so an equal value serves as well."""
    res = host.resources
    raw = int(res.capacity_mb * res.thermal_derate) - res.reserved_mb
    if not raw > 0:
        raw = 0  # max(0, raw), without the builtin's ~1,300-instruction call (per host)
    throttled = host.state is _THROTTLED
    new_capacity = int(raw * res.throttle_fraction) if throttled else raw
    key = (
        res.runtimes,
        res.qualified_runtimes,
        res.backends,
        res.allowed_data_tiers,
        res.tags,
        res.allowed_models,
        res.denied_models,
        res.gpu_count,
        res.gpu_memory_mb,
    )
    shape = None if shapes is None else shapes.get(key)
    if shape is None:
        shape = (
            _sorted(res.runtimes),
            _sorted(res.backends),
            _sorted(res.allowed_data_tiers),
            _sorted(res.tags),
            _sorted(res.allowed_models),
            _sorted(res.denied_models),
            res.gpu_count,
            res.gpu_memory_mb,
            # last, so the positions the eligibility classes read stay where they were
            None if res.qualified_runtimes is None else _sorted(res.qualified_runtimes),
        )
        if shapes is not None:
            shapes[key] = shape
    if not (host.residencies or host.cached or host.failed_attempts or host.learned):
        # an empty host (most of a new fleet); built positionally, in field order:
        # keywords cost about 9,000 more instructions per host
        return tuple.__new__(
            HostView,
            (
                host,
                admission_rejection(host, now, policy),
                raw,
                new_capacity,
                res.external_mb,  # unmanaged_mb
                0,  # live_managed_mb
                (),  # live
                _NO_NAMES,  # live_models
                0,  # fixed_mb
                _NO_NAMES,  # fixed_models
                _NO_CACHED,  # cached
                _NO_ENTRIES,  # cached_digests
                _NO_ENTRIES,  # failures
                0,  # active_requests
                _NO_ENTRIES,  # by_model
                _NO_ENTRIES,  # learned
                shape,
                score_shape(res, throttled, 0),
            ),
        )
    live: list[LiveResidency] = []
    unmanaged_rows = 0
    managed = 0
    fixed = 0
    fixed_models: set[str] = set()
    cached = {(c.model_id, c.artifact_sha256) for c in host.cached} if host.cached else set()
    active = 0
    for residency in host.residencies:
        active += residency.active_requests
        # a live or cached residency proves its weights are on disk
        if residency.state in SATISFYING_STATES or residency.state is _CACHED:
            cached.add((residency.model_id, residency.artifact_sha256))
        if not residency.state.occupies_memory:
            continue
        profile = profiles.get(residency.model_id)
        memory = accounted_memory(profile, residency, host)
        priority = profile.priority if profile is not None else UNCONFIGURED_PRIORITY
        live.append(LiveResidency(residency, memory, priority, profile is not None))
        if residency.ownership is _MANAGED:
            managed += memory
            if residency.pinned:
                fixed += memory
                fixed_models.add(residency.model_id)
        else:
            unmanaged_rows += memory
            fixed_models.add(residency.model_id)
    by_model: dict[str, tuple[LiveResidency, ...]] = {}
    ordered: tuple[LiveResidency, ...] = ()
    if live:
        ordered = tuple(
            sorted(live, key=lambda r: (r.model_id, r.residency.state.value, r.memory_mb))
        )
        for row in ordered:
            by_model[row.model_id] = (*by_model.get(row.model_id, ()), row)
    return HostView(
        host=host,
        admission=admission_rejection(host, now, policy),
        raw_mb=raw,
        new_capacity_mb=new_capacity,
        unmanaged_mb=max(res.external_mb, unmanaged_rows),
        live_managed_mb=managed,
        live=ordered,
        live_models=frozenset(by_model),
        fixed_mb=fixed,
        fixed_models=frozenset(fixed_models),
        cached=frozenset(cached),
        cached_digests={
            model: frozenset(sha for m, sha in cached if m == model) for model, _ in cached
        },
        failures=dict(host.failed_attempts),
        active_requests=active,
        by_model=by_model,
        learned={row.model_id: row for row in host.learned},
        shape=shape,
        score_shape=score_shape(res, throttled, active),
    )


def score_shape(res: HostResources, throttled: bool, active: int) -> tuple[object, ...]:
    """Every host fact static scoring reads (``HostView.score_shape``)."""
    return (
        res.measured_tokens_per_second,
        res.memory_bandwidth_gbps,
        res.compute_gflops,
        res.measured_latency_ms,
        res.host_priority,
        throttled,
        active,
    )


def _sorted(values: tuple[str, ...]) -> tuple[str, ...]:
    """``tuple(sorted(values))``, without the copy when there is nothing to sort."""
    if type(values) is tuple and len(values) < 2:
        return values
    return tuple(sorted(values))
