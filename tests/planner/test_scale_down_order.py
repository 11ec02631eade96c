"""Which replica a scale-down keeps: the one that has served longest.

Of a model's ready replicas beyond its target, the newest stop being desired and
the longest loaded is kept, whatever the hosts are called; a starting replica is
never kept before a ready one.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain import ResidencyState
from gridctl.planner import plan_placement

from .builders import NOW, baseline, fleet, mini_32g, resident, with_residents


def _kept(loaded: dict[str, float | None], replicas: int = 1, **states: ResidencyState) -> set[str]:
    hosts = [
        with_residents(
            mini_32g(h),
            resident("m", 4000, loaded_at=at, state=states.get(h, ResidencyState.READY)),
        )
        for h, at in loaded.items()
    ]
    plan = plan_placement([baseline("m", 4000, replicas=replicas)], fleet(*hosts))
    return {a.host_id for a in plan.assignments if a.model_id == "m"}


def test_the_longest_loaded_replica_is_kept_whatever_its_host_is_called() -> None:
    assert _kept({"a": NOW - 60, "b": NOW - 3600}) == {"b"}
    assert _kept({"a": NOW - 3600, "b": NOW - 60}) == {"a"}
    assert _kept({"a": NOW - 60, "b": NOW - 3600, "c": NOW - 600}, replicas=2) == {"b", "c"}


def test_equal_load_times_fall_back_to_the_host_id_and_an_unknown_time_comes_last() -> None:
    assert _kept({"b": NOW - 600, "a": NOW - 600}) == {"a"}
    assert _kept({"a": None, "b": NOW - 60}) == {"b"}


def test_a_ready_replica_is_kept_before_an_older_warming_one() -> None:
    warming = ResidencyState.WARMING
    assert _kept({"a": NOW - 3600, "b": NOW - 60}, a=warming) == {"b"}


@settings(max_examples=60, deadline=None)
@given(
    ages=st.lists(st.integers(min_value=0, max_value=86_400), min_size=2, max_size=5, unique=True),
    replicas=st.integers(min_value=1, max_value=4),
)
def test_a_scale_down_keeps_the_longest_loaded_replicas(ages: list[int], replicas: int) -> None:
    names = [f"h{i}" for i in range(len(ages))]
    loaded = {h: NOW - age for h, age in zip(names, ages, strict=True)}
    kept = _kept(loaded, replicas=min(replicas, len(ages)))
    oldest = sorted(names, key=lambda h: loaded[h])[: min(replicas, len(ages))]
    assert kept == set(oldest)
