"""A residency's load time, as the registry keeps it, moves only for a real reason.

Nodes report ages (``loaded_age_seconds``); the registry turns them into controller
times. A residency still in the same state was not loaded again later, so its load
time never moves forward: a node whose wall clock stepped back reports age zero for
an engine it loaded before the step on every heartbeat, and without the rule the
replica would look freshly loaded each time (the scale-down keeps the
longest-loaded replica, and its choice flipped between heartbeats). A step of the
controller's own clock moves the recorded times with the heartbeats.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.controller.registry import Registry
from tests.controller.simnodes import GEMMA_SHA

NOW = 1_000_000.0
RESOURCES = {"capacity_mb": 4096, "failure_domain": "zone-a", "runtimes": ["llama.cpp"]}


def envelope(state: str, loaded_age: float) -> dict[str, Any]:
    return {
        "schema_version": 1,
        "state": "accepting",
        "cached_models": [],
        "residencies": [
            {
                "model_id": "m",
                "memory_mb": 640,
                "state": state,
                "artifact_sha256": GEMMA_SHA,
                "runtime": "llama.cpp",
                "loaded_age_seconds": loaded_age,
            }
        ],
        "actuator_capabilities": ["load", "warm", "drain", "unload"],
    }


def registered(age: float) -> Registry:
    registry = Registry()
    registry.register(
        "h",
        {
            "role": "allocator",
            "host_id": "h",
            "resources": RESOURCES,
            "allocator": envelope("ready", age),
        },
        NOW,
    )
    return registry


def loaded_at(registry: Registry) -> float | None:
    record = registry.host("h")
    assert record is not None
    (residency,) = record.residencies
    return residency.loaded_at


def test_a_node_clock_stepped_back_does_not_make_a_replica_look_fresh() -> None:
    registry = registered(age=120.0)
    assert loaded_at(registry) == NOW - 120
    for second in range(1, 30):  # the node now reports age 0 on every heartbeat
        registry.heartbeat("h", {"node_id": "h", "allocator": envelope("ready", 0.0)}, NOW + second)
        assert loaded_at(registry) == NOW - 120


def test_a_new_state_takes_the_reported_time() -> None:
    registry = registered(age=120.0)
    registry.heartbeat("h", {"node_id": "h", "allocator": envelope("warming", 0.0)}, NOW + 10)
    assert loaded_at(registry) == NOW + 10  # loaded again: a different state on the way
    registry.heartbeat("h", {"node_id": "h", "allocator": envelope("ready", 1.0)}, NOW + 11)
    assert loaded_at(registry) == NOW + 10


@settings(max_examples=200, deadline=None)
@given(
    first=st.floats(0, 3600),
    reports=st.lists(st.tuples(st.floats(0.5, 30), st.floats(0, 7200)), max_size=12),
)
def test_a_steady_residencys_load_time_never_moves_forward(
    first: float, reports: list[tuple[float, float]]
) -> None:
    registry = registered(age=first)
    now, previous = NOW, loaded_at(registry)
    assert previous is not None
    for gap, age in reports:
        now += gap
        registry.heartbeat("h", {"node_id": "h", "allocator": envelope("ready", age)}, now)
        current = loaded_at(registry)
        assert current is not None and current <= previous
        if now - age < previous - 2.0:  # an older load time than the one held is news
            assert current == now - age
        previous = current


def test_a_forward_step_of_the_controller_clock_moves_load_times_with_heartbeats() -> None:
    registry = registered(age=120.0)
    assert registry.forward_heartbeats(3600.0, before=NOW) == 1
    assert loaded_at(registry) == NOW - 120 + 3600
    # the node's next report, an hour later by the stepped clock, agrees: nothing moves
    registry.heartbeat("h", {"node_id": "h", "allocator": envelope("ready", 121.0)}, NOW + 3601)
    assert loaded_at(registry) == NOW - 120 + 3600
