"""Registry truth: what every node last told the controller, merged per stable host.

Registrations and heartbeats are validated against their wire schemas before
anything changes; a malformed envelope is refused whole. Inside a valid
envelope each residency row, and each split stage row (``config.splitstages``), is
checked on its own: a bad row is excluded and makes that host unhealthy (fail
closed). Node clocks are never trusted for ages: loaded/last-used ages become
timestamps at receipt time. Router-owned active-request counters live here too and
survive heartbeats.

A heartbeat naming an ``inventory_digest`` without ``resources`` or ``allocator`` is a
lease renewal (``renew``): it says the host is alive and its inventory is the one it
last sent in full under that digest. When the record holds that digest only the
liveness and load move (no envelope validation, no record rebuild); otherwise the
controller asks for the full inventory and changes nothing of the host.

A residency the node reports READY is only inventory. It counts as WARMING in
the planning snapshot until the controller's own probe of the child engine
corroborates it (``corroborate``); only corroborated routes are routable.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from gridctl.config import resolving
from gridctl.config.schemas import conforms, fill_defaults, validator
from gridctl.config.snapshots import host_state_of, residency_from_row
from gridctl.config.splitstages import stages_from_rows
from gridctl.config.yamlsource import escape_pointer_token
from gridctl.controller.hostclaims import ForeignClaims, ReportSequences, check_rows_are_own
from gridctl.domain import (
    CachedArtifact,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    ModelDemand,
    ObservedStage,
    Ownership,
    Residency,
    ResidencyState,
)
from gridctl.domain.fleet import planned_last_use
from gridctl.errors import WireError
from gridctl.routes import EngineRoute

REGISTRATION_SCHEMA = "wire/registration.schema.json"
HEARTBEAT_SCHEMA = "wire/heartbeat.schema.json"


def validate_wire(relative: str, payload: Any) -> None:
    """Raise ``WireError`` naming the first bad field of ``payload``."""
    if conforms(relative, payload):
        return
    found: list[tuple[str, str]] = []
    for error in validator(relative).iter_errors(payload):
        pointer = "".join("/" + escape_pointer_token(str(t)) for t in error.absolute_path)
        if error.validator == "required" and isinstance(error.instance, dict):
            for name in error.validator_value:
                if name not in error.instance:
                    found.append(
                        (
                            f"{pointer}/{escape_pointer_token(name)}",
                            f"missing required field {name!r}",
                        )
                    )
            continue
        found.append((pointer, error.message[:300]))
    if found:
        pointer, message = sorted(found)[0]
        raise WireError(message, pointer)


@dataclass
class HostRecord:
    host_id: str
    node_id: str
    role: str
    resources: HostResources
    state: HostState
    reported_state: str
    registered_at: float
    last_heartbeat: float
    residencies: tuple[Residency, ...] = ()
    cached: tuple[CachedArtifact, ...] = ()
    unhealthy_reasons: tuple[str, ...] = ()
    capabilities: tuple[str, ...] = ()
    routes: dict[str, EngineRoute] = field(default_factory=dict)
    queue_depth: int = 0
    active_tasks: int = 0
    # model -> requests waiting for a slot of its engine here (the runtime's own queue)
    queued: dict[str, int] = field(default_factory=dict)
    concurrency_multiplier: float = 1.0
    artifact_mirror: str | None = None  # where peers fetch this host's verified artifacts
    transfers: tuple[dict[str, Any], ...] = ()  # artifact downloads running at the heartbeat
    artifacts: tuple[dict[str, Any], ...] = ()  # cached entries as reported (gguf, provenance)
    artifact_bytes_fetched: int = 0  # the node's network bytes received (a counter)
    network: dict[str, Any] = field(default_factory=dict)  # advertised address and family
    raw_resources: Any = None  # the resources as last reported, before defaults
    inventory_digest: str | None = None  # the node's label of the last full inventory
    # the split stages it serves under accepted claims (None: none), from the envelope
    split_stages: tuple[ObservedStage, ...] | None = None


def is_lease(payload: Any) -> bool:
    """A lease renewal: names the inventory it repeats and carries none of it."""
    return (
        isinstance(payload, dict)
        and "inventory_digest" in payload
        and "allocator" not in payload
        and "resources" not in payload
    )


def _digest_of(payload: dict[str, Any], prior: HostRecord | None) -> str | None:
    """A full report's own label; a report without an envelope keeps the prior one."""
    if payload.get("allocator") is None:
        return prior.inventory_digest if prior is not None else None
    digest = payload.get("inventory_digest")
    return digest if isinstance(digest, str) else None


def _artifact_rows(envelope: Any) -> tuple[dict[str, Any], ...]:
    rows = envelope.get("cached_models") if isinstance(envelope, dict) else None
    return tuple(r for r in rows or () if isinstance(r, dict))


def _transfers(envelope: Any) -> tuple[dict[str, Any], ...]:
    rows = envelope.get("transfers") if isinstance(envelope, dict) else None
    return tuple(r for r in rows or () if isinstance(r, dict))


def _mirror(envelope: Any) -> str | None:
    value = envelope.get("artifact_mirror") if isinstance(envelope, dict) else None
    return value if isinstance(value, str) else None


def _bytes_fetched(envelope: Any, prior: HostRecord | None) -> int:
    if isinstance(envelope, dict):
        return _advertised(envelope.get("artifact_bytes_fetched_total")) or 0
    return prior.artifact_bytes_fetched if prior is not None else 0


def _steady_ages(
    cached: tuple[CachedArtifact, ...], prior: HostRecord | None
) -> tuple[CachedArtifact, ...]:
    """Keep the first-seen controller-clock ``cached_at`` of an unchanged entry, so the
    jitter of reported ages does not make every heartbeat a new planning input."""
    if prior is None:
        return cached
    seen = {(c.model_id, c.artifact_sha256): c.cached_at for c in prior.cached}
    steady = []
    for entry in cached:
        first = seen.get((entry.model_id, entry.artifact_sha256))
        steady.append(replace(entry, cached_at=first) if first is not None else entry)
    return tuple(steady)


STEADY_AGE_SECONDS = 2.0  # reported ages jitter by the request's transit; less is no news


def _steady_time(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or abs(new - old) > STEADY_AGE_SECONDS:
        return new
    return old


def _steady_loaded(new: float | None, old: float | None) -> float | None:
    """A residency still in the same state was not loaded again later: its load time
    never moves forward. A node whose wall clock stepped back reports the age of an
    engine it loaded before the step as zero on every heartbeat (it cannot be negative);
    taken at its word, that replica would look freshly loaded each time, and the
    scale-down's keep order (the longest-loaded replica stays) would flip between
    heartbeats and withdraw a drain it had just issued."""
    if new is not None and old is not None and new > old:
        return old
    return _steady_time(new, old)


def _steady_residencies(parsed: list[Residency], prior: HostRecord | None) -> tuple[Residency, ...]:
    """Keep the prior controller-clock ``loaded_at``/``last_used_at`` of a residency whose
    reported age moved by no more than transit jitter (as ``_steady_ages`` does for the
    cache), so an unchanged host reads the same to the planner on every heartbeat; the
    load time of a residency in the same state only ever moves back (``_steady_loaded``)."""
    seen = {(r.model_id, r.state): r for r in prior.residencies} if prior else {}
    steady = []
    for residency in parsed:
        old = seen.get((residency.model_id, residency.state))
        if old is not None:
            residency = replace(
                residency,
                loaded_at=_steady_loaded(residency.loaded_at, old.loaded_at),
                last_used_at=_steady_time(residency.last_used_at, old.last_used_at),
            )
        steady.append(residency)
    return tuple(sorted(steady, key=lambda r: (r.model_id, r.state.value)))


def _prior_mirror(prior: HostRecord | None) -> str | None:
    return prior.artifact_mirror if prior is not None else None


def _multiplier(envelope: Any) -> float:
    """The node's advertised admission multiplier (local protection); 1.0 when absent."""
    value = envelope.get("concurrency_multiplier") if isinstance(envelope, dict) else None
    if isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value <= 1:
        return float(value)
    return 1.0


def _advertised(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


class Registry:
    """Thread-safe store of host records; every mutation validates first."""

    def __init__(self, route_lease_seconds: float | Callable[[], float] = 60.0) -> None:
        self._lock = threading.RLock()
        self._hosts: dict[str, HostRecord] = {}
        # model -> hosts whose record has a route for it: the router's admission reads
        # a model's few replicas instead of scanning every host of a large fleet
        self._route_hosts: dict[str, set[str]] = {}
        self._active: dict[tuple[str, str], int] = {}  # (host, model) -> router-owned count
        self._last_used: dict[str, float] = {}  # model -> controller-clock watermark
        # the policy's route_lease_seconds: a callable reads the revision in force each time
        self._route_lease: Callable[[], float] = (
            route_lease_seconds
            if callable(route_lease_seconds)
            else (lambda: float(route_lease_seconds))
        )
        # a node speaks only for itself, and only forward (``hostclaims``)
        self.foreign_claims = ForeignClaims()
        self.sequences = ReportSequences()
        # heartbeats taken, by kind: "full" (carrying resources or the envelope), "lease"
        # (a renewal of a held inventory), "inventory_asked" (a lease naming one not held)
        self.heartbeat_kinds: dict[str, int] = {"full": 0, "lease": 0, "inventory_asked": 0}
        # how many routes appeared (a new endpoint, never probed): the probe loop probes
        # soon after this moves instead of at its next period
        self.routes_added = 0
        # called (from any thread, possibly under this registry's lock) when one appears:
        # the probe loop's wake-up, so it need not look at the count on a short period
        self.on_route_added: Callable[[], None] | None = None
        # (host, model) -> why the last native-readiness probe refused the route
        self._not_routable: dict[tuple[str, str], str] = {}
        # Private proxy measurements that override self-reported speed in snapshots:
        # host -> (latency ms, tokens/s); set by the router, never exposed in discovery.
        # per (host, model): the router's speed evidence (``Attribution.model_speeds``)
        self.measured: Callable[[], Mapping[tuple[str, str], Any]] | None = None

    @property
    def route_lease_seconds(self) -> float:
        """How long a route stays live after its host's last heartbeat or probe."""
        return self._route_lease()

    def follow_route_lease(self, source: Callable[[], float]) -> None:
        """Read the route lease from ``source`` from now on (the policy in force)."""
        self._route_lease = source

    # -- intake ---------------------------------------------------------------

    def register(self, host_id: str, payload: Any, now: float) -> HostRecord:
        validate_wire(REGISTRATION_SCHEMA, payload)
        if payload["host_id"] != host_id:
            raise WireError("host_id does not match the URL", "/host_id")
        with self._lock:
            self._admit(host_id, payload)
            prior = self._hosts.get(host_id)
            record = self._build(host_id, payload, now, prior, registering=True)
            self._store(host_id, record)
            return record

    def register_external(
        self,
        name: str,
        endpoint: str,
        model_id: str,
        runtime: str,
        now: float,
        *,
        max_concurrency: int = 1,
        capacity_mb: int = 0,
        api_key: str | None = None,
    ) -> HostRecord:
        """Inventory for an engine gridctl does not manage (``gridctl join``): routable once
        probed, counted as capacity evidence, never actuated. ``api_key`` is the engine's
        own key: the probes and the router send it, status never shows it."""
        payload = {
            "role": "external",
            "host_id": name,
            "models": [model_id],
            "resources": {
                "capacity_mb": capacity_mb,
                "runtimes": [runtime],
                "failure_domain": f"external-{name}",
                "tags": ["external"],
            },
            "allocator": {
                "schema_version": 1,
                "state": "accepting",
                "residencies": [
                    {
                        "model_id": model_id,
                        "memory_mb": 0,
                        "state": "ready",
                        "ownership": "external",
                        "managed": False,
                        "runtime": runtime,
                        "endpoint": endpoint,
                        "max_concurrency": max_concurrency,
                    }
                ],
                **({"engine_api_key": api_key} if api_key is not None else {}),
            },
        }
        return self.register(name, payload, now)

    def refresh_external(self, now: float) -> None:
        """External inventory has no heartbeat; its lease is kept by the probe instead."""
        with self._lock:
            for record in self._hosts.values():
                if record.role == "external" and any(
                    r.corroborated_at is not None and now - r.corroborated_at <= 5.0
                    for r in record.routes.values()
                ):
                    record.last_heartbeat = now

    def heartbeat(self, host_id: str, payload: Any, now: float) -> HostRecord:
        validate_wire(HEARTBEAT_SCHEMA, payload)
        with self._lock:
            prior = self._hosts.get(host_id)
            if prior is None:
                raise WireError("host is not registered; PUT /nodes/{host_id} first", "/node_id")
            self._admit(host_id, payload)
            merged = {
                "role": prior.role,
                "host_id": host_id,
                "resources": payload.get("resources"),
                "allocator": payload.get("allocator"),
                "inventory_digest": payload.get("inventory_digest"),
            }
            record = self._build(host_id, merged, now, prior, registering=False)
            self.heartbeat_kinds["full"] += 1
            load = payload.get("load") or {}
            record.queue_depth = int(load.get("queue_depth", 0))
            record.active_tasks = int(load.get("active_tasks", 0))
            self._store(host_id, record)
            return record

    def renew(self, host_id: str, payload: Any, now: float) -> HostRecord | None:
        """Apply a lease renewal (``is_lease``): the host's record with its liveness and
        load moved, or None when the record does not hold the digest the lease names
        (the node must send its full inventory; nothing of the host changes)."""
        validate_wire(HEARTBEAT_SCHEMA, payload)
        with self._lock:
            prior = self._hosts.get(host_id)
            if prior is None:
                raise WireError("host is not registered; PUT /nodes/{host_id} first", "/node_id")
            self.sequences.admit(host_id, payload)  # a lease carries no rows to claim
            if prior.inventory_digest != payload["inventory_digest"]:
                self.heartbeat_kinds["inventory_asked"] += 1
                return None
            self.heartbeat_kinds["lease"] += 1
            load = payload.get("load") or {}
            # a shallow copy (``dataclasses.replace`` re-runs ``__init__``: the larger
            # part of a lease's cost); records are replaced, never changed, on intake
            record = object.__new__(HostRecord)
            record.__dict__.update(prior.__dict__)
            record.last_heartbeat = now
            record.queue_depth = int(load.get("queue_depth", prior.queue_depth))
            record.active_tasks = int(load.get("active_tasks", prior.active_tasks))
            self._hosts[host_id] = record  # the same routes: the route index stands
            return record

    def _admit(self, host_id: str, payload: dict[str, Any]) -> None:
        """Under the lock, before anything changes: the report speaks only for its own
        host and comes after every report already accepted from it."""
        check_rows_are_own(host_id, payload, self.foreign_claims)
        self.sequences.admit(host_id, payload)

    def _store(self, host_id: str, record: HostRecord | None) -> None:
        """Under the lock: put (or, with None, forget) a host's record and keep the
        model -> routed hosts index in step with it."""
        prior = self._hosts.get(host_id)
        before = set(prior.routes) if prior is not None else set()
        after = set(record.routes) if record is not None else set()
        for model_id in before - after:
            hosts = self._route_hosts.get(model_id)
            if hosts is not None:
                hosts.discard(host_id)
                if not hosts:
                    del self._route_hosts[model_id]
        for model_id in after - before:
            self._route_hosts.setdefault(model_id, set()).add(host_id)
        if record is None:
            self._hosts.pop(host_id, None)
        else:
            self._hosts[host_id] = record

    def _build(
        self,
        host_id: str,
        payload: dict[str, Any],
        now: float,
        prior: HostRecord | None,
        *,
        registering: bool,
    ) -> HostRecord:
        raw_resources = payload.get("resources")
        if raw_resources is not None and prior is not None and raw_resources == prior.raw_resources:
            resources = prior.resources  # the same report: its defaults are filled already
        elif raw_resources is not None:
            resources = resolving.resources_from_mapping(
                fill_defaults(raw_resources, "defs/host-resources.schema.json")
            )
        elif prior is not None:
            resources = prior.resources
        else:  # pragma: no cover - the registration schema requires resources
            raise WireError("resources are required", "/resources")
        envelope = payload.get("allocator")
        reasons: list[str] = []
        rows: list[Any] = []
        if envelope is None and prior is not None:
            state, reported = prior.state, prior.reported_state
            residencies, cached = prior.residencies, prior.cached
            capabilities, key = prior.capabilities, None
            stages = prior.split_stages
        else:
            assert envelope is not None
            reported = str(envelope.get("state"))
            state = host_state_of(reported)
            if state is HostState.UNHEALTHY and reported != HostState.UNHEALTHY.value:
                reasons.append(f"unknown host lifecycle {reported!r}")
            parsed: list[Residency] = []
            for index, row in enumerate(envelope.get("residencies", [])):
                residency = residency_from_row(row, now)
                if residency is None:
                    reasons.append(f"malformed residency row {index}")
                    continue
                rows.append(row)  # only validated rows reach routes and queues
                parsed.append(residency)
            residencies = _steady_residencies(parsed, prior)
            stages, malformed = stages_from_rows(envelope.get("split_stages"))
            reasons.extend(malformed)
            cached = _steady_ages(
                resolving.cached_from_list(envelope.get("cached_models"), now), prior
            )
            capabilities = tuple(sorted(envelope.get("actuator_capabilities", [])))
            key = envelope.get("engine_api_key")
        if reasons:
            state = HostState.UNHEALTHY
        if envelope is None and prior is not None:
            routes = prior.routes  # a heartbeat without its envelope reports no change
        else:
            routes = self._routes(host_id, rows, residencies, key, prior)
        network = payload.get("network")
        if not isinstance(network, dict):
            # a registration without the section clears it; a heartbeat never carries it
            network = dict(prior.network) if prior is not None and not registering else {}
        return HostRecord(
            host_id=host_id,
            node_id=host_id,
            role=str(payload.get("role", prior.role if prior else "allocator")),
            network=network,
            resources=resources,
            state=state,
            reported_state=reported,
            registered_at=now if registering or prior is None else prior.registered_at,
            last_heartbeat=now,
            residencies=residencies,
            cached=cached,
            unhealthy_reasons=tuple(reasons),
            capabilities=capabilities,
            routes=routes,
            queue_depth=prior.queue_depth if prior else 0,
            active_tasks=prior.active_tasks if prior else 0,
            queued={
                str(row["model_id"]): int(row["queued_requests"])
                for row in rows
                if isinstance(row, dict) and int(row.get("queued_requests") or 0) > 0
            }
            if envelope is not None
            else (dict(prior.queued) if prior else {}),
            concurrency_multiplier=_multiplier(envelope)
            if envelope is not None
            else (prior.concurrency_multiplier if prior else 1.0),
            artifact_mirror=_mirror(envelope) if envelope is not None else _prior_mirror(prior),
            transfers=_transfers(envelope) if envelope is not None else (),
            artifacts=_artifact_rows(envelope)
            if envelope is not None
            else (prior.artifacts if prior else ()),
            artifact_bytes_fetched=_bytes_fetched(envelope, prior),
            raw_resources=raw_resources
            if raw_resources is not None
            else (prior.raw_resources if prior else None),
            inventory_digest=_digest_of(payload, prior),
            split_stages=stages,
        )

    def _routes(
        self,
        host_id: str,
        rows: list[Any],
        residencies: tuple[Residency, ...],
        key: str | None,
        prior: HostRecord | None,
    ) -> dict[str, EngineRoute]:
        endpoints = {
            row["model_id"]: row
            for row in rows
            if isinstance(row, dict)
            and isinstance(row.get("endpoint"), str)
            and isinstance(row.get("model_id"), str)
        }
        routes: dict[str, EngineRoute] = {}
        for residency in residencies:
            row = endpoints.get(residency.model_id)
            if row is None or residency.state not in (
                ResidencyState.READY,
                ResidencyState.DRAINING,
            ):
                continue
            old = prior.routes.get(residency.model_id) if prior else None
            same = old is not None and old.endpoint == row["endpoint"]
            if not same:
                self.routes_added += 1
                if self.on_route_added is not None:
                    self.on_route_added()
            routes[residency.model_id] = EngineRoute(
                host_id=host_id,
                model_id=residency.model_id,
                endpoint=row["endpoint"],
                api_key=key if key is not None else (old.api_key if old else None),
                managed=residency.ownership is Ownership.MANAGED,
                corroborated_at=old.corroborated_at if same and old else None,
                max_concurrency=max(1, int(row.get("max_concurrency", 1) or 1)),
                artifact_sha256=residency.artifact_sha256,
                advertised_concurrency=_advertised(row.get("max_concurrency")),
            )
        return routes

    # -- router side ----------------------------------------------------------

    def corroborate(self, host_id: str, model_id: str, endpoint: str, now: float) -> None:
        """Record a successful probe of a child engine (its /health answered)."""
        with self._lock:
            record = self._hosts.get(host_id)
            route = record.routes.get(model_id) if record else None
            if route is not None and route.endpoint == endpoint:
                route.corroborated_at = now
                self._not_routable.pop((host_id, model_id), None)

    def withdraw(
        self, host_id: str, model_id: str, endpoint: str, reason: str, *, at_once: bool
    ) -> bool:
        """Record a failed readiness probe of a route and why. ``at_once`` (a definitive
        refusal: the model not listed, an error answer) also ends its corroboration, so it
        stops being routable now; otherwise its lease simply is not renewed. Returns
        whether a corroborated route was withdrawn."""
        with self._lock:
            record = self._hosts.get(host_id)
            route = record.routes.get(model_id) if record else None
            if route is None or route.endpoint != endpoint:
                return False
            self._not_routable[(host_id, model_id)] = reason
            if not at_once or route.corroborated_at is None:
                return False
            route.corroborated_at = None
            return True

    def not_routable_reason(self, host_id: str, model_id: str) -> str | None:
        """Why the last readiness probe of a route failed (None once one succeeds)."""
        with self._lock:
            return self._not_routable.get((host_id, model_id))

    def routable(self, model_id: str, now: float) -> list[EngineRoute]:
        """Admitted, ready, corroborated routes for ``model_id`` (invariant 4)."""
        with self._lock:
            result = []
            for host_id in self._route_hosts.get(model_id, ()):
                record = self._hosts[host_id]
                route = record.routes.get(model_id)
                if route is None or not record.state.admits_new_work:
                    continue
                if not self._route_live(record, route, now):
                    continue
                residency = next((r for r in record.residencies if r.model_id == model_id), None)
                if residency is None or residency.state is not ResidencyState.READY:
                    continue
                # a copy of every field (``dataclasses.replace`` costs five times as much, and
                # this runs for every proxied request)
                routed = object.__new__(EngineRoute)
                routed.__dict__.update(route.__dict__)
                routed.concurrency_multiplier = record.concurrency_multiplier
                routed.protection_class = 0 if record.state is HostState.ACCEPTING else 1
                routed.queue_depth = record.queue_depth
                routed.lease_at = record.last_heartbeat
                result.append(routed)
            return sorted(result, key=lambda r: r.host_id)

    def routable_on(self, host_id: str, now: float) -> list[EngineRoute]:
        """Routable routes of one host."""
        with self._lock:
            record = self._hosts.get(host_id)
            models = sorted(record.routes) if record else []
        return [r for m in models for r in self.routable(m, now) if r.host_id == host_id]

    def _route_live(self, record: HostRecord, route: EngineRoute, now: float) -> bool:
        fresh = now - record.last_heartbeat <= self.route_lease_seconds
        probed = route.corroborated_at is not None and (
            now - route.corroborated_at <= self.route_lease_seconds
        )
        return fresh and probed

    def route_lease_left(self, model_id: str, host_id: str, now: float) -> float:
        """Seconds of routing lease left on a route (0 when not routable)."""
        with self._lock:
            record = self._hosts.get(host_id)
            route = record.routes.get(model_id) if record else None
            if record is None or route is None or route.corroborated_at is None:
                return 0.0
            left = (
                min(
                    record.last_heartbeat + self.route_lease_seconds,
                    route.corroborated_at + self.route_lease_seconds,
                )
                - now
            )
            return max(0.0, left)

    def probe_targets(self) -> list[tuple[str, str, str]]:
        """(host, model, endpoint) of every route the controller should probe."""
        with self._lock:
            return sorted(
                (r.host_id, r.model_id, r.endpoint)
                for record in self._hosts.values()
                for r in record.routes.values()
            )

    def served_models(self, now: float) -> list[str]:
        with self._lock:
            models = set(self._route_hosts)
        return sorted(m for m in models if self.routable(m, now))

    def request_started(self, host_id: str, model_id: str, now: float) -> None:
        with self._lock:
            key = (host_id, model_id)
            self._active[key] = self._active.get(key, 0) + 1
            self._last_used[model_id] = max(self._last_used.get(model_id, 0.0), now)

    def request_finished(self, host_id: str, model_id: str, now: float) -> None:
        with self._lock:
            key = (host_id, model_id)
            self._active[key] = max(0, self._active.get(key, 0) - 1)
            self._last_used[model_id] = max(self._last_used.get(model_id, 0.0), now)

    def active_requests(self, host_id: str, model_id: str) -> int:
        with self._lock:
            return self._active.get((host_id, model_id), 0)

    def last_used_watermarks(self) -> dict[str, float]:
        with self._lock:
            return dict(sorted(self._last_used.items()))

    def restore_watermarks(self, marks: dict[str, float]) -> None:
        with self._lock:
            for model, value in marks.items():
                self._last_used[model] = max(self._last_used.get(model, 0.0), value)

    def rebase_future(self, now: float) -> int:
        """Move every controller-clock time of the held reports later than ``now`` to
        ``now`` (the wall clock stepped back): a residency's load and last use, a cached
        entry's age, a host's registration and heartbeat, the router's last-use
        watermarks. Until a node's next full inventory its residencies keep the times
        reconstructed under the old clock, which would hold a minimum residency or a
        scale-down cooldown for the size of the step. Returns how many times moved."""

        def capped(value: float | None) -> float | None:
            return now if value is not None and value > now else value

        moved = 0
        with self._lock:
            for host_id, record in list(self._hosts.items()):
                residencies = tuple(
                    replace(r, loaded_at=capped(r.loaded_at), last_used_at=capped(r.last_used_at))
                    for r in record.residencies
                )
                cached = tuple(replace(c, cached_at=capped(c.cached_at)) for c in record.cached)
                changed = sum(
                    (a.loaded_at, a.last_used_at) != (b.loaded_at, b.last_used_at)
                    for a, b in zip(record.residencies, residencies, strict=True)
                ) + sum(
                    a.cached_at != b.cached_at for a, b in zip(record.cached, cached, strict=True)
                )
                times = (record.registered_at, record.last_heartbeat)
                registered, beat = (t if t <= now else now for t in times)
                changed += (registered, beat) != times
                if changed:
                    moved += changed
                    self._hosts[host_id] = replace(
                        record,
                        residencies=residencies,
                        cached=cached,
                        registered_at=registered,
                        last_heartbeat=beat,
                    )
            for model_id, value in self._last_used.items():
                if value > now:
                    self._last_used[model_id] = now
                    moved += 1
        return moved

    def forward_heartbeats(self, step: float, before: float) -> int:
        """The wall clock stepped forward by ``step`` after ``before``: each host's last
        heartbeat received at or before ``before`` moves forward by the step, so its age
        stays what elapsed, and so do its residencies' load and last-use times (a load
        time only moves back on a later heartbeat: ``_steady_loaded``). Returns how many
        hosts moved."""

        def later(at: float | None) -> float | None:
            return at + step if at is not None and at <= before else at

        moved = 0
        with self._lock:
            for host_id, record in list(self._hosts.items()):
                if record.last_heartbeat <= before:
                    residencies = tuple(
                        replace(r, loaded_at=later(r.loaded_at), last_used_at=later(r.last_used_at))
                        for r in record.residencies
                    )
                    self._hosts[host_id] = replace(
                        record, last_heartbeat=record.last_heartbeat + step, residencies=residencies
                    )
                    moved += 1
        return moved

    # -- planning side --------------------------------------------------------

    def __len__(self) -> int:
        """How many hosts it holds."""
        return len(self._hosts)

    def hosts(self) -> list[HostRecord]:
        with self._lock:
            return [self._hosts[h] for h in sorted(self._hosts)]

    def artifact_mirrors(self, sha256: str, *, exclude: str, now: float) -> list[str]:
        """Peers that reported the verified digest in a fresh heartbeat, freshest first."""
        want = sha256.lower()
        with self._lock:
            holders = [
                record
                for record in self._hosts.values()
                if record.host_id != exclude
                and record.artifact_mirror is not None
                and record.state is not HostState.UNHEALTHY
                and now - record.last_heartbeat <= self.route_lease_seconds
                and any(c.artifact_sha256 == want for c in record.cached)
            ]
        holders.sort(key=lambda r: (-r.last_heartbeat, r.host_id))
        return [r.artifact_mirror for r in holders if r.artifact_mirror is not None]

    def plans_differently(self, before: HostRecord | None, after: HostRecord, now: float) -> bool:
        """Whether ``after`` changes anything a tick reads of this host at ``now``: its
        planning snapshot (heartbeat time aside), queued work, load and router weight.

        The usual heartbeat repeats the host's facts: then only the routing lease can
        move a residency's planned state, and that alone is compared; the whole
        snapshots are built and compared only when the reported residencies differ."""
        if before is None or before.role != after.role:
            return True
        loads = (before.queued, before.queue_depth, before.active_tasks)
        if loads != (after.queued, after.queue_depth, after.active_tasks):
            return True
        if before.concurrency_multiplier != after.concurrency_multiplier:
            return True
        if (before.state, before.capabilities, before.cached, before.split_stages) != (
            after.state,
            after.capabilities,
            after.cached,
            after.split_stages,
        ):
            return True
        if before.resources is not after.resources and before.resources != after.resources:
            return True
        with self._lock:
            if before.residencies == after.residencies:
                return any(
                    self._planned_state(before, r, now) is not self._planned_state(after, r, now)
                    for r in after.residencies
                )
            old = replace(self._host_snapshot(before, now), last_heartbeat=None)
            new = replace(self._host_snapshot(after, now), last_heartbeat=None)
        return old != new

    def host_snapshot(self, host_id: str, now: float) -> HostSnapshot | None:
        """One host as the planner would see it now (None if unknown)."""
        with self._lock:
            record = self._hosts.get(host_id)
            return None if record is None else self._host_snapshot(record, now)

    def host(self, host_id: str) -> HostRecord | None:
        with self._lock:
            return self._hosts.get(host_id)

    def forget(self, host_id: str) -> None:
        with self._lock:
            self._store(host_id, None)
            for key in [k for k in self._not_routable if k[0] == host_id]:
                del self._not_routable[key]

    def snapshot(self, now: float, demand: tuple[ModelDemand, ...] = ()) -> FleetSnapshot:
        """The frozen observation the planner and reconciler read.

        The records and the router's counts are taken under the lock and the snapshots
        built after it: on a large fleet building them takes milliseconds, and every
        heartbeat on the serving loop would wait that long for the lock. Records are
        replaced, never changed, on intake; a probe landing meanwhile is read as if it
        had landed just before or just after, host by host."""
        with self._lock:
            records = [self._hosts[h] for h in sorted(self._hosts)]
            active, last_used = dict(self._active), dict(self._last_used)
        hosts = tuple(self._host_snapshot(r, now, active, last_used) for r in records)
        return FleetSnapshot(now=now, hosts=hosts, demand=demand)

    def queued_work(self, now: float) -> dict[str, int]:
        """Requests queued in the engines of each model, over fresh hosts."""
        total: dict[str, int] = {}
        with self._lock:
            for record in self._hosts.values():
                if now - record.last_heartbeat > self.route_lease_seconds:
                    continue
                for model, waiting in record.queued.items():
                    total[model] = total.get(model, 0) + waiting
        return dict(sorted(total.items()))

    def speed_evidence(self) -> Mapping[tuple[str, str], Any]:
        """The router's per-(host, model) speed evidence; advisory, never fails a tick."""
        if self.measured is None:
            return {}
        try:
            return self.measured()
        except Exception:  # measurements are advisory; never fail a snapshot
            return {}

    def _planned_state(
        self, record: HostRecord, residency: Residency, now: float
    ) -> ResidencyState:
        """A managed READY residency is planned as WARMING until its route is live: inventory,
        not proof (invariant 4)."""
        state = residency.state
        if state is ResidencyState.READY and residency.ownership is Ownership.MANAGED:
            route = record.routes.get(residency.model_id)
            if route is None or not self._route_live(record, route, now):
                return ResidencyState.WARMING
        return state

    def _host_snapshot(
        self,
        record: HostRecord,
        now: float,
        counts: Mapping[tuple[str, str], int] | None = None,
        watermarks: Mapping[str, float] | None = None,
    ) -> HostSnapshot:
        """One host as planned; ``counts`` and ``watermarks`` are copies of the router's
        active requests and last-used times (default: the live ones, under the lock)."""
        counts = self._active if counts is None else counts
        watermarks = self._last_used if watermarks is None else watermarks
        residencies = []
        for residency in record.residencies:
            active = max(
                residency.active_requests, counts.get((record.host_id, residency.model_id), 0)
            )
            state = self._planned_state(record, residency, now)
            last_used = planned_last_use(residency.last_used_at, watermarks.get(residency.model_id))
            residencies.append(
                replace(residency, state=state, active_requests=active, last_used_at=last_used)
            )
        return HostSnapshot(
            host_id=record.host_id,
            resources=record.resources,
            state=record.state,
            last_heartbeat=record.last_heartbeat,
            residencies=tuple(residencies),
            cached=record.cached,
            kind="external" if record.role == "external" else "managed",
            capabilities=record.capabilities,
            split_stages=record.split_stages,
        )
