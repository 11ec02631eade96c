"""Named fixture builders for planner tests: hosts, residencies, profiles, snapshots.

Each host builder returns a fresh, fresh-heartbeat, accepting ``HostSnapshot``
shaped like a real machine; keyword arguments override resources or snapshot
fields, so a scenario reads as a table of machines:

    fleet(gpu_server_80g("gpu-1"), laptop_16g("lap-1", state=HostState.PAUSED))
"""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

from gridctl.domain import (
    CachedArtifact,
    ControllerPolicy,
    DataTier,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    ModelDemand,
    ModelProfile,
    ObservedStage,
    Ownership,
    Residency,
    ResidencyState,
    SplitPlacement,
)
from gridctl.domain.profiles import Artifact

NOW = 1_800_000_000.0
SHA_A = "a" * 64
SHA_B = "b" * 64
_RESOURCE_FIELDS = {f.name for f in fields(HostResources)}


def host(host_id: str, capacity_mb: int, **changes: Any) -> HostSnapshot:
    """A generic accepting host with a heartbeat one second old."""
    resource_changes = {k: v for k, v in changes.items() if k in _RESOURCE_FIELDS}
    host_changes = {k: v for k, v in changes.items() if k not in _RESOURCE_FIELDS}
    resources = HostResources(capacity_mb=capacity_mb, **resource_changes)
    base = HostSnapshot(
        host_id=host_id,
        resources=resources,
        state=HostState.ACCEPTING,
        last_heartbeat=NOW - 1,
    )
    return replace(base, **host_changes)


def gpu_server_80g(host_id: str = "gpu-1", **changes: Any) -> HostSnapshot:
    """An always-on CUDA server: one 80 GB GPU, vLLM and llama.cpp, big disk."""
    base: dict[str, Any] = {
        "reserved_mb": 2048,
        "runtimes": ("llama.cpp", "vllm"),
        "backends": ("cuda",),
        "gpu_count": 1,
        "gpu_memory_mb": 81920,
        "tags": ("datacenter", "gpu"),
        "disk_free_mb": 500_000,
        "memory_bandwidth_gbps": 2000.0,
        "compute_gflops": 300_000.0,
        "failure_domain": "rack-1",
    }
    base.update(changes)
    return host(host_id, 81920, **base)


def gpu_server_2x24g(host_id: str = "gpu-2x", **changes: Any) -> HostSnapshot:
    """A workstation with two 24 GB GPUs."""
    base: dict[str, Any] = {
        "reserved_mb": 1024,
        "runtimes": ("llama.cpp", "vllm"),
        "backends": ("cuda",),
        "gpu_count": 2,
        "gpu_memory_mb": 24576,
        "tags": ("gpu",),
        "disk_free_mb": 200_000,
        "memory_bandwidth_gbps": 900.0,
        "compute_gflops": 80_000.0,
        "failure_domain": "rack-2",
    }
    base.update(changes)
    return host(host_id, 49152, **base)


def mini_32g(host_id: str = "mini-1", **changes: Any) -> HostSnapshot:
    """An Apple-silicon-like mini: 32 GB unified memory, llama.cpp on metal."""
    base: dict[str, Any] = {
        "reserved_mb": 4096,
        "runtimes": ("llama.cpp",),
        "backends": ("metal",),
        "tags": ("office",),
        "disk_free_mb": 100_000,
        "memory_bandwidth_gbps": 400.0,
        "compute_gflops": 27_000.0,
        "failure_domain": "floor-1",
    }
    base.update(changes)
    return host(host_id, 32768, **base)


def laptop_16g(host_id: str = "lap-1", **changes: Any) -> HostSnapshot:
    """An employee laptop: 16 GB, llama.cpp on CPU, employee tag, internal data only."""
    base: dict[str, Any] = {
        "reserved_mb": 4096,
        "runtimes": ("llama.cpp",),
        "backends": ("cpu",),
        "tags": ("employee",),
        "disk_free_mb": 50_000,
        "memory_bandwidth_gbps": 100.0,
        "compute_gflops": 2_000.0,
        "failure_domain": "floor-2",
        "allowed_data_tiers": (DataTier.PUBLIC, DataTier.INTERNAL),
    }
    base.update(changes)
    return host(host_id, 16384, **base)


def cpu_box_64g(host_id: str = "cpu-1", **changes: Any) -> HostSnapshot:
    """A plain CPU server with lots of memory and no accelerator."""
    base: dict[str, Any] = {
        "reserved_mb": 2048,
        "runtimes": ("llama.cpp",),
        "backends": ("cpu",),
        "disk_free_mb": 300_000,
        "memory_bandwidth_gbps": 200.0,
        "compute_gflops": 5_000.0,
        "failure_domain": "rack-3",
    }
    base.update(changes)
    return host(host_id, 65536, **base)


def external_endpoint(host_id: str = "ext-1", **changes: Any) -> HostSnapshot:
    """A registered external engine: inventory only, never actuated."""
    base: dict[str, Any] = {
        "runtimes": ("vllm",),
        "failure_domain": "cloud",
        "kind": "external-endpoint",
    }
    base.update(changes)
    return host(host_id, 81920, **base)


def resident(
    model_id: str,
    memory_mb: int,
    state: ResidencyState = ResidencyState.READY,
    **changes: Any,
) -> Residency:
    """A residency loaded an hour ago (past any minimum residency), managed by default."""
    base = Residency(
        model_id=model_id,
        memory_mb=memory_mb,
        state=state,
        loaded_at=NOW - 3600,
        last_used_at=NOW - 3600,
        runtime="llama.cpp",
    )
    return replace(base, **changes)


def external(model_id: str, memory_mb: int, **changes: Any) -> Residency:
    return resident(model_id, memory_mb, ownership=Ownership.EXTERNAL, **changes)


def manual(model_id: str, memory_mb: int, **changes: Any) -> Residency:
    return resident(model_id, memory_mb, ownership=Ownership.MANUAL, **changes)


def with_residents(snapshot_host: HostSnapshot, *rows: Residency) -> HostSnapshot:
    return replace(snapshot_host, residencies=tuple(rows))


def serving_stages(
    hosts: tuple[HostSnapshot, ...],
    split: SplitPlacement,
    term: int,
    only: frozenset[str] | None = None,
) -> tuple[HostSnapshot, ...]:
    """``hosts`` once the split's stages (or those on the ``only`` hosts) report serving
    under ``term``, as nodes report accepted coordinator claims."""
    count = len(split.stages)
    stages = {
        s.host_id: ObservedStage(
            split.model_id,
            split.coordinator_host_id,
            term,
            index,
            count,
            s.layer_start,
            s.layer_end,
            f"10.0.0.{index + 1}:5000",
        )
        for index, s in enumerate(split.stages)
        if only is None or s.host_id in only
    }
    return tuple(
        replace(h, split_stages=(stages[h.host_id],)) if h.host_id in stages else h for h in hosts
    )


def with_cache(snapshot_host: HostSnapshot, *models: tuple[str, str | None]) -> HostSnapshot:
    cached = tuple(CachedArtifact(model_id=m, artifact_sha256=sha) for m, sha in models)
    return replace(snapshot_host, cached=cached)


def profile(name: str, memory_mb: int = 8192, **changes: Any) -> ModelProfile:
    """A llama.cpp model profile with no demand-derived replicas by default."""
    if "sha256" in changes or "size_mb" in changes or "source" in changes:
        changes["artifact"] = Artifact(
            sha256=changes.pop("sha256", None),
            source=changes.pop("source", None),
            size_mb=changes.pop("size_mb", None),
        )
    return replace(ModelProfile(name=name, memory_mb=memory_mb), **changes)


def baseline(name: str, memory_mb: int = 8192, replicas: int = 1, **changes: Any) -> ModelProfile:
    """A profile that always wants ``replicas`` replicas."""
    changes.setdefault("max_replicas", max(replicas, 1))
    return profile(name, memory_mb, min_replicas=replicas, **changes)


def demand(model_id: str, **changes: Any) -> ModelDemand:
    return replace(ModelDemand(model_id=model_id), **changes)


def busy(model_id: str, rpm: float = 120.0, **changes: Any) -> ModelDemand:
    """Direct request evidence of ``rpm`` requests per minute."""
    return demand(model_id, requests_per_minute=rpm, sample_count=100, **changes)


def correlated(model_id: str, rpm: float = 60.0, **changes: Any) -> ModelDemand:
    """Correlation-only (inferred) demand."""
    return demand(model_id, correlated_requests_per_minute=rpm, **changes)


def fleet(
    *hosts: HostSnapshot, demand: tuple[ModelDemand, ...] = (), now: float = NOW
) -> FleetSnapshot:
    return FleetSnapshot(now=now, hosts=tuple(hosts), demand=tuple(demand))


def policy(**changes: Any) -> ControllerPolicy:
    return replace(ControllerPolicy(), **changes)
