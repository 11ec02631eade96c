"""Read a fleet snapshot (``schemas/wire/fleet-snapshot.schema.json``) into domain objects.

Fail closed: an unknown host lifecycle or a malformed residency or split stage row
never makes a host look healthier than it is. The bad row is excluded and the host is
reported ``unhealthy`` so the planner places nothing new there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gridctl.config import resolving
from gridctl.config.schemas import conforms, validator
from gridctl.config.splitstages import stages_from_rows
from gridctl.config.yamlsource import escape_pointer_token
from gridctl.domain import (
    FleetSnapshot,
    HostSnapshot,
    HostState,
    LearnedOnHost,
    ModelDemand,
    Ownership,
    Residency,
    ResidencyState,
)
from gridctl.errors import WireError

SNAPSHOT_SCHEMA = "wire/fleet-snapshot.schema.json"
RESIDENCY_SCHEMA = "defs/residency.schema.json"
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024


def _first_error(relative: str, data: Any) -> WireError | None:
    if conforms(relative, data):
        return None
    errors = sorted(
        validator(relative).iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]
    )
    if not errors:
        return None
    error = errors[0]
    pointer = "".join("/" + escape_pointer_token(str(t)) for t in error.absolute_path)
    return WireError(error.message[:300], pointer)


def residency_from_row(row: Any, now: float) -> Residency | None:
    """A residency from one wire row, or None when the row is malformed."""
    if _first_error(RESIDENCY_SCHEMA, row) is not None:
        return None
    if "ownership" in row:
        ownership = Ownership(row["ownership"])
    else:
        ownership = Ownership.MANAGED if row.get("managed", True) else Ownership.EXTERNAL
    loaded_at = row.get("loaded_at")
    if row.get("loaded_age_seconds") is not None:
        loaded_at = now - float(row["loaded_age_seconds"])
    last_used_at = row.get("last_used_at")
    if row.get("last_used_age_seconds") is not None:
        last_used_at = now - float(row["last_used_age_seconds"])
    return Residency(
        model_id=row["model_id"],
        memory_mb=row["memory_mb"],
        state=ResidencyState(row["state"]),
        artifact_sha256=resolving.canonical_sha256(row.get("artifact_sha256")),
        runtime=row.get("runtime"),
        loaded_at=loaded_at,
        last_used_at=last_used_at,
        ownership=ownership,
        pinned=bool(row.get("pinned", False)),
        active_requests=int(row.get("active_requests", 0)),
        max_concurrency=_live_width(row),
        split_term=row.get("split_term"),
    )


def _live_width(row: Any) -> int | None:
    """A ready single-model engine's slots; a shared (multi-model) engine's limit and a
    closed engine (0) prove no batch width."""
    value = row.get("max_concurrency")
    if row.get("state") != "ready" or row.get("shared_engine") or not value:
        return None
    return int(value)


def host_state_of(value: Any) -> HostState:
    try:
        return HostState(value)
    except ValueError:
        return HostState.UNHEALTHY


def host_from_json(host: dict[str, Any], now: float) -> HostSnapshot:
    """One host of a snapshot; the host must already be schema-valid."""
    resources = resolving.resources_from_report(host["resources"])
    allocator = host.get("allocator") or {"state": "accepting"}
    state = host_state_of(allocator.get("state"))
    residencies: list[Residency] = []
    for row in allocator.get("residencies", []):
        residency = residency_from_row(row, now)
        if residency is None:
            state = HostState.UNHEALTHY
            continue
        residencies.append(residency)
    stages, malformed = stages_from_rows(allocator.get("split_stages"))
    if malformed:
        state = HostState.UNHEALTHY
    failed = host.get("failed_attempts")
    learned = host.get("learned")
    cached = allocator.get("cached_models")
    return HostSnapshot(
        host_id=host["host_id"],
        resources=resources,
        state=state,
        last_heartbeat=host.get("last_heartbeat"),
        residencies=tuple(sorted(residencies, key=_residency_order)) if residencies else (),
        cached=resolving.cached_from_list(cached) if cached else (),
        failed_attempts=tuple(sorted((str(k), int(v)) for k, v in failed.items()))
        if failed
        else (),
        kind=str(host.get("kind", "managed")),
        learned=_learned(learned) if learned else (),
        split_stages=stages,
    )


def _learned(rows: list[dict[str, Any]]) -> tuple[LearnedOnHost, ...]:
    return tuple(
        sorted(
            (
                LearnedOnHost(
                    model_id=str(row["model_id"]),
                    load_seconds=_optional_float(row.get("load_seconds")),
                    warm_seconds=_optional_float(row.get("warm_seconds")),
                    tokens_per_second=_optional_float(row.get("tokens_per_second")),
                    speed_confidence=float(row.get("speed_confidence") or 0.0),
                    latency_ms=_optional_float(row.get("latency_ms")),
                )
                for row in rows
            ),
            key=lambda r: r.model_id,
        )
    )


def _residency_order(residency: Residency) -> tuple[str, ResidencyState, int]:
    return (residency.model_id, residency.state, residency.memory_mb)


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def demand_from_json(row: dict[str, Any]) -> ModelDemand:
    return ModelDemand(
        model_id=row["model_id"],
        requests_per_minute=float(row.get("requests_per_minute", 0.0)),
        offered_concurrency=float(row.get("offered_concurrency", 0.0)),
        queue_depth=float(row.get("queue_depth", 0.0)),
        p95_latency_ms=row.get("p95_latency_ms"),
        error_rate=float(row.get("error_rate", 0.0)),
        trend_per_minute=float(row.get("trend_per_minute", 0.0)),
        confidence=float(row.get("confidence", 1.0)),
        sample_count=int(row.get("sample_count", 0)),
        correlated_requests_per_minute=float(row.get("correlated_requests_per_minute", 0.0)),
        observed_peak_requests_per_minute=float(row.get("observed_peak_requests_per_minute", 0.0)),
    )


def snapshot_from_json(data: Any) -> FleetSnapshot:
    """Validate and convert a snapshot document; raises ``WireError`` naming the field."""
    error = _first_error(SNAPSHOT_SCHEMA, data)
    if error is not None:
        raise error
    now = float(data["now"])
    seen: set[str] = set()
    hosts: list[HostSnapshot] = []
    for index, host in enumerate(data["hosts"]):
        if host["host_id"] in seen:
            raise WireError(f"duplicate host_id {host['host_id']!r}", f"/hosts/{index}/host_id")
        seen.add(host["host_id"])
        hosts.append(host_from_json(host, now))
    demand: dict[str, ModelDemand] = {}
    for index, row in enumerate(data.get("demand", [])):
        if row["model_id"] in demand:
            raise WireError(f"duplicate demand for {row['model_id']!r}", f"/demand/{index}")
        demand[row["model_id"]] = demand_from_json(row)
    extras = {k: data[k] for k in ("pending_actions", "history") if k in data}
    return FleetSnapshot(
        now=now,
        hosts=tuple(sorted(hosts, key=lambda h: h.host_id)),
        demand=tuple(demand[k] for k in sorted(demand)),
        extras=extras,
    )


def load_snapshot(path: str | Path) -> FleetSnapshot:
    """Read a snapshot file; raises ``WireError`` with the file named on bad input."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_SNAPSHOT_BYTES:
            raise WireError(f"{file}: snapshot larger than {MAX_SNAPSHOT_BYTES} bytes")
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise WireError(f"{file}: cannot read snapshot: {exc.strerror}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(f"{file}: not valid JSON: {exc}") from exc
    try:
        return snapshot_from_json(data)
    except WireError as exc:
        raise WireError(f"{file}: {exc.args[0]}") from exc
