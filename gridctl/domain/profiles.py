"""Model profiles: what an operator declares about one model.

``split`` is the one profile field that may be absent from the canonical
text of a profile (``CANONICAL_OMIT_NONE``): a profile that never splits
digests exactly as it did before the field existed, so saved plans and
recorded input digests stay valid.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from gridctl.domain.states import DataTier

DEFAULT_RUNTIME = "llama.cpp"
ENDPOINTS = ("chat", "completions", "embeddings")  # the OpenAI surface a replica may serve
DEFAULT_ENDPOINTS = ("chat", "completions")
# field metadata: ``None`` is left out of the canonical text (``planner.canonical``)
CANONICAL_OMIT_NONE = {"canonical_omit_none": True}


@dataclass(frozen=True)
class Artifact:
    """The immutable weights of a model: digest, operator-authorised source, size ceiling."""

    sha256: str | None = None
    source: str | None = None
    size_mb: int | None = None


@dataclass(frozen=True)
class SplitPolicy:
    """May one replica run split across several hosts, and the model's shape for it.

    A split is planned only when no single eligible host can hold the model:
    ``max_stages`` (>= 2) bounds how many hosts one split may span; ``layers``
    and ``native_context`` are the GGUF's block count and trained context, which
    the split-topology planner needs to cut the model into contiguous layer
    ranges and to name the context the coordinator serves.
    """

    max_stages: int
    layers: int
    native_context: int


@dataclass(frozen=True)
class ModelProfile:
    """One configured model (YAML kind ``ModelProfile``).

    ``memory_mb`` is the resident runtime budget of one replica, not the file size;
    ``runtime_memory_mb`` overrides it per runtime.
    """

    name: str
    memory_mb: int
    runtime_memory_mb: Mapping[str, int] = field(default_factory=dict)
    artifact: Artifact = field(default_factory=Artifact)
    runtimes: tuple[str, ...] = (DEFAULT_RUNTIME,)
    backends: tuple[str, ...] = ()
    data_tier: DataTier = DataTier.INTERNAL
    required_tags: tuple[str, ...] = ()
    forbidden_tags: tuple[str, ...] = ()
    pins: tuple[str, ...] = ()
    min_replicas: int = 0
    max_replicas: int = 1
    priority: int = 50
    min_failure_domains: int = 1
    max_colocated_models: int = 0
    colocation_excludes: tuple[str, ...] = ()
    workload_scores: Mapping[str, float] = field(default_factory=dict)
    target_utilization: float = 0.7
    expected_service_seconds: float = 2.0
    latency_slo_ms: int | None = None
    load_seconds: float = 30.0
    warm_seconds: float = 10.0
    min_residency_seconds: float = 300.0
    scale_down_cooldown_seconds: float = 600.0
    replica_concurrency: int = 1
    min_gpu_count: int = 0
    min_gpu_memory_mb: int = 0
    chat_template: str | None = None  # a llama-server built-in name; None = the GGUF's own
    endpoints: tuple[str, ...] = DEFAULT_ENDPOINTS  # of ``ENDPOINTS``; embeddings needs a flag
    max_output_tokens: int = 32_768  # the largest max_tokens a request may ask for
    # None = never split; see ``SplitPolicy``
    split: SplitPolicy | None = field(default=None, metadata=CANONICAL_OMIT_NONE)

    def memory_for(self, runtime: str) -> int:
        """Resident footprint of one replica on ``runtime``."""
        return int(self.runtime_memory_mb.get(runtime, self.memory_mb))

    def largest_memory_among(self, runtimes: tuple[str, ...] | frozenset[str]) -> int:
        """The conservative footprint when a residency does not say its runtime."""
        matching = [r for r in self.runtimes if r in runtimes]
        if not matching:
            return self.memory_mb
        return max(self.memory_for(r) for r in matching)

    @property
    def artifact_sha256(self) -> str | None:
        return self.artifact.sha256
