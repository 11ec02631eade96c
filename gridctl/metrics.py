"""Prometheus metrics of one controller: ``GET /metrics`` in the text exposition format.

Each controller owns a ``CollectorRegistry`` (never the process-global one),
so two controllers in one test process do not share series. Counters and
histograms are fed by events — ticks, router observations, circuit breaker
openings; gauges of state (plan sizes, unmet constraints, pending commands,
host and residency states) are read from the controller at scrape time.

``record_circuit_opening(model, host)`` is the hook the router's circuit
breakers call; it is safe with no controller metrics alive (it does nothing).
Model labels are bounded: a request for a model no profile names counts as
``other``.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter as Tally
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gridctl.domain import HostState, Mode, ResidencyState, UnsatisfiedCode
from gridctl.router.breakers import on_circuit_opening

if TYPE_CHECKING:
    from gridctl.controller.control import Controller
    from gridctl.controller.tickview import TickRecord
    from gridctl.router.telemetry import RequestObservation

TICK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
REQUEST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
OTHER_MODEL = "other"

_live: weakref.WeakSet[ControllerMetrics] = weakref.WeakSet()
_live_lock = threading.Lock()


def record_circuit_opening(model: str, host: str) -> None:
    """Count one circuit breaker opening for (model, host) on every live controller's metrics."""
    with _live_lock:
        targets = list(_live)
    for metrics in targets:
        metrics.circuit_opened(model, host)


on_circuit_opening(record_circuit_opening)  # the router's breakers report to every controller


class _StateCollector(Collector):
    """Gauges read from the controller at scrape time."""

    def __init__(self, ctl: Controller) -> None:
        self.ctl = ctl

    def collect(self) -> Iterator[Metric]:
        ctl = self.ctl
        yield from self._plan(ctl)
        yield from self._commands(ctl)
        yield from self._fleet(ctl)
        mode, _ = ctl.effective_mode()
        modes = GaugeMetricFamily(
            "gridctl_mode", "1 for the mode in force (operator override or git)", labels=["mode"]
        )
        for m in Mode:
            modes.add_metric([m.value], 1.0 if m is mode else 0.0)
        yield modes

    @staticmethod
    def _plan(ctl: Controller) -> Iterator[Metric]:
        plan, result = ctl.view.plan, ctl.view.result
        assignments = plan.assignments if plan else ()
        placed = GaugeMetricFamily(
            "gridctl_plan_assignments",
            "replicas in the latest plan, by whether they already exist",
            labels=["existing"],
        )
        placed.add_metric(["true"], sum(1 for a in assignments if a.existing))
        placed.add_metric(["false"], sum(1 for a in assignments if not a.existing))
        yield placed
        yield GaugeMetricFamily(
            "gridctl_plan_preemptions",
            "residencies the latest plan preempts",
            value=len(plan.preemptions) if plan else 0,
        )
        actions = GaugeMetricFamily(
            "gridctl_plan_actions",
            "actions of the latest reconciliation, by kind and whether executable",
            labels=["kind", "executable"],
        )
        tally = Tally(
            (a.kind.value, "true" if a.executable else "false")
            for a in (result.actions if result else ())
        )
        for (kind, executable), n in sorted(tally.items()):
            actions.add_metric([kind, executable], n)
        yield actions
        deferred = GaugeMetricFamily(
            "gridctl_plan_deferred_actions",
            "drift the latest reconciliation held back, by blocked code",
            labels=["blocked"],
        )
        held = Tally(a.blocked or "none" for a in (result.deferred if result else ()))
        for code, n in sorted(held.items()):
            deferred.add_metric([code], n)
        yield deferred
        unmet = GaugeMetricFamily(
            "gridctl_unsatisfied_constraints",
            "unsatisfied constraints in the latest plan, by code",
            labels=["code"],
        )
        codes = Tally(u.code.value for u in (plan.unsatisfied if plan else ()))
        for code in UnsatisfiedCode:
            unmet.add_metric([code.value], codes.get(code.value, 0))
        yield unmet

    @staticmethod
    def _commands(ctl: Controller) -> Iterator[Metric]:
        pending = ctl.store.pending()
        commands = GaugeMetricFamily(
            "gridctl_pending_commands",
            "commands without a terminal receipt, by whether delivered to their node",
            labels=["state"],
        )
        delivered = sum(1 for p in pending if p.delivered)
        commands.add_metric(["queued"], len(pending) - delivered)
        commands.add_metric(["delivered"], delivered)
        yield commands
        yield GaugeMetricFamily(
            "gridctl_withdrawn_destructive_commands",
            "destructive commands withdrawn and blocked until a terminal receipt",
            value=len(ctl.store.memory().withdrawn),
        )

    @staticmethod
    def _fleet(ctl: Controller) -> Iterator[Metric]:
        records = ctl.registry.hosts()
        hosts = GaugeMetricFamily("gridctl_hosts", "hosts by lifecycle state", labels=["state"])
        states = Tally(r.state.value for r in records)
        for state in HostState:
            hosts.add_metric([state.value], states.get(state.value, 0))
        yield hosts
        residencies = GaugeMetricFamily(
            "gridctl_residencies",
            "model residencies reported by hosts, by state and ownership",
            labels=["state", "ownership"],
        )
        seen = Tally(
            (r.state.value, r.ownership.value) for record in records for r in record.residencies
        )
        for residency_state in ResidencyState:
            name = residency_state.value
            owners = sorted({o for s, o in seen if s == name}) or ["managed"]
            for owner in owners:
                residencies.add_metric([name, owner], seen.get((name, owner), 0))
        yield residencies
        fetched = CounterMetricFamily(
            "gridctl_artifact_bytes_fetched",
            "artifact bytes each node's cache received over the network (resets when a node "
            "restarts); copies from installed pypi:// and file:// sources, and `gridctl "
            "artifacts fetch` into a directory, receive nothing and count 0",
            labels=["host"],
        )
        in_flight = GaugeMetricFamily(
            "gridctl_artifact_transfer_bytes",
            "bytes staged so far of each running artifact transfer",
            labels=["host", "model"],
        )
        for record in records:
            fetched.add_metric([record.host_id], record.artifact_bytes_fetched)
            for t in record.transfers:
                in_flight.add_metric(
                    [record.host_id, str(t.get("model_id"))], t.get("bytes_done", 0)
                )
        yield fetched
        yield in_flight
        refused = CounterMetricFamily(
            "gridctl_foreign_claims_refused",
            "reports a node made about another host's actions or rows, refused",
            labels=["sender", "owner", "kind"],
        )
        claims = ctl.registry.foreign_claims.snapshot()
        for key, n in ctl.store.foreign_claims.snapshot().items():
            claims[key] = claims.get(key, 0) + n
        for (sender, owner, kind), n in sorted(claims.items()):
            refused.add_metric([sender, owner, kind], n)
        yield refused
        beats = CounterMetricFamily(
            "gridctl_heartbeats",
            "node heartbeats taken, by kind: full (the inventory), lease (a renewal naming "
            "the inventory held), inventory_asked (a renewal naming one not held: the "
            "answer asks for the full inventory)",
            labels=["kind"],
        )
        for kind, n in sorted(ctl.registry.heartbeat_kinds.items()):
            beats.add_metric([kind], n)
        yield beats


class _AdmissionCollector(Collector):
    """The serving loop's lag and the registrations asked to wait (``admission``)."""

    def __init__(self, lag: Callable[[], float], deferred: Callable[[], int]) -> None:
        self.lag = lag
        self.deferred = deferred

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "gridctl_serving_loop_lag_seconds",
            "how much later than asked the serving loop last ran a timed callback",
            value=self.lag(),
        )
        yield CounterMetricFamily(
            "gridctl_registrations_deferred",
            "registrations answered 503 with a time to come back while the serving loop "
            "was behind a large fleet",
            value=self.deferred(),
        )


class ControllerMetrics:
    """The collectors of one controller and the sinks that feed them."""

    def __init__(self, ctl: Controller, known_model: Callable[[str], bool] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._known_model = known_model or (lambda _m: True)
        self.tick_duration = Histogram(
            "gridctl_tick_duration_seconds",
            "wall time of one plan-and-reconcile pass",
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.tick_phase = Histogram(
            "gridctl_tick_phase_seconds",
            "wall time of each phase of a pass: renew (authority lease), gather (inputs), "
            "plan (placement and reconciliation, in the planning process if one runs), commit",
            ["phase"],
            buckets=TICK_BUCKETS,
            registry=self.registry,
        )
        self.ticks = Counter(
            "gridctl_ticks", "reconciliation passes by outcome", ["outcome"], registry=self.registry
        )
        self.requests = Counter(
            "gridctl_router_requests",
            "requests the router finished, by model and outcome (ok, error, rejected)",
            ["model", "outcome"],
            registry=self.registry,
        )
        self.request_duration = Histogram(
            "gridctl_router_request_duration_seconds",
            "router request latency by model and outcome",
            ["model", "outcome"],
            buckets=REQUEST_BUCKETS,
            registry=self.registry,
        )
        self.client_requests = Counter(
            "gridctl_router_client_requests",
            "requests the router finished per router key id (never the key) and outcome",
            ["key_id", "outcome"],
            registry=self.registry,
        )
        self.breaker_openings = Counter(
            "gridctl_circuit_breaker_openings",
            "circuit breaker openings by model and host",
            ["model", "host"],
            registry=self.registry,
        )
        self.registry.register(_StateCollector(ctl))
        with _live_lock:
            _live.add(self)

    def watch_admission(self, lag: Callable[[], float], deferred: Callable[[], int]) -> None:
        """Export the serving loop's lag and the deferred registrations too."""
        self.registry.register(_AdmissionCollector(lag, deferred))

    def observe_tick(self, record: TickRecord) -> None:
        self.tick_duration.observe(max(0.0, record.duration_ms / 1000.0))
        for phase, spent_ms in record.phases:
            self.tick_phase.labels(phase).observe(max(0.0, spent_ms / 1000.0))
        self.ticks.labels("ok" if record.ok else "failed").inc()

    def observe_request(self, observation: RequestObservation) -> None:
        model = observation.served_model or observation.model or ""
        if not model or not self._known_model(model):
            model = OTHER_MODEL
        self.requests.labels(model, observation.outcome).inc()
        if observation.client is not None:
            self.client_requests.labels(observation.client, observation.outcome).inc()
        self.request_duration.labels(model, observation.outcome).observe(
            max(0.0, observation.service_seconds)
        )

    def circuit_opened(self, model: str, host: str) -> None:
        label = model if model and self._known_model(model) else OTHER_MODEL
        self.breaker_openings.labels(label, host or "unknown").inc()

    def close(self) -> None:
        """Stop receiving circuit breaker openings (the controller is going away)."""
        with _live_lock:
            _live.discard(self)

    def render(self) -> bytes:
        return generate_latest(self.registry)
