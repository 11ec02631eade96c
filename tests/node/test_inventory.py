"""When the node sends its full inventory and when a lease renewal: built with the real
report builders, compared with the node's own clocks passed in."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain.states import HostState, ResidencyState
from gridctl.node import reports
from gridctl.node.inventory import (
    FULL_REFRESH_SECONDS,
    NOISE_FLOOR_MB,
    NOISE_MB,
    Inventory,
    InventoryTracker,
    differs,
    noise_mb,
    steady_view,
)
from gridctl.node.records import CachedArtifact, ResidencyRecord

SHA = "a" * 64
FACTS = reports.HostFacts(host_id="h1", capacity_mb=4096)


def sample(external_used_mb: int = 0, disk_free_mb: int = 100_000) -> reports.ResourceSample:
    return reports.ResourceSample(
        total_mb=8192,
        available_mb=8192 - external_used_mb,
        managed_rss_mb=0,
        disk_free_mb=disk_free_mb,
        disk_total_mb=200_000,
    )


def inventory(
    now: float,
    *,
    state: HostState = HostState.ACCEPTING,
    loaded_at: float = 500.0,
    used_at: float | None = 900.0,
    residency: ResidencyState = ResidencyState.READY,
    active: int = 0,
    external_used_mb: int = 0,
    disk_free_mb: int = 100_000,
) -> Inventory:
    records = [
        ResidencyRecord(
            model_id="m1",
            state=residency,
            memory_mb=640,
            artifact_sha256=SHA,
            port=20000,
            pid=4242,
            loaded_at=loaded_at,
            last_used_at=used_at,
            active_requests=active,
        )
    ]
    cached = [CachedArtifact("m1", SHA, "/cache/a", 1000, cached_at=400.0)]
    envelope = reports.allocator_envelope(
        state,
        records,
        cached,
        now,
        endpoint_of=lambda _r: "http://127.0.0.1:20000",
        engine_api_key="key",
        max_concurrency=2,
    )
    resources = reports.resources(FACTS, sample(external_used_mb, disk_free_mb))
    return Inventory.of(resources, envelope, now)


def test_the_first_heartbeat_is_full_then_leases_until_something_changes() -> None:
    tracker = InventoryTracker()
    first = inventory(1000.0)
    assert tracker.digest is None and tracker.full_due(first, at=10.0)
    tracker.taken(first, at=10.0)
    assert tracker.digest == first.digest
    later = inventory(1005.0)  # every age grew by 5 s: the same inventory
    assert later.digest != first.digest  # (the body sent would differ, the facts do not)
    assert not tracker.full_due(later, at=15.0)
    assert tracker.full_due(inventory(1010.0, residency=ResidencyState.DRAINING), at=20.0)
    assert tracker.full_due(inventory(1010.0, state=HostState.PAUSED), at=20.0)
    assert tracker.full_due(inventory(1010.0, used_at=1008.0), at=20.0)  # used since
    assert tracker.full_due(inventory(1010.0, active=1), at=20.0)


def test_the_full_inventory_goes_again_after_the_refresh_interval() -> None:
    tracker = InventoryTracker(refresh_seconds=60.0)
    tracker.taken(inventory(1000.0), at=10.0)
    assert not tracker.full_due(inventory(1059.0), at=69.0)
    assert tracker.full_due(inventory(1060.0), at=70.0)
    assert InventoryTracker().refresh_seconds == FULL_REFRESH_SECONDS == 300.0
    with pytest.raises(ValueError, match="refresh_seconds"):
        InventoryTracker(refresh_seconds=0)


def test_a_controller_that_asks_gets_the_full_inventory_next() -> None:
    tracker = InventoryTracker()
    tracker.taken(inventory(1000.0), at=10.0)
    tracker.forget()
    assert tracker.digest is None and tracker.full_due(inventory(1001.0), at=11.0)


def test_sampled_memory_and_disk_jitter_is_no_news_but_a_real_move_is() -> None:
    tracker = InventoryTracker()
    tracker.taken(inventory(1000.0, external_used_mb=1000, disk_free_mb=50_000), at=10.0)
    quiet = inventory(1005.0, external_used_mb=1040, disk_free_mb=49_500)
    assert not tracker.full_due(quiet, at=15.0)
    assert tracker.full_due(inventory(1005.0, external_used_mb=1100), at=15.0)
    assert tracker.full_due(inventory(1005.0, disk_free_mb=48_000), at=15.0)


def test_a_small_volume_filling_or_freed_is_news() -> None:
    """300 MB freed on a nearly full disk decides whether weights fit: the controller must
    hear it, although it is far below the large-volume jitter of 1 GB."""
    tracker = InventoryTracker()
    tracker.taken(inventory(1000.0, disk_free_mb=0), at=10.0)
    assert tracker.full_due(inventory(1005.0, disk_free_mb=280), at=15.0)
    tracker.taken(inventory(1000.0, disk_free_mb=280), at=10.0)
    assert not tracker.full_due(inventory(1005.0, disk_free_mb=285), at=15.0)  # jitter
    assert tracker.full_due(inventory(1005.0, disk_free_mb=0), at=15.0)  # filled up


@given(st.integers(0, 10_000_000), st.integers(0, 10_000_000))
def test_the_noise_threshold_never_exceeds_the_large_volume_one(old: int, new: int) -> None:
    threshold = noise_mb("disk_free_mb", old, new)
    assert NOISE_FLOOR_MB <= threshold <= NOISE_MB["disk_free_mb"]
    if abs(old - new) >= NOISE_MB["disk_free_mb"]:
        assert differs(old, new, "disk_free_mb")


def test_differs_compares_structure_exactly() -> None:
    assert not differs({"a": [1, "x"]}, {"a": [1, "x"]})
    assert differs({"a": [1]}, {"a": [1, 2]})
    assert differs({"a": 1}, {"b": 1})
    assert differs({"a": 1}, {"a": True})
    assert differs({"x_moment": 10.0}, {"x_moment": 12.5})
    assert not differs({"x_moment": 10.0}, {"x_moment": 11.5})


@settings(max_examples=80, deadline=None)
@given(
    now=st.floats(min_value=1_000.0, max_value=1e9),
    later=st.floats(min_value=0.0, max_value=10_000.0),
    ages=st.lists(st.floats(min_value=0.0, max_value=1e6), max_size=5),
)
def test_an_inventory_read_later_is_the_same_inventory(
    now: float, later: float, ages: list[float]
) -> None:
    """Ages reported at any later moment name the same moments: no full inventory."""

    def body(at: float) -> Any:
        return {"rows": [{"loaded_age_seconds": round(at - (now - a), 3)} for a in ages]}

    assert not differs(steady_view(body(now), now), steady_view(body(now + later), now + later))
