"""Hypothesis strategies: random fleets, profiles and demand, kept small so 500 examples run fast.

Hypothesis draws the shape (host and model counts, policy knobs) and seeds; the
details are expanded from the seeds by a local ``random.Random`` (never the
global one), so one example costs well under a millisecond to generate.
Hosts mix every lifecycle state, fresh/stale/missing/future heartbeats,
reserves, thermal derating, throttling, tags, slots, disk and residencies of
every ownership and state (including stale artifact digests and pinned rows).
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import strategies as st

from gridctl.domain import (
    CachedArtifact,
    ControllerPolicy,
    DataTier,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    LearnedOnHost,
    ModelDemand,
    ModelProfile,
    Ownership,
    Residency,
    ResidencyState,
)
from gridctl.domain.profiles import Artifact

from .builders import NOW, SHA_A, SHA_B

MODEL_NAMES = ("m-a", "m-b", "m-c", "m-d", "m-e", "m-f")
RUNTIMES = ("llama.cpp", "vllm")
TAGS = ("gpu", "employee", "office")
DOMAINS = ("d1", "d2", "d3")
MEMORY = (1024, 2048, 4096, 6144, 8192, 12288)
STATES = (*HostState, *(HostState.ACCEPTING,) * 8, HostState.THROTTLED)
OWNERS = (*Ownership, Ownership.MANAGED, Ownership.MANAGED, Ownership.MANAGED)


def _some(rng: random.Random, values: tuple[object, ...], most: int, least: int = 0) -> tuple:
    return tuple(rng.sample(values, rng.randint(least, min(most, len(values)))))


def random_residencies(rng: random.Random, models: tuple[str, ...]) -> tuple[Residency, ...]:
    rows = []
    for model in _some(rng, (*models, "orphan"), 3):
        rows.append(
            Residency(
                model_id=str(model),
                memory_mb=rng.choice(MEMORY),
                state=rng.choice(list(ResidencyState)),
                artifact_sha256=rng.choice((None, SHA_A, SHA_B)),
                runtime=rng.choice((None, "llama.cpp", "vllm")),
                loaded_at=NOW - rng.choice((10.0, 3600.0)),
                last_used_at=NOW - rng.choice((10.0, 3600.0)),
                ownership=rng.choice(OWNERS),
                pinned=rng.random() < 0.1,
                active_requests=rng.randint(0, 2),
            )
        )
    return tuple(rows)


def random_host(
    rng: random.Random, index: int, models: tuple[str, ...], empty: bool
) -> HostSnapshot:
    resources = HostResources(
        capacity_mb=rng.choice((8192, 16384, 32768, 65536)),
        reserved_mb=rng.choice((0, 1024, 4096)),
        external_mb=rng.choice((0, 0, 2048)),
        thermal_derate=rng.choice((1.0, 1.0, 0.75)),
        throttle_fraction=rng.choice((1.0, 0.5)),
        runtimes=_some(rng, RUNTIMES, 2, 1),  # type: ignore[arg-type]
        backends=_some(rng, ("cuda", "cpu"), 1),  # type: ignore[arg-type]
        gpu_count=rng.choice((0, 1, 2)),
        gpu_memory_mb=rng.choice((0, 24576)),
        failure_domain=rng.choice(DOMAINS),
        tags=_some(rng, TAGS, 2),  # type: ignore[arg-type]
        allowed_models=_some(rng, models, 1) if rng.random() < 0.2 else (),  # type: ignore[arg-type]
        denied_models=_some(rng, models, 1) if rng.random() < 0.2 else (),  # type: ignore[arg-type]
        allowed_data_tiers=tuple(DataTier)
        if rng.random() < 0.7
        else _some(rng, tuple(DataTier), 4, 1),  # type: ignore[arg-type]
        max_models=rng.choice((0, 0, 1, 2)),
        disk_free_mb=rng.choice((None, 0, 5000, 100_000, 100_000)),
        memory_bandwidth_gbps=rng.choice((None, 100.0, 900.0)),
        measured_tokens_per_second=rng.choice((None, None, 50.0)),
        host_priority=rng.choice((0, 100)),
    )
    return HostSnapshot(
        host_id=f"h{index:02d}",
        resources=resources,
        state=rng.choice(STATES),
        last_heartbeat=rng.choice((*(NOW - 1,) * 8, NOW - 600, None, NOW + 60)),
        residencies=() if empty else random_residencies(rng, models),
        cached=tuple(
            CachedArtifact(str(m), rng.choice((None, SHA_A))) for m in _some(rng, models, 2)
        ),
        failed_attempts=tuple((str(m), 2) for m in _some(rng, models, 1)),
        learned=random_learned(rng, models),
    )


def random_learned(rng: random.Random, models: tuple[str, ...]) -> tuple[LearnedOnHost, ...]:
    """Learned timings and per-model speed for some of the models (often none)."""
    if rng.random() < 0.5:
        return ()
    return tuple(
        LearnedOnHost(
            str(m),
            load_seconds=rng.choice((None, 5.0, 400.0)),
            warm_seconds=rng.choice((None, 1.0, 60.0)),
            tokens_per_second=rng.choice((None, 20.0, 200.0)),
            speed_confidence=rng.choice((0.25, 1.0)),
            latency_ms=rng.choice((None, 300.0)),
        )
        for m in _some(rng, models, 2)
    )


def random_profiles(
    rng: random.Random, names: tuple[str, ...], host_ids: tuple[str, ...]
) -> list[ModelProfile]:
    result = []
    pin_choices: tuple[tuple[str, ...], ...] = ((),) * 8 + tuple((h,) for h in host_ids[:2])
    for name in names:
        others = tuple(n for n in names if n != name)
        minimum = rng.randint(0, 2)
        result.append(
            ModelProfile(
                name=name,
                memory_mb=rng.choice(MEMORY),
                runtime_memory_mb=rng.choice(({}, {"vllm": 10240})),
                artifact=Artifact(
                    sha256=rng.choice((None, SHA_A)), size_mb=rng.choice((None, 4000, 50_000))
                ),
                runtimes=_some(rng, RUNTIMES, 2, 1),  # type: ignore[arg-type]
                backends=("cuda",) if rng.random() < 0.1 else (),
                data_tier=rng.choice((*DataTier, DataTier.INTERNAL, DataTier.INTERNAL)),
                required_tags=_some(rng, TAGS, 1) if rng.random() < 0.15 else (),  # type: ignore[arg-type]
                forbidden_tags=_some(rng, TAGS, 1) if rng.random() < 0.15 else (),  # type: ignore[arg-type]
                pins=rng.choice(pin_choices),
                min_replicas=minimum,
                max_replicas=minimum + rng.randint(0, 2),
                priority=rng.choice((10, 50, 50, 90)),
                min_failure_domains=rng.choice((1, 1, 2)),
                max_colocated_models=rng.choice((0, 0, 1, 2)),
                colocation_excludes=_some(rng, others, 1) if rng.random() < 0.3 else (),  # type: ignore[arg-type]
                min_gpu_count=rng.choice((0, 0, 0, 0, 1)),
                min_residency_seconds=rng.choice((0.0, 300.0)),
            )
        )
    return result


def random_demand(rng: random.Random, names: tuple[str, ...]) -> tuple[ModelDemand, ...]:
    rows = []
    for name in names:
        kind = rng.choice(("none", "direct", "correlated", "queue"))
        if kind == "none":
            continue
        rows.append(
            ModelDemand(
                model_id=name,
                requests_per_minute=120.0 if kind == "direct" else 0.0,
                queue_depth=2.0 if kind == "queue" else 0.0,
                correlated_requests_per_minute=90.0 if kind == "correlated" else 0.0,
                trend_per_minute=rng.choice((0.0, 30.0, -30.0)),
            )
        )
    return tuple(rows)


@st.composite
def planning_inputs(
    draw: st.DrawFn, max_hosts: int = 40, max_models: int = 5, empty: bool = False
) -> tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]:
    count = draw(st.integers(1, max_hosts))
    names = MODEL_NAMES[: draw(st.integers(1, max_models))]
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    host_rows = [random_host(rng, i, names, empty) for i in range(count)]
    host_ids = tuple(h.host_id for h in host_rows)
    snapshot = FleetSnapshot(now=NOW, hosts=tuple(host_rows), demand=random_demand(rng, names))
    policy = replace(
        ControllerPolicy(),
        max_evictions_per_plan=draw(st.sampled_from((64, 1, 2))),
        admission_headroom_mb=draw(st.sampled_from((0, 256, 1024))),
    )
    return random_profiles(rng, names, host_ids), snapshot, policy
