"""``Registry.plans_differently`` answers as comparing the two planning snapshots would.

It compares the reported facts first and builds snapshots only when the reported
residencies differ; here every answer is checked against the whole comparison, over
generated heartbeats (residency states, ownership, endpoints, resources, cache, host
state, age jitter), probes at various times and evaluation times around the lease.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from gridctl.controller.registry import HostRecord, Registry

SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
MODELS = ("m0", "m1", "m2")
LEASE = 60.0


def whole_comparison(registry: Registry, before: HostRecord, after: HostRecord, now: float) -> bool:
    if before.role != after.role:
        return True
    loads = (before.queued, before.queue_depth, before.active_tasks)
    if loads != (after.queued, after.queue_depth, after.active_tasks):
        return True
    if before.concurrency_multiplier != after.concurrency_multiplier:
        return True
    old = replace(registry._host_snapshot(before, now), last_heartbeat=None)
    new = replace(registry._host_snapshot(after, now), last_heartbeat=None)
    return old != new


residency_rows = st.lists(
    st.fixed_dictionaries(
        {
            "model_id": st.sampled_from(MODELS),
            "memory_mb": st.sampled_from([640, 700]),
            "state": st.sampled_from(["ready", "ready", "warming", "draining"]),
            "ownership": st.sampled_from(["managed", "managed", "external", "manual"]),
            "loaded_age_seconds": st.sampled_from([60.0, 60.5, 900.0]),
            "endpoint": st.sampled_from(
                ["http://127.0.0.1:1/a", "http://127.0.0.1:1/a", "http://127.0.0.1:1/b"]
            ),
            "active_requests": st.sampled_from([0, 1]),
        }
    ),
    min_size=1,
    max_size=3,
    unique_by=lambda row: row["model_id"],
)


def envelope(draw: st.DrawFn) -> dict[str, Any]:
    cached = draw(st.sampled_from([[], [{"model_id": "m0", "artifact_sha256": SHA}]]))
    return {
        "schema_version": 1,
        "state": draw(st.sampled_from(["accepting", "accepting", "throttled", "bogus"])),
        "residencies": draw(residency_rows),
        "cached_models": cached,
        "actuator_capabilities": draw(st.sampled_from([["load"], ["load", "evict"]])),
    }


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    resources = {"capacity_mb": 4096, "runtimes": ["llama.cpp"]}
    first = envelope(draw)
    second = copy.deepcopy(first) if draw(st.integers(0, 3)) else envelope(draw)
    return {
        "registration": {
            "role": "allocator",
            "host_id": "h",
            "resources": resources,
            "allocator": first,
        },
        "heartbeat": {
            "node_id": "h",
            "resources": draw(
                st.sampled_from([resources, None, {**resources, "capacity_mb": 2048}])
            ),
            "allocator": draw(st.sampled_from([second, None])),
            "load": {"queue_depth": 0, "active_tasks": 0},
        },
        "gap": draw(st.sampled_from([0.5, 5.0, LEASE + 1])),
        "probes": draw(  # (model, seconds after the heartbeat, probed after it arrived)
            st.lists(
                st.tuples(
                    st.sampled_from(MODELS),
                    st.sampled_from([-LEASE - 5, -1.0, 1.0, LEASE - 2]),
                    st.booleans(),
                ),
                max_size=2,
            )
        ),
        "probe_endpoint": "http://127.0.0.1:1/a",
        "later": draw(st.sampled_from([0.0, 2.0, LEASE - 1, LEASE + 3])),
    }


@settings(max_examples=300, deadline=None)
@given(scenario=scenarios())
def test_answers_as_the_whole_snapshot_comparison(scenario: dict[str, Any]) -> None:
    registry = Registry(route_lease_seconds=LEASE)
    start = 1000.0
    registry.register("h", scenario["registration"], start)
    at = start + scenario["gap"]
    endpoint = scenario["probe_endpoint"]
    for model, offset, later in scenario["probes"]:
        if not later:
            registry.corroborate("h", model, endpoint, at + offset)
    before = registry.host("h")
    assert before is not None
    heartbeat = {k: v for k, v in scenario["heartbeat"].items() if v is not None}
    after = registry.heartbeat("h", heartbeat, at)
    for model, offset, later in scenario["probes"]:
        if later:
            registry.corroborate("h", model, endpoint, at + offset)
    now = at + scenario["later"]
    expected = whole_comparison(registry, before, after, now)
    assert registry.plans_differently(before, after, now) is expected
    same = before.residencies == after.residencies
    event(f"{'same' if same else 'other'} report, plans {'differently' if expected else 'alike'}")
