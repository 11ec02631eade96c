"""The registry's model -> routed hosts index stays the same as a scan of every record,
so the router's admission, which reads a model's few replicas through it, sees exactly
the routes a scan of the whole fleet would (over generated registrations, heartbeats,
probes and forgotten hosts)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.controller.registry import Registry
from gridctl.domain import HostState, ResidencyState
from gridctl.routes import EngineRoute
from tests.controller.test_plans_differently import LEASE, MODELS, envelope

HOSTS = ("h0", "h1", "h2")


def scanned(registry: Registry, model_id: str, now: float) -> list[EngineRoute]:
    """Every record looked at, as admission did before the index."""
    result = []
    for record in registry.hosts():
        route = record.routes.get(model_id)
        if route is None or not record.state.admits_new_work:
            continue
        if not registry._route_live(record, route, now):
            continue
        residency = next((r for r in record.residencies if r.model_id == model_id), None)
        if residency is None or residency.state is not ResidencyState.READY:
            continue
        result.append(
            replace(
                route,
                concurrency_multiplier=record.concurrency_multiplier,
                protection_class=0 if record.state is HostState.ACCEPTING else 1,
                queue_depth=record.queue_depth,
                lease_at=record.last_heartbeat,
            )
        )
    return sorted(result, key=lambda r: r.host_id)


@st.composite
def operations(draw: st.DrawFn) -> list[tuple[str, str, Any]]:
    steps = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.sampled_from(["register", "heartbeat", "probe", "forget"]))
        host = draw(st.sampled_from(HOSTS))
        if kind in ("register", "heartbeat"):
            steps.append((kind, host, envelope(draw)))
        elif kind == "probe":
            steps.append((kind, host, draw(st.sampled_from(MODELS))))
        else:
            steps.append((kind, host, None))
    return steps


@settings(max_examples=300, deadline=None)
@given(steps=operations())
def test_admission_through_the_index_sees_what_a_scan_sees(
    steps: list[tuple[str, str, Any]],
) -> None:
    registry = Registry(route_lease_seconds=LEASE)
    now = 1000.0
    resources = {"capacity_mb": 4096, "runtimes": ["llama.cpp"]}
    for kind, host, arg in steps:
        now += 1.0
        known = registry.host(host) is not None
        if kind == "register":
            body = {"role": "allocator", "host_id": host, "resources": resources, "allocator": arg}
            registry.register(host, body, now)
        elif kind == "heartbeat" and known:
            registry.heartbeat(host, {"node_id": host, "allocator": arg}, now)
        elif kind == "probe" and known:
            record = registry.host(host)
            route = record.routes.get(arg) if record else None
            if route is not None:
                registry.corroborate(host, arg, route.endpoint, now)
        elif kind == "forget":
            registry.forget(host)
        for model_id in MODELS:
            routed = {r.host_id for r in registry.hosts() if model_id in r.routes}
            assert registry._route_hosts.get(model_id, set()) == routed
            assert registry.routable(model_id, now) == scanned(registry, model_id, now)
        assert set(registry._route_hosts) <= set(MODELS)


def test_a_snapshot_is_built_outside_the_registry_lock() -> None:
    """Heartbeats on the serving loop take the registry lock: building a large fleet's
    snapshot must not hold it."""
    import threading

    registry = Registry(route_lease_seconds=LEASE)
    resources = {"capacity_mb": 4096, "runtimes": ["llama.cpp"]}
    allocator = {"schema_version": 1, "state": "accepting", "residencies": []}
    for host in HOSTS:
        body = {"role": "allocator", "host_id": host, "resources": resources}
        registry.register(host, {**body, "allocator": allocator}, 1000.0)
    building, free = threading.Event(), threading.Event()
    built = registry._host_snapshot

    def slow(*args: Any) -> Any:
        building.set()
        assert free.wait(30), "the lock stayed held while snapshots were built"
        return built(*args)

    registry._host_snapshot = slow  # type: ignore[method-assign]

    def take_the_lock() -> None:
        assert building.wait(30)
        with registry._lock:  # a heartbeat would take it here
            free.set()

    other = threading.Thread(target=take_the_lock)
    other.start()
    snapshot = registry.snapshot(1001.0)
    other.join(30)
    assert free.is_set()
    assert [h.host_id for h in snapshot.hosts] == sorted(HOSTS)


def test_a_heartbeat_without_its_allocator_envelope_keeps_the_routes() -> None:
    """Such a heartbeat reports resources only: its residencies stay, and so do their
    routes (a READY replica must not plan as WARMING until the next full heartbeat)."""
    registry = Registry(route_lease_seconds=LEASE)
    row = {
        "model_id": "m0",
        "memory_mb": 640,
        "state": "ready",
        "ownership": "managed",
        "endpoint": "http://127.0.0.1:1/a",
    }
    allocator = {"schema_version": 1, "state": "accepting", "residencies": [row]}
    body = {"role": "allocator", "host_id": "h0", "resources": {"capacity_mb": 4096}}
    registry.register("h0", {**body, "allocator": allocator}, 1000.0)
    registry.corroborate("h0", "m0", "http://127.0.0.1:1/a", 1000.5)
    assert [r.host_id for r in registry.routable("m0", 1001.0)] == ["h0"]
    registry.heartbeat("h0", {"node_id": "h0", "resources": {"capacity_mb": 4096}}, 1002.0)
    assert [r.host_id for r in registry.routable("m0", 1003.0)] == ["h0"]
    planned = registry.host_snapshot("h0", 1003.0)
    assert planned is not None
    assert [r.state.value for r in planned.residencies] == ["ready"]
