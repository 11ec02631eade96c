"""Controller policy tunables and the workload vocabulary.

Every default here equals the ``default`` of the same field in
``schemas/controller-policy.schema.json``; ``docs/defaults.md`` says where each
one comes from, and a test keeps the three in step.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gridctl.domain.states import Mode

DEFAULT_WORKLOADS: tuple[str, ...] = (
    "coding",
    "research",
    "marketing",
    "sales",
    "design",
    "image",
    "video",
    "embedding",
    "general",
)


@dataclass(frozen=True)
class ControllerPolicy:
    """Tunables of the controller (YAML kind ``ControllerPolicy``)."""

    name: str = "default"
    mode: Mode = Mode.RECOMMEND
    # mutation governor
    max_concurrent_mutations: int = 4
    max_concurrent_mutations_per_host: int = 1
    artifact_fanout: int = 2
    max_evictions_per_plan: int = 64
    mutation_cooldown_seconds: float = 30.0
    observation_timeout_seconds: float = 120.0
    failure_backoff_base_seconds: float = 30.0
    failure_backoff_max_seconds: float = 900.0
    membership_recovery_grace_seconds: float = 60.0
    # placement
    admission_headroom_mb: int = 256
    heartbeat_stale_seconds: float = 30.0
    heartbeat_future_skew_seconds: float = 5.0
    performance_factor_max: float = 8.0
    failed_attempt_penalty: float = 0.25
    failed_attempt_penalty_max: float = 0.75
    repair_budget: int = 200
    # demand forecast
    demand_bucket_seconds: float = 60.0
    demand_window_buckets: int = 30
    demand_ewma_alpha: float = 0.3
    demand_headroom: float = 1.2
    lookahead_max_seconds: float = 300.0
    lookahead_max_multiplier: float = 2.0
    correlation_min_buckets: int = 3
    correlation_threshold: float = 0.7
    inferred_demand_peak_multiplier: float = 2.0
    correlation_max_sources: int = 32
    # portfolio and workload intelligence
    portfolio_min_observations: int = 3
    portfolio_min_offered_concurrency: float = 1.5
    media_canary_min_offered_concurrency: float = 1.0
    sparse_recurrence_max_gap_seconds: float = 3600.0
    portfolio_max_candidates_per_workload: int = 4
    portfolio_max_portfolios: int = 64
    preemption_path_limit: int = 16
    replacement_pressure_ratio: float = 1.5
    affinity_min_transitions: int = 5
    affinity_max_workflows: int = 512
    affinity_max_transitions: int = 4096
    affinity_expiry_seconds: float = 3600.0
    outcome_full_confidence_requests: int = 20
    quality_full_confidence_evaluations: int = 8
    evidence_half_life_seconds: float = 604800.0
    exploration_bonus_points: float = 6.0
    # artifact cache and predictive transfers
    predictive_disk_reserve_mb: int = 10240
    predictive_cache_ttl_seconds: float = 21600.0
    prefetch_replacement_value_gain: float = 2.0
    prefetch_victim_min_age_seconds: float = 900.0
    prefetch_max_victims: int = 3
    # learned timings
    timing_ewma_samples: int = 8
    timing_authoritative_samples: int = 4
    timing_expiry_seconds: float = 2592000.0
    timing_max_report_seconds: float = 3600.0
    # authority and delivery
    command_ttl_seconds: float = 60.0
    controller_lease_seconds: float = 15.0
    route_lease_seconds: float = 60.0
    destructive_min_route_lease_seconds: float = 30.0
    # router
    circuit_rate_limit_open_seconds: float = 1.0
    circuit_failure_threshold: int = 2
    circuit_backoff_max_seconds: float = 30.0
    attribution_full_samples: int = 8
    affinity_route_slack: float = 0.2
    affinity_key_max_bytes: int = 256
    router_caller_slot_share: float = 0.5
    router_max_waiting_per_caller: int = 128
    trace_max_bytes: int = 5242880


@dataclass(frozen=True)
class Workload:
    """One workload class and the hints the bounded classifier uses for it."""

    name: str
    keywords: tuple[str, ...] = ()
    endpoints: tuple[str, ...] = ()
    modalities: tuple[str, ...] = ()


@dataclass(frozen=True)
class WorkloadCatalog:
    """The workload vocabulary (YAML kind ``WorkloadCatalog``)."""

    name: str = "default"
    workloads: tuple[Workload, ...] = field(
        default_factory=lambda: tuple(Workload(name=w) for w in DEFAULT_WORKLOADS)
    )
    default_workload: str = "general"

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(w.name for w in self.workloads)
