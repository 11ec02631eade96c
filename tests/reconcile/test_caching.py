"""The predictive cache lifecycle, one rule per test, each on both sides of its boundary."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gridctl.domain import (
    ActionKind,
    Artifact,
    CachedArtifact,
    ControllerPolicy,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    Mode,
    ModelDemand,
    ModelProfile,
    Residency,
    ResidencyState,
)
from gridctl.reconcile.caching import (
    CacheAdvice,
    cache_lifecycle,
    eviction_problem,
    prediction_value,
)
from tests.reconcile.builders import NOW, assign, plan, run

TTL = 21600.0
MATURE = 900.0
SHA = {
    m: (c * 64) for m, c in {"video": "1", "image": "2", "old": "3", "b1": "4", "b2": "5"}.items()
}
SHA.update({"b3": "6" * 64, "b4": "7" * 64, "big": "8" * 64})


def prof(
    name: str, size_mb: int = 1000, *, load_seconds: float = 60.0, **kw: object
) -> ModelProfile:
    return ModelProfile(
        name=name,
        memory_mb=1000,
        artifact=Artifact(sha256=SHA[name], source=f"hf://acme/{name}/m.gguf", size_mb=size_mb),
        load_seconds=load_seconds,
        expected_service_seconds=60.0,
        **kw,  # type: ignore[arg-type]
    )


def predicted(model: str, rpm: float, confidence: float = 1.0) -> ModelDemand:
    """Correlation-only demand: ``rpm`` correlated requests a minute of 60 s work."""
    return ModelDemand(model, correlated_requests_per_minute=rpm, confidence=confidence)


def entry(model: str, *, age: float, size_mb: int = 1000, **kw: object) -> CachedArtifact:
    fields: dict[str, object] = {"provenance": "predictive", "used": False}
    fields.update(kw)
    return CachedArtifact(
        model,
        SHA.get(model),
        size_mb=size_mb,
        cached_at=NOW - age,
        **fields,  # type: ignore[arg-type]
    )


def node(
    *cached: CachedArtifact,
    free_mb: int | None = 20_000,
    residencies: tuple[Residency, ...] = (),
    capabilities: tuple[str, ...] = ("load", "warm", "drain", "unload", "evict"),
    host_id: str = "n1",
    kind: str = "managed",
) -> HostSnapshot:
    return HostSnapshot(
        host_id=host_id,
        resources=HostResources(capacity_mb=16000, disk_free_mb=free_mb),
        last_heartbeat=NOW,
        residencies=residencies,
        cached=cached,
        capabilities=capabilities,
        kind=kind,
    )


def snap(*hosts: HostSnapshot, demand: tuple[ModelDemand, ...] = ()) -> FleetSnapshot:
    return FleetSnapshot(now=NOW, hosts=hosts, demand=demand)


def policy(**changes: object) -> ControllerPolicy:
    return ControllerPolicy(predictive_disk_reserve_mb=10240, **changes)  # type: ignore[arg-type]


def advise(
    snapshot: FleetSnapshot, *profiles: ModelProfile, pol: ControllerPolicy | None = None
) -> list[CacheAdvice]:
    return list(cache_lifecycle(plan(), snapshot, {p.name: p for p in profiles}, pol or policy()))


def kinds(advice: list[CacheAdvice]) -> list[tuple[str, str, str, str]]:
    return [(a.kind, a.model_id, a.host_id, a.rule) for a in advice]


# --- prefetch ---------------------------------------------------------------------------


def test_a_correlation_only_prediction_prefetches_within_the_disk_reserve() -> None:
    video = prof("video", size_mb=1000)
    fits = advise(snap(node(free_mb=11240), demand=(predicted("video", 1.0),)), video)
    assert kinds(fits) == [("prefetch", "video", "n1", "predicted_demand")]
    short = advise(snap(node(free_mb=11239), demand=(predicted("video", 1.0),)), video)
    assert short == []  # one MB below the reserve


def test_missing_disk_telemetry_never_authorises_a_prefetch() -> None:
    video = prof("video")
    assert advise(snap(node(free_mb=None), demand=(predicted("video", 1.0),)), video) == []


def test_direct_demand_or_a_serving_slot_means_no_predictive_transfer() -> None:
    video = prof("video")
    direct = ModelDemand("video", requests_per_minute=1.0, correlated_requests_per_minute=1.0)
    assert advise(snap(node(), demand=(direct,)), video) == []
    slotted = cache_lifecycle(
        plan(assign("video", "n1")), snap(node(), demand=(predicted("video", 1.0),)),
        {"video": video}, policy(),
    )  # fmt: skip
    assert slotted == ()


def test_the_plan_s_own_uncached_placements_are_reserved_before_prediction() -> None:
    image, video = prof("image", size_mb=5000), prof("video", size_mb=1000)
    snapshot = snap(node(free_mb=16000), demand=(predicted("video", 1.0),))
    profiles = {"image": image, "video": video}
    with_placement = cache_lifecycle(plan(assign("image", "n1")), snapshot, profiles, policy())
    assert with_placement == ()  # 16000 - 5000 - 1000 < 10240
    assert kinds(list(cache_lifecycle(plan(), snapshot, profiles, policy())))[0][0] == "prefetch"


def test_value_per_mb_ranks_and_is_recomputed_on_the_shrinking_ledger() -> None:
    small, large = prof("image", size_mb=1000), prof("video", size_mb=4000)
    demand = (predicted("image", 1.0), predicted("video", 2.0))  # video: 2x value, 4x bytes
    both = advise(snap(node(free_mb=15240), demand=demand), small, large)
    assert [a.model_id for a in both] == ["image", "video"]
    only_room_for_one = advise(snap(node(free_mb=14240), demand=demand), small, large)
    assert [a.model_id for a in only_room_for_one] == ["image"]


def test_hosts_without_the_load_actuator_or_unmanaged_get_no_prefetch() -> None:
    video = prof("video")
    demand = (predicted("video", 1.0),)
    assert advise(snap(node(capabilities=()), demand=demand), video) == []
    assert advise(snap(node(kind="external"), demand=demand), video) == []


# --- TTL expiry -------------------------------------------------------------------------


def test_an_unused_predictive_entry_expires_at_the_ttl_and_not_before() -> None:
    old = prof("old")
    expired = advise(snap(node(entry("old", age=TTL))), old)
    assert kinds(expired) == [("evict", "old", "n1", "ttl_expired")]
    assert expired[0].sha256 == SHA["old"]  # exact-digest fenced
    assert advise(snap(node(entry("old", age=TTL - 1))), old) == []


def test_a_live_prediction_keeps_its_entry_past_the_ttl() -> None:
    old = prof("old")
    assert advise(snap(node(entry("old", age=TTL * 2)), demand=(predicted("old", 0.5),)), old) == []


@pytest.mark.parametrize(
    ("changes", "host_kw", "why"),
    [
        ({"provenance": "operator"}, {}, "operator"),
        ({"provenance": "demand"}, {}, "demand"),
        ({"used": True}, {}, "used"),
        ({}, {"residencies": (Residency("old", 1000, ResidencyState.READY),)}, "live residency"),
        ({}, {"capabilities": ("load",)}, "no evict actuator"),
    ],
)
def test_never_evicted(changes: dict[str, object], host_kw: dict[str, object], why: str) -> None:
    old = prof("old")
    host = node(entry("old", age=TTL * 10, **changes), **host_kw)  # type: ignore[arg-type]
    assert advise(snap(host), old) == []
    problem = eviction_problem("old", SHA["old"], host, {"old": old})
    assert problem is not None and why in problem


def test_pinned_and_planned_entries_are_never_evicted() -> None:
    pinned = prof("old", pins=("n1",))
    assert advise(snap(node(entry("old", age=TTL * 10))), pinned) == []
    old = prof("old")
    planned = cache_lifecycle(plan(assign("old", "n1")), snap(node(entry("old", age=TTL * 10))),
                              {"old": old}, policy())  # fmt: skip
    assert planned == ()


def test_a_queued_eviction_is_revalidated_against_the_latest_heartbeat() -> None:
    old = prof("old")
    assert eviction_problem("old", SHA["old"], node(entry("old", age=TTL)), {"old": old}) is None
    gone = eviction_problem("old", SHA["old"], node(), {"old": old})
    assert gone == "the exact entry is no longer reported"
    other_revision = eviction_problem("old", "f" * 64, node(entry("old", age=TTL)), {"old": old})
    assert other_revision == "the exact entry is no longer reported"
    warmed = node(entry("old", age=TTL, used=True))
    assert "used" in (eviction_problem("old", SHA["old"], warmed, {"old": old}) or "")


# --- replacement --------------------------------------------------------------------------


def full_host(*cached: CachedArtifact, free_mb: int = 10240) -> HostSnapshot:
    return node(*cached, free_mb=free_mb)


def test_replacement_needs_the_configured_value_per_byte_gain() -> None:
    # victim b1: 1000 MB, 0.5 rpm -> 30 s; incoming video: 1000 MB.
    victim, video = prof("b1"), prof("video")
    host = full_host(entry("b1", age=MATURE))
    at_gain = advise(
        snap(host, demand=(predicted("b1", 0.5), predicted("video", 1.0))), victim, video
    )
    assert kinds(at_gain) == [("evict", "b1", "n1", "replacement")]  # exactly 2x
    below = advise(
        snap(host, demand=(predicted("b1", 0.5), predicted("video", 0.99))), victim, video
    )
    assert below == []  # 1.98x
    looser = policy(prefetch_replacement_value_gain=1.5)
    assert advise(
        snap(host, demand=(predicted("b1", 0.5), predicted("video", 0.99))),
        victim,
        video,
        pol=looser,
    )


def test_replacement_never_loses_total_startup_value() -> None:
    # the incoming model is denser (2x per MB) but smaller in total than the victim
    victim, video = prof("b1", size_mb=4000), prof("video", size_mb=1000)
    host = full_host(entry("b1", age=MATURE, size_mb=4000), free_mb=9240)
    demand = (predicted("b1", 1.0), predicted("video", 0.5))  # 60 s vs 30 s; 0.015 vs 0.03 /MB
    assert advise(snap(host, demand=demand), victim, video) == []
    enough = (predicted("b1", 1.0), predicted("video", 1.0))  # 60 s each, 4x density
    assert kinds(advise(snap(host, demand=enough), victim, video))[0][:2] == ("evict", "b1")


def test_a_victim_must_have_spent_fifteen_minutes_in_cache() -> None:
    victim, video = prof("b1"), prof("video")
    demand = (predicted("video", 1.0),)
    assert advise(snap(full_host(entry("b1", age=MATURE - 1)), demand=demand), victim, video) == []
    assert advise(snap(full_host(entry("b1", age=MATURE)), demand=demand), victim, video)


def test_replacement_is_two_generations_and_credits_no_intended_deletion() -> None:
    victim, video = prof("b1"), prof("video")
    demand = (predicted("video", 1.0),)
    first = advise(snap(full_host(entry("b1", age=MATURE)), demand=demand), victim, video)
    assert [a.kind for a in first] == ["evict"]  # the prefetch is not planned in this plan
    reclaimed = advise(snap(full_host(free_mb=11240), demand=demand), victim, video)
    assert kinds(reclaimed) == [("prefetch", "video", "n1", "predicted_demand")]


def test_up_to_three_victims_and_never_four() -> None:
    small = [prof(n, size_mb=300) for n in ("b1", "b2", "b3", "b4")]
    video = prof("video", size_mb=1000)
    three = full_host(
        *(entry(p.name, age=MATURE, size_mb=300) for p in small[:3]), free_mb=10240 + 100
    )
    chosen = advise(snap(three, demand=(predicted("video", 1.0),)), *small, video)
    assert sorted(a.model_id for a in chosen) == ["b1", "b2", "b3"]
    assert all(a.rule == "replacement" for a in chosen)
    four = full_host(*(entry(p.name, age=MATURE, size_mb=225) for p in small), free_mb=10240 + 100)
    assert advise(snap(four, demand=(predicted("video", 1.0),)), *small, video) == []
    allowed = policy(prefetch_max_victims=4)
    assert (
        len(advise(snap(four, demand=(predicted("video", 1.0),)), *small, video, pol=allowed)) == 4
    )


def test_direct_demand_and_inexact_revisions_are_never_replacement_victims() -> None:
    victim, video = prof("b1"), prof("video")
    demand = (ModelDemand("b1", queue_depth=1.0), predicted("video", 1.0))
    assert advise(snap(full_host(entry("b1", age=MATURE)), demand=demand), victim, video) == []
    stale = replace(entry("b1", age=MATURE), artifact_sha256="e" * 64)
    assert advise(snap(full_host(stale), demand=(predicted("video", 1.0),)), victim, video) == []


def test_the_value_weighs_confidence_and_pressure() -> None:
    video = prof("video", load_seconds=60.0)
    assert prediction_value(video, predicted("video", 1.0)) == 60.0
    assert prediction_value(video, predicted("video", 1.0, confidence=0.5)) == 30.0
    assert prediction_value(video, None) == 0.0


# --- through the reconciler -------------------------------------------------------------


def test_the_reconciler_issues_a_cache_only_load_and_an_exact_eviction() -> None:
    video, old = prof("video"), prof("old")
    snapshot = snap(node(entry("old", age=TTL)), demand=(predicted("video", 1.0),))
    result = run(plan(), snapshot, {"video": video, "old": old})
    by_kind = {(a.kind, a.model_id): a for a in result.actions}
    load = by_kind[(ActionKind.LOAD, "video")]
    assert load.reason.startswith("predictive prefetch") and load.memory_mb == 0
    assert (ActionKind.WARM, "video") not in by_kind  # never warmed, no memory, no drain
    evict = by_kind[(ActionKind.EVICT, "old")]
    assert evict.artifact_sha256 == SHA["old"]
    assert not evict.executable  # the per-host mutation budget: one step at a time
    alone = run(plan(), snap(node(entry("old", age=TTL))), {"old": old})
    assert [(a.kind, a.executable) for a in alone.actions] == [(ActionKind.EVICT, True)]
    observed = run(plan(), snapshot, {"video": video, "old": old}, mode=Mode.OBSERVE)
    assert observed.actions == () and observed.enqueue == ()
