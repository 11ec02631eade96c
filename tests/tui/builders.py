"""Named builders for status documents: hosts, residencies, models, actions, events.

``gpu_server_80g("gpu-a", "rack-1", residency(...))`` reads like the fleet it
describes. ``tests/tui/situations.py`` assembles these into whole documents.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

NOW = 1_780_000_000.0
FIXTURES = Path(__file__).parent / "fixtures"
Doc = dict[str, Any]


# --- hosts --------------------------------------------------------------------------
def residency(
    model_id: str, state: str, memory_mb: int, *, ownership: str = "managed", active: int = 0
) -> Doc:
    return {
        "model_id": model_id,
        "state": state,
        "memory_mb": memory_mb,
        "ownership": ownership,
        "active_requests": active,
        "routable": state == "ready",
        "loaded_at": NOW - 3600,
        "last_used_at": NOW - 20,
    }


def host(
    host_id: str,
    capacity_mb: int,
    *,
    state: str = "accepting",
    domain: str,
    residencies: tuple[Doc, ...] = (),
    reserved_mb: int = 2048,
    heartbeat_age: float | None = 3.0,
    tags: tuple[str, ...] = (),
    runtimes: tuple[str, ...] = ("llama.cpp",),
    **extra: Any,
) -> Doc:
    used = sum(r["memory_mb"] for r in residencies if r["state"] != "cached")
    return {
        "host_id": host_id,
        "state": state,
        "capacity_mb": capacity_mb,
        "reserved_mb": reserved_mb,
        "external_mb": 0,
        "used_mb": used,
        "free_mb": max(0, capacity_mb - reserved_mb - used),
        "failure_domain": domain,
        "tags": list(tags),
        "runtimes": list(runtimes),
        "max_models": 4,
        "disk_free_mb": 200_000,
        "last_heartbeat": None if heartbeat_age is None else NOW - heartbeat_age,
        "heartbeat_age_seconds": heartbeat_age,
        "residencies": list(residencies),
        "cached_models": [],
        **extra,
    }


def gpu_server_80g(host_id: str, domain: str, *residencies: Doc, **extra: Any) -> Doc:
    return host(
        host_id,
        81_920,
        domain=domain,
        residencies=residencies,
        tags=("gpu", "always-on"),
        runtimes=("llama.cpp", "vllm"),
        role="server",
        **extra,
    )


def workstation_48g(host_id: str, domain: str, *residencies: Doc, **extra: Any) -> Doc:
    return host(
        host_id,
        49_152,
        domain=domain,
        residencies=residencies,
        tags=("gpu",),
        role="server",
        **extra,
    )


def mac_studio_64g(host_id: str, domain: str, *residencies: Doc, **extra: Any) -> Doc:
    return host(
        host_id,
        65_536,
        domain=domain,
        residencies=residencies,
        tags=("metal",),
        role="desk",
        **extra,
    )


def laptop_16g(host_id: str, domain: str, *residencies: Doc, **extra: Any) -> Doc:
    return host(
        host_id,
        16_384,
        domain=domain,
        residencies=residencies,
        reserved_mb=4096,
        tags=("laptop", "employee"),
        role="laptop",
        **extra,
    )


# --- models, actions, history ----------------------------------------------------------
def model(
    model_id: str,
    desired: int,
    planned: int,
    ready: int,
    *,
    health: str = "Healthy",
    reason: str = "",
    unmet: tuple[str, ...] = (),
) -> Doc:
    row: Doc = {
        "model_id": model_id,
        "desired": desired,
        "planned": planned,
        "ready": ready,
        "missing": max(0, desired - ready),
        "health": health,
        "sync": "Synced" if ready >= desired and not unmet else "OutOfSync",
        "unmet": list(unmet),
    }
    if reason:
        row["reason"] = reason
    return row


def profile(name: str, memory_mb: int, *, min_replicas: int = 1, priority: int = 50) -> Doc:
    return {
        "name": name,
        "memory_mb": memory_mb,
        "min_replicas": min_replicas,
        "max_replicas": 3,
        "priority": priority,
        "artifact_sha256": None,
        "workload_scores": {},
    }


def action(
    kind: str,
    host_id: str,
    model_id: str,
    *,
    executable: bool = True,
    blocked: str | None = None,
    age: float = 30.0,
    status: str | None = None,
    reason: str = "",
) -> Doc:
    row: Doc = {
        "action_id": f"{kind}-{host_id}-{model_id}-0",
        "kind": kind,
        "host_id": host_id,
        "model_id": model_id,
        "depends_on": [],
        "executable": executable,
        "blocked": blocked,
        "reason": reason or f"{kind} {model_id}",
        "created_at": NOW - age,
        "not_before": None,
        "delivered_at": None,
    }
    if status:
        row["status"] = status
    return row


def event(
    age: float,
    name: str,
    message: str,
    *,
    host_id: str | None = None,
    model_id: str | None = None,
    action_id: str | None = None,
    duration: float | None = None,
) -> Doc:
    return {
        "at": NOW - age,
        "event": name,
        "host_id": host_id,
        "model_id": model_id,
        "action_id": action_id,
        "message": message,
        "duration_seconds": duration,
    }


def assignment(model_id: str, host_id: str, memory_mb: int, reason: str, **extra: Any) -> Doc:
    return {
        "model_id": model_id,
        "host_id": host_id,
        "runtime": "llama.cpp",
        "memory_mb": memory_mb,
        "reason": reason,
        **extra,
    }


def candidate(
    host_id: str, *, rejection: str | None = None, detail: str = "", **score: float
) -> Doc:
    if rejection:
        return {"host_id": host_id, "rejection": rejection, "detail": detail}
    chosen = bool(score.pop("chosen", 0.0))
    components = [{"name": k, "value": v} for k, v in sorted(score.items())]
    total = round(sum(score.values()), 4)
    return {"host_id": host_id, "score": total, "components": components, "chosen": chosen}


def base_document(*, mode: str = "recommend", revision: str = "4f2c9a1") -> Doc:
    """The parts every situation shares: controller identity, mode from git, revisions."""
    return {
        "schema_version": 1,
        "now": NOW,
        "controller": {
            "controller_id": "ctl-main",
            "term": 3,
            "holds_authority": True,
            "lease_expires_at": NOW + 45,
            "plan_generation": "g-0042",
            "state_dir": "/var/lib/gridctl",
            "started_at": NOW - 86_400,
            "version": "0.1.0",
        },
        "mode": {"effective": mode, "desired": mode, "override": None, "refused_automatic": None},
        "desired": {
            "source": "git",
            "directory": "policies",
            "revision": revision,
            "dirty": False,
            "last_good_revision": revision,
            "last_good_at": NOW - 600,
            "latest_seen_revision": revision,
            "rejected_revision": None,
            "rejected": [],
            "warnings": [],
        },
        "hosts": [],
        "profiles": [],
        "model_count": 0,
        "models": [],
        "tombstones": [],
        "forecasts": [],
        "plan": None,
        "reconciliation": None,
        "pending_commands": [],
        "delivered_pending_action_ids": [],
        "withdrawn_destructive": [],
        "unmet_constraints": [],
        "revisions": {"dirty": 12, "processed": 12, "success": 12, "safety": 11},
        "last_tick": {"at": NOW - 4, "duration_ms": 38.5, "ok": True, "error": None},
        "last_successful_tick_duration_ms": 38.5,
        "delivery_safety_error": None,
        "warnings": [],
        "history": [],
        "admission": [],
    }
