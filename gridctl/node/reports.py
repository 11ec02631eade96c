"""What the node tells the controller: registration and heartbeat bodies, built purely.

Inputs are the durable records plus one resource sample; the output follows
``schemas/wire/registration.schema.json`` and ``heartbeat.schema.json``. A heartbeat
is full (the whole inventory) or a lease renewal naming the last full one's digest;
``gridctl.node.inventory`` decides which. Ages,
not timestamps, are reported (the controller turns them into its own clock at
receipt, so node clock skew cannot bypass residency or cooldown rules).

A ready (or draining) child that passes its health probe is advertised with its
``endpoint`` and ``max_concurrency`` in its residency row, and the envelope then
carries the host's private ``engine_api_key`` so the controller's router can
forward; the key travels only inside this authenticated envelope.

A split stage host lists the stages it serves now in ``split_stages`` (each with its
tunnel's ``host:port``, never the stage server's), and a residency whose engine
coordinates a split names its coordinator term (``split_term``). Both are left out
when there is nothing to say, so an older controller reads the same envelope.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from gridctl.config.splitstages import stage_json
from gridctl.domain.fleet import ObservedStage
from gridctl.domain.states import HostState, ResidencyState
from gridctl.node.gpus import GpuFacts
from gridctl.node.records import CachedArtifact, Receipt, ResidencyRecord, Transfer
from gridctl.printable import lines, one_line
from gridctl.transport import address_family

SCHEMA_VERSION = 1
CAPABILITIES = ["load", "warm", "drain", "unload", "evict"]
# advertised only by a node that can serve a split's stage (``node.stagecommands``)
SPLIT_CAPABILITIES = ["split_claim", "split_release"]
_ADVERTISED = (ResidencyState.READY, ResidencyState.DRAINING)


@dataclass(frozen=True)
class HostFacts:
    """Static facts of this host from ``gridctl node start``."""

    host_id: str
    capacity_mb: int
    reserved_mb: int = 0
    failure_domain: str = "default"
    tags: tuple[str, ...] = ()
    runtimes: tuple[str, ...] = ("llama.cpp",)
    qualified_runtimes: tuple[str, ...] | None = None  # None: never qualified, not reported
    backends: tuple[str, ...] = ("cpu",)
    external_mb: int | None = None  # None = measure it
    throttle_fraction: float = 1.0  # capacity offered to new placement while throttled
    gpus: GpuFacts | None = None  # None = unknown (no NVML), reported as null, never 0
    advertise: str | None = None  # the address engines are reached on (joined nodes)


@dataclass(frozen=True)
class ResourceSample:
    """One measurement of the machine (psutil and the artifact disk)."""

    total_mb: int
    available_mb: int
    managed_rss_mb: int
    disk_free_mb: int
    disk_total_mb: int


def external_use_mb(facts: HostFacts, sample: ResourceSample) -> int:
    """Memory used by workloads gridctl does not manage.

    Managed children are subtracted exactly once; the reserve covers the host's
    own use. A logical node sharing a machine passes a fixed value instead.
    """
    if facts.external_mb is not None:
        return facts.external_mb
    used = sample.total_mb - sample.available_mb
    return max(0, used - sample.managed_rss_mb - facts.reserved_mb)


def resources(facts: HostFacts, sample: ResourceSample) -> dict[str, object]:
    claimed = facts.qualified_runtimes
    qualification = {} if claimed is None else {"qualified_runtimes": list(claimed)}
    return {
        **qualification,
        "capacity_mb": facts.capacity_mb,
        "reserved_mb": facts.reserved_mb,
        "external_mb": external_use_mb(facts, sample),
        "runtimes": list(facts.runtimes),
        "backends": list(facts.backends),
        "failure_domain": facts.failure_domain,
        "tags": list(facts.tags),
        "disk_free_mb": sample.disk_free_mb,
        "disk_total_mb": sample.disk_total_mb,
        "throttle_fraction": facts.throttle_fraction,
        "gpu_count": facts.gpus.count if facts.gpus else None,
        "gpu_memory_mb": facts.gpus.memory_mb if facts.gpus else None,
    }


MAX_AGE_SECONDS = 315_576_000  # the wire schemas' bound on ages (ten years)


def _age(since: float | None, now: float) -> float | None:
    return None if since is None else round(min(max(0.0, now - since), MAX_AGE_SECONDS), 3)


GGUF_TEXT_LIMITS = {"architecture": 128, "name": 512, "unreadable": 512}


def _printable_gguf(summary: dict[str, object]) -> dict[str, object]:
    """A GGUF header summary with its strings made printable: they come from the file."""
    clean = dict(summary)
    for key, limit in GGUF_TEXT_LIMITS.items():
        value = clean.get(key)
        if isinstance(value, str):
            clean[key] = (lines if key == "unreadable" else one_line)(value, limit)
    return clean


def residency_row(
    record: ResidencyRecord,
    now: float,
    *,
    endpoint: str | None,
    max_concurrency: int,
    shared_engine: bool = False,
) -> dict[str, object]:
    row: dict[str, object] = {
        "model_id": record.model_id,
        "memory_mb": record.memory_mb if record.has_process else 0,
        "state": record.state.value,
        "artifact_sha256": record.artifact_sha256,
        "runtime": record.runtime,
        "loaded_age_seconds": _age(record.loaded_at, now),
        "last_used_age_seconds": _age(record.last_used_at, now),
        "managed": True,
        "ownership": "managed",
        "active_requests": record.active_requests,
    }
    if record.split_term is not None and record.has_process:
        row["split_term"] = record.split_term
    if endpoint is not None:
        row["endpoint"] = endpoint
        row["max_concurrency"] = max_concurrency
        if shared_engine:  # a node-wide limit: never credited to one model's batch width
            row["shared_engine"] = True
    return row


def cached_row(entry: CachedArtifact, now: float) -> dict[str, object]:
    row: dict[str, object] = {
        "model_id": entry.model_id,
        "artifact_sha256": entry.sha256,
        "cached_at": entry.cached_at,
        "cached_age_seconds": _age(entry.cached_at, now),
        "size_bytes": entry.size_bytes,
        "provenance": entry.provenance,
        "predictive": entry.provenance == "predictive",
        "last_used_age_seconds": _age(entry.last_used_at, now),
    }
    if entry.gguf is not None:
        row["gguf"] = _printable_gguf(entry.gguf)
    return row


def transfer_row(transfer: Transfer) -> dict[str, object]:
    return {
        "model_id": transfer.model_id,
        "artifact_sha256": transfer.sha256,
        "source": one_line(transfer.source, 2048),
        "bytes_done": transfer.bytes_done,
        "bytes_total": transfer.bytes_total,
        "rate_bytes_per_second": transfer.rate_bytes_per_second,
    }


def allocator_envelope(
    state: HostState,
    records: Sequence[ResidencyRecord],
    cached: Sequence[CachedArtifact],
    now: float,
    *,
    endpoint_of: Callable[[ResidencyRecord], str | None],
    engine_api_key: str,
    max_concurrency: int,
    protection: dict[str, object] | None = None,
    transfers: Sequence[Transfer] = (),
    artifact_mirror: str | None = None,
    artifact_bytes_fetched: int = 0,
    shares_engine: Callable[[ResidencyRecord], bool] | None = None,
    stage_host: bool = False,
    split_stages: Sequence[ObservedStage] = (),
) -> dict[str, object]:
    """The allocator envelope; ``protection`` adds the router's concurrency multiplier
    and the local protection reasons (no sensor values leave the host); ``transfers``
    are the artifact downloads running now; ``artifact_mirror`` is where peers may
    fetch this node's verified artifacts; ``split_stages`` are the split stages this
    host serves now (the key is left out when it serves none)."""
    rows = []
    advertised = False
    for record in records:
        endpoint = None
        if record.state in _ADVERTISED and record.has_process and not record.fenced:
            endpoint = endpoint_of(record)
        advertised = advertised or endpoint is not None
        shared = shares_engine is not None and shares_engine(record)
        rows.append(
            residency_row(
                record,
                now,
                endpoint=endpoint,
                max_concurrency=max_concurrency,
                shared_engine=shared,
            )
        )
    envelope: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "state": state.value,
        "cached_models": [cached_row(c, now) for c in cached],
        "residencies": rows,
        "actuator_capabilities": CAPABILITIES + SPLIT_CAPABILITIES if stage_host else CAPABILITIES,
        "transfers": [transfer_row(t) for t in transfers],
        "artifact_bytes_fetched_total": artifact_bytes_fetched,
    }
    if artifact_mirror is not None:
        envelope["artifact_mirror"] = artifact_mirror
    if split_stages:
        ordered = sorted(split_stages, key=lambda s: (s.model_id, s.stage_index, s.endpoint))
        envelope["split_stages"] = [stage_json(stage) for stage in ordered]
    if advertised:
        envelope["engine_api_key"] = engine_api_key
    if protection is not None:
        envelope["concurrency_multiplier"] = protection["concurrency_multiplier"]
        envelope["protection"] = {
            "reasons": protection.get("reasons", []),
            "unknown_sensors": protection.get("unknown_sensors", []),
        }
    return envelope


def ready_models(records: Sequence[ResidencyRecord]) -> list[str]:
    """The legacy top-level ``models``: ready and routable now."""
    return sorted(r.model_id for r in records if r.state is ResidencyState.READY and not r.fenced)


def registration(
    facts: HostFacts,
    sample: ResourceSample,
    envelope: dict[str, object],
    models: list[str],
    *,
    inventory_digest: str | None = None,
) -> dict[str, object]:
    body: dict[str, object] = {
        "role": "allocator",
        "host_id": facts.host_id,
        "models": models,
        "resources": resources(facts, sample),
        "allocator": envelope,
    }
    if inventory_digest is not None:
        body["inventory_digest"] = inventory_digest
    if facts.advertise:
        body["network"] = {
            "advertise": facts.advertise,
            "address_family": address_family(facts.advertise),
        }
    return body


def heartbeat(
    facts: HostFacts,
    sample: ResourceSample,
    envelope: dict[str, object],
    *,
    receipts: Sequence[Receipt],
    request_commands: bool,
    active_tasks: int,
    queue_depth: int,
    inventory_digest: str | None = None,
) -> dict[str, object]:
    """A full heartbeat: the whole inventory, labelled with ``inventory_digest``."""
    body: dict[str, object] = {
        "node_id": facts.host_id,
        "load": {"active_tasks": active_tasks, "queue_depth": queue_depth},
        "resources": resources(facts, sample),
        "allocator": envelope,
        "request_commands": request_commands,
        "acknowledgements": [r.acknowledgement() for r in receipts],
    }
    if inventory_digest is not None:
        body["inventory_digest"] = inventory_digest
    return body


def lease(
    host_id: str,
    inventory_digest: str,
    *,
    receipts: Sequence[Receipt],
    request_commands: bool,
    active_tasks: int,
    queue_depth: int,
) -> dict[str, object]:
    """A lease renewal: alive, the inventory unchanged since the full one labelled
    ``inventory_digest``; load and receipts go on every beat."""
    return {
        "node_id": host_id,
        "inventory_digest": inventory_digest,
        "load": {"active_tasks": active_tasks, "queue_depth": queue_depth},
        "request_commands": request_commands,
        "acknowledgements": [r.acknowledgement() for r in receipts],
    }
