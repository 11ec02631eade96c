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
        self._seen: dict[tuple[str, str, str], str] = {}

    def __call__(self, endpoint: str, modality: str, text: str) -> str:
        key = (endpoint, modality, text)
        found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = classify_workload(self.catalog, endpoint, modality, text)
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
    log = MinuteLog()
    observations: list[RequestObservation] = []
    ranked: dict[str, list[str]] = {}

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

    for arrival in arrivals:
        workload = classify(arrival.endpoint, arrival.modality, arrival.text)
        log.workload_counts[workload] = log.workload_counts.get(workload, 0) + 1
        if arrival.model is not None:
            log.named_counts[arrival.model] = log.named_counts.get(arrival.model, 0) + 1
            target: str | None = arrival.model
        else:
            target = mapping.get(workload)
            if not pool.get(target or ""):
                target = next((m for m in scorers(workload) if pool.get(m)), target)
        choices = pool.get(target or "", [])
        outcome, latency, model, host, queue = "rejected", 0.0, None, None, 0
        if choices:
            replica = (
                choices[0]
                if len(choices) == 1
                else min(choices, key=lambda r: (r.used / r.capacity, r.host_id))
            )
            model, host = replica.model_id, replica.host_id
            replica.used += 1
            load = replica.used / replica.capacity
            if load > 1.0:
                outcome = "error"
                queue = int(replica.used - replica.capacity)
                latency = replica.service_seconds * (1.0 + load)
                log.overloaded.add(model)
            else:
                outcome = "ok"
                latency = replica.service_seconds * (1.0 + 0.5 * load * load)
        profile = profiles.get(model or "")
        suitability = profile.workload_scores.get(workload, 0.0) if profile else 0.0
        slo = profile.latency_slo_ms if profile and profile.latency_slo_ms else None
        latency_ms = latency * 1000.0
        log.served.append(
            Served(
                arrival,
                workload,
                model if outcome == "ok" else None,
                outcome,
                latency_ms,
                suitability if outcome == "ok" else 0.0,
                outcome == "ok" and (slo is None or latency_ms <= slo),
                host,
            )
        )
        session = sessions.get(arrival.session)
        if session is None:
            session = sessions[arrival.session] = affinity_hash(arrival.session)
        observations.append(
            RequestObservation(
                t=arrival.t + latency,
                endpoint=arrival.endpoint,
                model=arrival.model,
                served_model=model,
                host_id=host,
                outcome=outcome,
                status=STATUS[outcome],
                service_seconds=latency,
                queue_depth=queue,
                input_units=arrival.input_units,
                output_units=arrival.output_units if outcome == "ok" else 0,
                modality=arrival.modality,
                workload=workload,
                session=session,
                artifact_sha256=profile.artifact.sha256 if profile else None,
            )
        )
    return log, observations
