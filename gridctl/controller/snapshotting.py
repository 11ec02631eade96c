"""The live observation as a fleet-snapshot document (``gridctl plan --against URL``)."""

from __future__ import annotations

from typing import Any

from gridctl.config.splitstages import stage_json
from gridctl.controller.control import Controller
from gridctl.demand.direct import with_correlation
from gridctl.domain import HostSnapshot, ModelDemand
from gridctl.tick.learned import learned_rows, with_learned
from gridctl.tick.timings import startup_estimates


def _host(h: HostSnapshot) -> dict[str, Any]:
    res = h.resources
    resources = {
        "capacity_mb": res.capacity_mb,
        "reserved_mb": res.reserved_mb,
        "external_mb": res.external_mb,
        "thermal_derate": res.thermal_derate,
        "throttle_fraction": res.throttle_fraction,
        "runtimes": list(res.runtimes),
        "qualified_runtimes": (
            None if res.qualified_runtimes is None else list(res.qualified_runtimes)
        ),
        "backends": list(res.backends),
        "gpu_count": res.gpu_count,
        "gpu_memory_mb": res.gpu_memory_mb,
        "failure_domain": res.failure_domain,
        "tags": list(res.tags),
        "allowed_models": list(res.allowed_models),
        "denied_models": list(res.denied_models),
        "allowed_data_tiers": [t.value for t in res.allowed_data_tiers],
        "max_models": res.max_models,
        "disk_free_mb": res.disk_free_mb,
        "disk_total_mb": res.disk_total_mb,
        "memory_bandwidth_gbps": res.memory_bandwidth_gbps,
        "compute_gflops": res.compute_gflops,
        "host_priority": res.host_priority,
        "measured_tokens_per_second": res.measured_tokens_per_second,
        "measured_latency_ms": res.measured_latency_ms,
    }
    return {
        "host_id": h.host_id,
        "last_heartbeat": h.last_heartbeat,
        "kind": h.kind,
        "resources": resources,
        "allocator": {
            "schema_version": 1,
            "state": h.state.value,
            "cached_models": [
                {"model_id": c.model_id, "artifact_sha256": c.artifact_sha256} for c in h.cached
            ],
            "residencies": [
                {
                    "model_id": r.model_id,
                    "memory_mb": r.memory_mb,
                    "state": r.state.value,
                    "artifact_sha256": r.artifact_sha256,
                    "runtime": r.runtime,
                    "loaded_at": r.loaded_at,
                    "last_used_at": r.last_used_at,
                    "ownership": r.ownership.value,
                    "pinned": r.pinned,
                    "active_requests": r.active_requests,
                    **({} if r.split_term is None else {"split_term": r.split_term}),
                }
                for r in h.residencies
            ],
            **(
                {}
                if h.split_stages is None
                else {"split_stages": [stage_json(s) for s in h.split_stages]}
            ),
        },
        "failed_attempts": dict(h.failed_attempts),
        "learned": [
            {
                "model_id": row.model_id,
                "load_seconds": row.load_seconds,
                "warm_seconds": row.warm_seconds,
                "tokens_per_second": row.tokens_per_second,
                "speed_confidence": row.speed_confidence,
                "latency_ms": row.latency_ms,
            }
            for row in h.learned
        ],
    }


def demand_json(d: ModelDemand) -> dict[str, Any]:
    """One model's forecast as the snapshot and status documents carry it."""
    return {
        "model_id": d.model_id,
        "requests_per_minute": d.requests_per_minute,
        "offered_concurrency": d.offered_concurrency,
        "queue_depth": d.queue_depth,
        "p95_latency_ms": d.p95_latency_ms,
        "error_rate": d.error_rate,
        "trend_per_minute": d.trend_per_minute,
        "confidence": d.confidence,
        "sample_count": d.sample_count,
        "correlated_requests_per_minute": d.correlated_requests_per_minute,
        "observed_peak_requests_per_minute": d.observed_peak_requests_per_minute,
    }


def snapshot_document(ctl: Controller) -> dict[str, Any]:
    """The observation the controller would plan against right now."""
    now = ctl.clock()
    desired = ctl.current_desired()
    configured = [p.name for p in desired.profiles] if desired else []
    demand = with_correlation(
        ctl.demand.forecast(now, ctl.policy()), ctl.demand.picture(now), configured
    )
    snap = ctl.registry.snapshot(now, demand)
    if desired is not None:  # what the tick attaches: learned timings and per-model speed
        profiles = {p.name: p for p in desired.profiles}
        startup = startup_estimates(ctl.store.timings(), profiles, now, desired.policy)
        snap = with_learned(snap, learned_rows(profiles, startup, ctl.registry.speed_evidence()))
    return {
        "schema_version": 1,
        "now": now,
        "hosts": [_host(h) for h in snap.hosts],
        "demand": [demand_json(d) for d in snap.demand],
    }
