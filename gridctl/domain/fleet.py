"""What the fleet looks like: hosts, their resources and residencies, and demand.

These are observations, frozen at one instant (``FleetSnapshot.now``). The
planner reads them and never mutates them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gridctl.domain.profiles import CANONICAL_OMIT_NONE
from gridctl.domain.states import DataTier, HostState, Ownership, ResidencyState

ALL_DATA_TIERS: tuple[DataTier, ...] = tuple(DataTier)


@dataclass(frozen=True)
class HostResources:
    """Capacity and policy facts a host reports (or a ``Fleet`` document declares)."""

    capacity_mb: int
    reserved_mb: int = 0
    external_mb: int = 0  # memory used by unmanaged workloads right now
    thermal_derate: float = 1.0  # fraction of capacity usable after thermal derating
    throttle_fraction: float = 1.0  # fraction offered for new placement while throttled
    runtimes: tuple[str, ...] = ("llama.cpp",)
    # runtimes with passing qualification evidence; None = not claimed (all of ``runtimes``)
    qualified_runtimes: tuple[str, ...] | None = None
    backends: tuple[str, ...] = ()
    gpu_count: int | None = 0  # None = the host cannot tell (no NVML), never a guessed 0
    gpu_memory_mb: int | None = 0
    failure_domain: str = "default"
    tags: tuple[str, ...] = ()
    allowed_models: tuple[str, ...] = ()  # empty = any
    denied_models: tuple[str, ...] = ()
    allowed_data_tiers: tuple[DataTier, ...] = ALL_DATA_TIERS
    max_models: int = 0  # 0 = unlimited
    disk_free_mb: int | None = None  # None = unknown (never authorises a transfer)
    disk_total_mb: int | None = None
    memory_bandwidth_gbps: float | None = None
    compute_gflops: float | None = None
    host_priority: int = 0
    measured_tokens_per_second: float | None = None
    measured_latency_ms: float | None = None


@dataclass(frozen=True)
class Residency:
    """One model's presence on one host."""

    model_id: str
    memory_mb: int
    state: ResidencyState
    artifact_sha256: str | None = None
    runtime: str | None = None  # None = not reported; account the largest matching estimate
    loaded_at: float | None = None
    last_used_at: float | None = None
    ownership: Ownership = Ownership.MANAGED
    pinned: bool = False
    active_requests: int = 0
    # a ready single-model engine's live batch width (its slots); None = not reported, or
    # a multi-model engine, whose shared node-wide limit is never credited to one model
    max_concurrency: int | None = None
    # the engine coordinates a split of the model under this coordinator term (its
    # layers are on the stage hosts, ``ObservedStage``); None = a whole replica
    split_term: int | None = field(default=None, metadata=CANONICAL_OMIT_NONE)

    @property
    def actuatable(self) -> bool:
        """Only managed, unpinned residencies may be drained or unloaded by gridctl."""
        return self.ownership is Ownership.MANAGED and not self.pinned


def planned_last_use(reported: float | None, watermark: float | None) -> float | None:
    """A residency's last use as the planner sees it: the later of what its node reported
    and the router's model-wide last-use watermark (any replica of the model serving a
    request keeps every replica of it recent); None when neither is known."""
    return max(reported or 0.0, watermark or 0.0) or None


@dataclass(frozen=True)
class CachedArtifact:
    """Weights present on a host's disk (no process, no memory)."""

    model_id: str
    artifact_sha256: str | None = None
    size_mb: int | None = None
    provenance: str = "operator"  # "demand" | "predictive" | "operator"; unknown = operator
    cached_at: float | None = None  # controller clock; None = unknown age
    used: bool = False  # a child was launched from it at least once

    @property
    def predictive(self) -> bool:
        return self.provenance == "predictive"


@dataclass(frozen=True)
class LearnedOnHost:
    """What the controller learned about one model on one host, for its current artifact.

    ``load_seconds``/``warm_seconds`` are the learned cold-fetch and warm estimates
    (already blended with the profile's priors until authoritative); the speed is
    measured for this model only and weighted by its confidence (0..1). ``None``
    means nothing learned: placement keeps the prior.
    """

    model_id: str
    load_seconds: float | None = None
    warm_seconds: float | None = None
    tokens_per_second: float | None = None
    speed_confidence: float = 0.0
    latency_ms: float | None = None


@dataclass(frozen=True)
class ObservedStage:
    """A split stage a host reports serving under an accepted coordinator claim, and
    where the coordinator's engine reaches it (the stage's TLS tunnel, ``host:port``)."""

    model_id: str
    coordinator_id: str
    coordinator_term: int
    stage_index: int
    stage_count: int
    layer_start: int
    layer_end: int
    endpoint: str


@dataclass(frozen=True)
class HostSnapshot:
    """The controller's latest view of one host."""

    host_id: str
    resources: HostResources
    state: HostState = HostState.ACCEPTING
    last_heartbeat: float | None = None
    residencies: tuple[Residency, ...] = ()
    cached: tuple[CachedArtifact, ...] = ()
    failed_attempts: tuple[tuple[str, int], ...] = ()  # (model_id, persisted failures)
    kind: str = "managed"
    capabilities: tuple[str, ...] = ()  # actuator verbs the node advertised (load, evict, ...)
    learned: tuple[LearnedOnHost, ...] = ()  # per model, from timings and measured speed
    # the split stages it serves now; None = none (left out of the canonical text)
    split_stages: tuple[ObservedStage, ...] | None = field(
        default=None, metadata=CANONICAL_OMIT_NONE
    )


@dataclass(frozen=True)
class ModelDemand:
    """Short-horizon demand forecast for one model.

    ``requests_per_minute``/``queue_depth``/latency/errors are direct evidence;
    ``correlated_requests_per_minute`` is inferred (correlation) evidence only.
    """

    model_id: str
    requests_per_minute: float = 0.0
    offered_concurrency: float = 0.0
    queue_depth: float = 0.0
    p95_latency_ms: float | None = None
    error_rate: float = 0.0
    trend_per_minute: float = 0.0
    confidence: float = 1.0
    sample_count: int = 0
    correlated_requests_per_minute: float = 0.0
    observed_peak_requests_per_minute: float = 0.0

    @property
    def has_direct_evidence(self) -> bool:
        """The one definition of direct demand, used by the planner's targets, portfolio
        fences and every "correlation-only" test: a request rate, a queue or errors.
        Offered concurrency, latency and correlation alone are not direct evidence."""
        return self.requests_per_minute > 0 or self.queue_depth > 0 or self.error_rate > 0

    @property
    def correlation_only(self) -> bool:
        return not self.has_direct_evidence and self.correlated_requests_per_minute > 0


@dataclass(frozen=True)
class FleetSnapshot:
    """A frozen observation of the whole fleet, as ``gridctl plan --against`` reads it."""

    now: float
    hosts: tuple[HostSnapshot, ...] = ()
    demand: tuple[ModelDemand, ...] = ()
    extras: dict[str, object] = field(default_factory=dict)

    def host(self, host_id: str) -> HostSnapshot | None:
        for h in self.hosts:
            if h.host_id == host_id:
                return h
        return None


@dataclass(frozen=True)
class HostSpec:
    """A logical host declared in a ``Fleet`` document (test fleet and lab)."""

    host_id: str
    resources: HostResources
    kind: str = "managed"
    cached: tuple[CachedArtifact, ...] = ()
