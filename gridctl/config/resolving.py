"""Turn schema-valid, default-filled documents into frozen domain objects.

Only called on input that already passed its schema, so shape errors cannot
occur here; canonicalisation (lowercase digests, sorted sets) happens here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

from gridctl.config.schemas import defaults_of, fill_defaults
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


def _optional_names(value: Any) -> tuple[str, ...] | None:
    return None if value is None else sorted_tuple(value)


def _data_tiers(value: Any) -> tuple[DataTier, ...]:
    return tuple(sorted(map(DataTier, value), key=_TIER_ORDER.__getitem__))


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _as_is(value: Any) -> Any:
    return value


# how each resources field is read from a document (one lookup per key, not a chain of tests)
_RESOURCE_READERS: dict[str, Callable[[Any], Any]] = {
    **dict.fromkeys(_RESOURCE_FIELDS, _as_is),
    **dict.fromkeys(_TUPLE_RESOURCE_FIELDS, sorted_tuple),
    "qualified_runtimes": _optional_names,
    "allowed_data_tiers": _data_tiers,
    "thermal_derate": _optional_float,
    "throttle_fraction": _optional_float,
}


def resources_from_mapping(data: Mapping[str, Any]) -> HostResources:
    kwargs: dict[str, Any] = {}
    readers = _RESOURCE_READERS
    for key, value in data.items():
        read = readers.get(key)
        if read is None:
            continue  # wire peers may add fields; they are ignored
        kwargs[key] = value if read is _as_is else read(value)
    return HostResources(**kwargs)


RESOURCES_SCHEMA = "defs/host-resources.schema.json"


@cache
def _resource_defaults() -> dict[str, Any]:
    defaults = defaults_of(RESOURCES_SCHEMA, "")
    # every default of the schema is a property of the resources object itself, and
    # ``resources_from_mapping`` copies what it keeps: a nested default would need the
    # deep copy and walk of ``fill_defaults``
    assert not any(isinstance(v, dict) for v in defaults.values()), defaults
    return defaults


def resources_from_report(data: Mapping[str, Any]) -> HostResources:
    """A schema-valid resources object (a snapshot's or a heartbeat's) with every default
    applied: ``resources_from_mapping(fill_defaults(data, RESOURCES_SCHEMA))`` without
    copying the document (a 1,000-host snapshot: about 7 ms of a dry run, measured)."""
    return resources_from_mapping({**_resource_defaults(), **data})


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
