"""Routing physics for one simulated minute.

Requests are scored against what was actually READY and selected when they
arrived: a named request goes to its model, an unbound one to the model the
strategy's latest map chose for its classified workload when that is ready,
else to the best-scoring ready model (the router's rule), else an honest 503. Each ready replica
serves ``replica_concurrency`` requests at a time, its service time scaled by
the host's speed and thermal derating; routed device-time beyond that
capacity becomes deterministic failures, latency inflation and queue depth,
all reported as the production router reports them: one ``RequestObservation``
per request, which the lab's controller feeds to the production learners.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from heapq import heapify, heapreplace

from gridctl.demand import affinity_hash, classify_workload
from gridctl.demand.intake import RequestObservation
from gridctl.domain import ModelProfile, ResidencyState, WorkloadCatalog
from gridctl.lab.arrivals import MINUTE, Arrival
from gridctl.lab.nodes import SimNode

STATUS = {"ok": 200, "error": 502, "rejected": 503}  # as the router answers


@dataclass(slots=True)
class Replica:
    host_id: str
    model_id: str
    service_seconds: float
    capacity: float  # requests this replica can complete this minute
    used: int = 0


@dataclass(slots=True)
class Served:
    """One request's fate, for scoring."""

    arrival: Arrival
    workload: str
    model: str | None  # the model that served it (None: rejected)
    outcome: str  # ok | error | rejected
    latency_ms: float
    suitability: float
    within_slo: bool
    host_id: str | None = None


@dataclass
class MinuteLog:
    served: list[Served] = field(default_factory=list)
    workload_counts: dict[str, int] = field(default_factory=dict)
    named_counts: dict[str, int] = field(default_factory=dict)
    overloaded: set[str] = field(default_factory=set)


class Classifier:
    """The production classifier with its answers remembered per (endpoint, text)."""

    def __init__(self, catalog: WorkloadCatalog) -> None:
        self.catalog = catalog
        self.seen: dict[tuple[str, str, str], str] = {}  # what it answered, per request shape

    def __call__(self, endpoint: str, modality: str, text: str) -> str:
        key = (endpoint, modality, text)
        found = self.seen.get(key)
        if found is None:
            found = self.seen[key] = classify_workload(self.catalog, endpoint, modality, text)
        return found


def replicas(
    nodes: Sequence[SimNode], profiles: Mapping[str, ModelProfile]
) -> dict[str, list[Replica]]:
    """Every READY replica on a node that is up, with this minute's capacity."""
    found: dict[str, list[Replica]] = {}
    for node in nodes:
        if not node.up:
            continue
        for model, row in sorted(node.residencies.items()):
            profile = profiles.get(model)
            if row.state is not ResidencyState.READY or profile is None:
                continue
            service = profile.expected_service_seconds / (node.host.speed * node.derate())
            capacity = profile.replica_concurrency * MINUTE / max(service, 1e-3)
            found.setdefault(model, []).append(Replica(node.host_id, model, service, capacity))
    return found


def serve_minute(
    arrivals: Sequence[Arrival],
    pool: dict[str, list[Replica]],
    mapping: Mapping[str, str | None],
    profiles: Mapping[str, ModelProfile],
    classify: Classifier,
    sessions: dict[str, str],
) -> tuple[MinuteLog, list[RequestObservation]]:
    """Each arrival in order meets the least loaded ready replica of its target (ties by
    host, then list order): a per-model heap keyed (load, host, position) replaces a scan
    of the model's replicas, and each model's profile facts are read once."""
    log = MinuteLog()
    observations: list[RequestObservation] = []
    served = log.served
    workload_counts = log.workload_counts
    named_counts = log.named_counts
    overloaded = log.overloaded
    ranked: dict[str, list[str]] = {}
    heaps: dict[str, list[tuple[float, str, int, Replica]]] = {}  # per model
    routed: dict[str, list[tuple[float, str, int, Replica]]] = {}  # per unbound workload
    seen = classify.seen
    facts: dict[str | None, tuple[Mapping[str, float], float | None, str | None]] = {}

    def scorers(workload: str) -> list[str]:
        """Models scoring the workload, best first (the router's fallback order)."""
        found = ranked.get(workload)
        if found is None:
            rows = sorted(
                (-p.workload_scores.get(workload, 0.0), name)
                for name, p in profiles.items()
                if p.workload_scores.get(workload, 0.0) > 0
            )
            found = ranked[workload] = [name for _, name in rows]
        return found

    def heap_of(target: str | None) -> list[tuple[float, str, int, Replica]]:
        """The target's replicas keyed (load, host, position), made on first use."""
        found = heaps.get(target or "")
        if found is None:
            choices = pool.get(target or "", [])
            found = heaps[target or ""] = [
                (r.used / r.capacity, r.host_id, i, r) for i, r in enumerate(choices)
            ]
            heapify(found)
        return found

    for arrival in arrivals:
        endpoint, modality = arrival.endpoint, arrival.modality
        workload = seen.get((endpoint, modality, arrival.text)) or classify(
            endpoint, modality, arrival.text
        )
        workload_counts[workload] = workload_counts.get(workload, 0) + 1
        requested = arrival.model
        if requested is not None:
            named_counts[requested] = named_counts.get(requested, 0) + 1
            heap = heaps.get(requested)
            if heap is None:
                heap = heap_of(requested)
        else:
            heap = routed.get(workload)
            if heap is None:  # the same target for the whole minute: the pool is fixed
                target = mapping.get(workload)
                if not pool.get(target or ""):
                    target = next((m for m in scorers(workload) if pool.get(m)), target)
                heap = routed[workload] = heap_of(target)
        outcome, latency, model, host, queue = "rejected", 0.0, None, None, 0
        if heap:
            _, _, place, replica = heap[0]
            model, host = replica.model_id, replica.host_id
            replica.used += 1
            load = replica.used / replica.capacity
            heapreplace(heap, (load, host, place, replica))
            if load > 1.0:
                outcome = "error"
                queue = int(replica.used - replica.capacity)
                latency = replica.service_seconds * (1.0 + load)
                overloaded.add(model)
            else:
                outcome = "ok"
                latency = replica.service_seconds * (1.0 + 0.5 * load * load)
        fact = facts.get(model)
        if fact is None:
            profile = profiles.get(model or "")
            fact = facts[model] = (
                (profile.workload_scores, profile.latency_slo_ms or None, profile.artifact.sha256)
                if profile
                else ({}, None, None)
            )
        scores, slo, sha = fact
        latency_ms = latency * 1000.0
        ok = outcome == "ok"
        served.append(
            Served(
                arrival,
                workload,
                model if ok else None,
                outcome,
                latency_ms,
                scores.get(workload, 0.0) if ok else 0.0,
                ok and (slo is None or latency_ms <= slo),
                host,
            )
        )
        raw = arrival.session
        session = sessions.get(raw)
        if session is None:
            session = sessions[raw] = affinity_hash(raw)
        observations.append(
            RequestObservation(
                t=arrival.t + latency,
                endpoint=endpoint,
                model=requested,
                served_model=model,
                host_id=host,
                outcome=outcome,
                status=STATUS[outcome],
                service_seconds=latency,
                queue_depth=queue,
                input_units=arrival.input_units,
                output_units=arrival.output_units if ok else 0,
                modality=modality,
                workload=workload,
                session=session,
                artifact_sha256=sha,
            )
        )
    return log, observations
