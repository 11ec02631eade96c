"""Turn schema-valid, default-filled documents into frozen domain objects.

Only called on input that already passed its schema, so shape errors cannot
occur here; canonicalisation (lowercase digests, sorted sets) happens here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from gridctl.config.schemas import fill_defaults
from gridctl.domain import (
    Artifact,
    CachedArtifact,
    ControllerPolicy,
    DataTier,
    Fleet,
    HostResources,
    HostSpec,
    Mode,
    ModelProfile,
    Workload,
    WorkloadCatalog,
)
from gridctl.domain.profiles import DEFAULT_ENDPOINTS, ENDPOINTS, SplitPolicy

_RESOURCE_FIELDS = {f.name for f in dataclasses.fields(HostResources)}
_TUPLE_RESOURCE_FIELDS = {
    "runtimes",
    "backends",
    "tags",
    "allowed_models",
    "denied_models",
}


def canonical_sha256(value: str | None) -> str | None:
    return value.lower() if isinstance(value, str) else None


_TIER_ORDER = {tier: index for index, tier in enumerate(DataTier)}


def sorted_tuple(values: Any) -> tuple[str, ...]:
    return tuple(sorted(map(str, values))) if values else ()


def profile_from_document(doc: dict[str, Any]) -> ModelProfile:
    spec = doc["spec"]
    artifact = spec.get("artifact") or {}
    return ModelProfile(
        name=doc["metadata"]["name"],
        memory_mb=spec["memory_mb"],
        runtime_memory_mb=dict(sorted(spec["runtime_memory_mb"].items())),
        artifact=Artifact(
            sha256=canonical_sha256(artifact.get("sha256")),
            source=artifact.get("source"),
            size_mb=artifact.get("size_mb"),
        ),
        runtimes=tuple(spec["runtimes"]),
        backends=sorted_tuple(spec["backends"]),
        data_tier=DataTier(spec["data_tier"]),
        required_tags=sorted_tuple(spec["required_tags"]),
        forbidden_tags=sorted_tuple(spec["forbidden_tags"]),
        pins=sorted_tuple(spec["pins"]),
        min_replicas=spec["min_replicas"],
        max_replicas=spec["max_replicas"],
        priority=spec["priority"],
        min_failure_domains=spec["min_failure_domains"],
        max_colocated_models=spec["max_colocated_models"],
        colocation_excludes=sorted_tuple(spec["colocation_excludes"]),
        workload_scores={k: float(v) for k, v in sorted(spec["workload_scores"].items())},
        target_utilization=float(spec["target_utilization"]),
        expected_service_seconds=float(spec["expected_service_seconds"]),
        latency_slo_ms=spec["latency_slo_ms"],
        load_seconds=float(spec["load_seconds"]),
        warm_seconds=float(spec["warm_seconds"]),
        min_residency_seconds=float(spec["min_residency_seconds"]),
        scale_down_cooldown_seconds=float(spec["scale_down_cooldown_seconds"]),
        replica_concurrency=spec["replica_concurrency"],
        min_gpu_count=spec["min_gpu_count"],
        min_gpu_memory_mb=spec["min_gpu_memory_mb"],
        chat_template=spec.get("chat_template"),
        endpoints=tuple(e for e in ENDPOINTS if e in spec.get("endpoints", DEFAULT_ENDPOINTS)),
        max_output_tokens=spec.get("max_output_tokens", 32_768),
        split=split_from_mapping(spec.get("split")),
    )


def split_from_mapping(data: Mapping[str, Any] | None) -> SplitPolicy | None:
    if data is None:
        return None
    return SplitPolicy(
        max_stages=data["max_stages"],
        layers=data["layers"],
        native_context=data["native_context"],
    )


def policy_from_document(doc: dict[str, Any]) -> ControllerPolicy:
    spec = dict(doc.get("spec") or {})
    kwargs: dict[str, Any] = {"name": doc["metadata"]["name"]}
    for field in dataclasses.fields(ControllerPolicy):
        if field.name in spec:
            value = spec[field.name]
            if field.name == "mode":
                value = Mode(value)
            elif isinstance(field.default, float):
                value = float(value)
            kwargs[field.name] = value
    return ControllerPolicy(**kwargs)


def catalog_from_document(doc: dict[str, Any]) -> WorkloadCatalog:
    spec = doc["spec"]
    workloads = tuple(
        Workload(
            name=w["name"],
            keywords=tuple(w["keywords"]),
            endpoints=tuple(w["endpoints"]),
            modalities=tuple(w["modalities"]),
        )
        for w in spec["workloads"]
    )
    return WorkloadCatalog(
        name=doc["metadata"]["name"],
        workloads=workloads,
        default_workload=spec["default_workload"],
    )


def resources_from_mapping(data: dict[str, Any]) -> HostResources:
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in _RESOURCE_FIELDS:
            continue  # wire peers may add fields; they are ignored
        if key in _TUPLE_RESOURCE_FIELDS:
            value = sorted_tuple(value)
        elif key == "qualified_runtimes":
            value = None if value is None else sorted_tuple(value)
        elif key == "allowed_data_tiers":
            value = tuple(sorted(map(DataTier, value), key=_TIER_ORDER.__getitem__))
        elif key in ("thermal_derate", "throttle_fraction") and value is not None:
            value = float(value)
        kwargs[key] = value
    return HostResources(**kwargs)


def cached_from_list(values: Any, now: float | None = None) -> tuple[CachedArtifact, ...]:
    """Cached entries from a fleet document, a snapshot or a heartbeat (``now`` turns a
    heartbeat's ``cached_age_seconds`` into the receiver's clock)."""
    cached: list[CachedArtifact] = []
    for value in values or ():
        if isinstance(value, str):
            cached.append(CachedArtifact(model_id=value))
        else:
            cached.append(_cached_entry(value, now))
    return tuple(sorted(set(cached), key=lambda c: (c.model_id, c.artifact_sha256 or "")))


def _cached_entry(value: Mapping[str, Any], now: float | None) -> CachedArtifact:
    size_mb = value.get("size_mb")
    size_bytes = value.get("size_bytes")
    if size_mb is None and isinstance(size_bytes, int):
        size_mb = -(-size_bytes // (1024 * 1024))
    cached_at = value.get("cached_at") if now is None else None
    age = value.get("cached_age_seconds")
    if now is not None and isinstance(age, int | float):
        cached_at = now - float(age)
    used = value.get("used")
    if used is None:
        used = value.get("last_used_age_seconds") is not None
    provenance = value.get("provenance")
    if provenance not in ("demand", "predictive", "operator"):
        provenance = "predictive" if value.get("predictive") is True else "operator"
    return CachedArtifact(
        model_id=value["model_id"],
        artifact_sha256=canonical_sha256(value.get("artifact_sha256")),
        size_mb=size_mb if isinstance(size_mb, int) else None,
        provenance=str(provenance),
        cached_at=float(cached_at) if isinstance(cached_at, int | float) else None,
        used=bool(used),
    )


def fleet_from_document(doc: dict[str, Any]) -> Fleet:
    spec = doc["spec"]
    hosts = tuple(
        HostSpec(
            host_id=h["host_id"],
            resources=resources_from_mapping(h),
            kind=h["kind"],
            cached=cached_from_list(h["cached_models"]),
        )
        for h in spec["hosts"]
    )
    return Fleet(
        name=doc["metadata"]["name"],
        hosts=tuple(sorted(hosts, key=lambda h: h.host_id)),
        description=spec.get("description", ""),
    )


def node_policy_spec(doc: dict[str, Any]) -> dict[str, Any]:
    """A valid ``NodePolicy``'s spec with every schema default applied.

    ``gridctl.node.protection.ProtectionPolicy.from_spec`` turns it into thresholds.
    """
    filled = fill_defaults({**doc, "spec": doc.get("spec") or {}}, "node-policy.schema.json")
    spec: dict[str, Any] = filled["spec"]
    return spec
