"""One named scenario per planner rule, as a table of machines, models and demand.

Read each row as: on this fleet, with these profiles and this demand, the plan
must look like this. Host builders (``gpu_server_80g``, ``mini_32g``,
``laptop_16g``...) live in ``builders.py``; expectations in ``expectations.py``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gridctl.domain import (
    ControllerPolicy,
    DataTier,
    HostSnapshot,
    HostState,
    ModelDemand,
    ModelProfile,
    ResidencyState,
)
from gridctl.planner import plan_placement

from .builders import (
    NOW,
    SHA_A,
    SHA_B,
    baseline,
    busy,
    correlated,
    cpu_box_64g,
    demand,
    external,
    external_endpoint,
    fleet,
    gpu_server_2x24g,
    gpu_server_80g,
    host,
    laptop_16g,
    manual,
    mini_32g,
    policy,
    profile,
    resident,
    with_cache,
    with_residents,
)
from .expectations import (
    Expect,
    existing,
    not_on,
    placed,
    placed_count,
    preemption_count,
    preempts,
    rejected,
    runtime,
    satisfied,
    scored_with,
    target,
    unsatisfied,
)
from .rules import hard_rule_violations, preemption_violations


@dataclass(frozen=True)
class Scenario:
    name: str
    hosts: tuple[object, ...]
    models: tuple[ModelProfile, ...]
    expect: tuple[Expect, ...]
    demand: tuple[ModelDemand, ...] = ()
    policy: ControllerPolicy = field(default_factory=ControllerPolicy)


def s(name: str, hosts, models, expect, demand=(), pol=None) -> Scenario:  # type: ignore[no-untyped-def]
    return Scenario(
        name, tuple(hosts), tuple(models), tuple(expect), tuple(demand), pol or ControllerPolicy()
    )


LAPTOPS = [laptop_16g(f"lap-{i}", failure_domain=f"floor-{i}") for i in range(1, 5)]


def repack_fleet(
    gpu: ResidencyState | None = ResidencyState.READY,
    cpu: ResidencyState | None = None,
    **small_changes: object,
) -> list[HostSnapshot]:
    """A GPU server holding ``small`` (in state ``gpu``) and two free CPU boxes, the first
    holding ``small``'s replacement in state ``cpu`` (if any)."""
    gpu_host = gpu_server_80g("gpu-1")
    if gpu is not None:
        gpu_host = with_residents(gpu_host, resident("small", 50000, state=gpu, **small_changes))
    cpu_host = cpu_box_64g("cpu-1")
    if cpu is not None:
        cpu_host = with_residents(cpu_host, resident("small", 50000, state=cpu))
    return [gpu_host, cpu_host, cpu_box_64g("cpu-2")]


def big(**changes: object) -> ModelProfile:
    """A 40 GB llama.cpp model that runs anywhere, fastest on the GPU server."""
    return profile("big", 40000, max_replicas=1, **changes)


SMALL = baseline("small", 50000)
HOT = busy("big", rpm=600)  # offered concurrency 20: the performance factor is at its 8x cap

SCENARIOS = [
    # ---- target replicas ------------------------------------------------------------
    s(
        "offered concurrency over target utilisation sets replicas",
        LAPTOPS,
        [profile("chat", 2048, max_replicas=4, replica_concurrency=1, target_utilization=0.5)],
        [target("chat", 3)],
        [demand("chat", requests_per_minute=1, offered_concurrency=1.2)],
    ),
    s(
        "demand headroom rounds a full replica up",
        LAPTOPS,
        [profile("chat", 2048, max_replicas=4, target_utilization=1.0)],
        [target("chat", 2)],
        [demand("chat", requests_per_minute=1, offered_concurrency=1.0)],
    ),
    s(
        "queue pressure asks for one replica beyond the ready set",
        [with_residents(LAPTOPS[0], resident("chat", 2048)), *LAPTOPS[1:]],
        [profile("chat", 2048, max_replicas=4)],
        [target("chat", 2), existing("chat", "lap-1"), placed_count("chat", 2)],
        [demand("chat", requests_per_minute=1, offered_concurrency=0.1, queue_depth=1)],
    ),
    s(
        "latency over the SLO is pressure too",
        [with_residents(LAPTOPS[0], resident("chat", 2048)), *LAPTOPS[1:]],
        [profile("chat", 2048, max_replicas=4, latency_slo_ms=1000)],
        [target("chat", 2)],
        [demand("chat", requests_per_minute=1, offered_concurrency=0.1, p95_latency_ms=3000)],
    ),
    s(
        "errors are pressure too",
        [with_residents(LAPTOPS[0], resident("chat", 2048)), *LAPTOPS[1:]],
        [profile("chat", 2048, max_replicas=4)],
        [target("chat", 2)],
        [demand("chat", requests_per_minute=1, offered_concurrency=0.1, error_rate=0.2)],
    ),
    s(
        "min_replicas holds without demand",
        LAPTOPS,
        [baseline("base", 2048, replicas=2)],
        [target("base", 2), placed_count("base", 2)],
    ),
    s(
        "max_replicas caps heavy demand",
        LAPTOPS,
        [profile("chat", 2048, max_replicas=2)],
        [target("chat", 2), satisfied("chat")],
        [busy("chat", rpm=6000)],
    ),
    s(
        "a rising trend looks ahead over the cold start",
        LAPTOPS,
        [profile("chat", 2048, max_replicas=4, load_seconds=240, warm_seconds=60)],
        [target("chat", 2)],
        [demand("chat", requests_per_minute=12, trend_per_minute=12)],
    ),
    s(
        "the lookahead is capped at 2x the current rate",
        LAPTOPS,
        [profile("chat", 2048, max_replicas=4, load_seconds=240, warm_seconds=60)],
        [target("chat", 2)],
        [demand("chat", requests_per_minute=12, trend_per_minute=1000)],
    ),
    s(
        "a negative trend never accelerates scale-down",
        LAPTOPS,
        [profile("chat", 2048, max_replicas=4)],
        [target("chat", 1)],
        [demand("chat", requests_per_minute=12, trend_per_minute=-100)],
    ),
    s(
        "recently used ready replicas stay through the scale-down cooldown",
        [with_residents(h, resident("chat", 2048, last_used_at=NOW - 30)) for h in LAPTOPS[:3]],
        [profile("chat", 2048, max_replicas=4)],
        [target("chat", 3), placed_count("chat", 3)],
    ),
    s(
        "after the cooldown idle replicas are no longer desired",
        [
            with_residents(h, resident("chat", 2048, last_used_at=NOW - 7200, loaded_at=NOW - 9000))
            for h in LAPTOPS[:3]
        ],
        [profile("chat", 2048, max_replicas=4)],
        [target("chat", 0), placed_count("chat", 0)],
    ),
    # ---- eligibility -------------------------------------------------------------------
    s(
        "paused hosts take no new placement",
        [mini_32g("mini-1", state=HostState.PAUSED), mini_32g("mini-2")],
        [baseline("m", 4096)],
        [placed("m", "mini-2"), rejected("m", "mini-1", "host_state")],
    ),
    s(
        "draining, unhealthy and quarantined hosts take nothing",
        [
            mini_32g("a", state=HostState.DRAINING),
            mini_32g("b", state=HostState.UNHEALTHY),
            mini_32g("c", state=HostState.QUARANTINED),
        ],
        [baseline("m", 4096)],
        [unsatisfied("m", "no_eligible_nodes", 1)],
    ),
    s(
        "stale, missing and future heartbeats exclude a host",
        [
            mini_32g("stale", last_heartbeat=NOW - 120),
            mini_32g("missing", last_heartbeat=None),
            mini_32g("future", last_heartbeat=NOW + 60),
            mini_32g("fresh"),
        ],
        [baseline("m", 4096)],
        [
            placed("m", "fresh"),
            rejected("m", "stale", "heartbeat_stale"),
            rejected("m", "missing", "heartbeat_missing"),
            rejected("m", "future", "heartbeat_future"),
        ],
    ),
    s(
        "a throttled host offers only its fraction for new placement",
        [mini_32g("mini-1", state=HostState.THROTTLED, throttle_fraction=0.5)],
        [baseline("m", 16000)],
        [unsatisfied("m", "insufficient_capacity")],
    ),
    s(
        "a throttled host still takes work that fits its fraction",
        [mini_32g("mini-1", state=HostState.THROTTLED, throttle_fraction=0.5)],
        [baseline("m", 8000)],
        [placed("m", "mini-1"), scored_with("m", "mini-1", "throttled")],
    ),
    s(
        "runtime compatibility is enforced",
        [mini_32g("mini-1"), gpu_server_80g("gpu-1")],
        [baseline("m", 4096, runtimes=("vllm",))],
        [placed("m", "gpu-1"), rejected("m", "mini-1", "runtime")],
    ),
    s(
        "backend compatibility is enforced",
        [mini_32g("mini-1"), laptop_16g("lap-1")],
        [baseline("m", 4096, backends=("metal",))],
        [placed("m", "mini-1"), rejected("m", "lap-1", "backend")],
    ),
    s(
        "confidential data never lands on a laptop",
        [laptop_16g("lap-1"), mini_32g("mini-1")],
        [baseline("m", 4096, data_tier=DataTier.CONFIDENTIAL)],
        [placed("m", "mini-1"), rejected("m", "lap-1", "data_tier")],
    ),
    s(
        "required tags are enforced",
        [laptop_16g("lap-1"), gpu_server_80g("gpu-1")],
        [baseline("m", 4096, required_tags=("gpu",))],
        [placed("m", "gpu-1"), rejected("m", "lap-1", "required_tag")],
    ),
    s(
        "forbidden tags are enforced",
        [laptop_16g("lap-1"), mini_32g("mini-1")],
        [baseline("m", 4096, forbidden_tags=("employee",))],
        [placed("m", "mini-1"), rejected("m", "lap-1", "forbidden_tag")],
    ),
    s(
        "host allow lists are enforced",
        [mini_32g("mini-1", allowed_models=("other",)), mini_32g("mini-2")],
        [baseline("m", 4096)],
        [placed("m", "mini-2"), rejected("m", "mini-1", "not_allowed")],
    ),
    s(
        "host deny lists are enforced",
        [mini_32g("mini-1", denied_models=("m",)), mini_32g("mini-2")],
        [baseline("m", 4096)],
        [placed("m", "mini-2"), rejected("m", "mini-1", "denied")],
    ),
    s(
        "a pinned model lives only on its pins",
        [gpu_server_80g("gpu-1"), mini_32g("mini-1"), mini_32g("mini-2")],
        [baseline("m", 4096, pins=("mini-2",))],
        [placed("m", "mini-2"), rejected("m", "gpu-1", "not_pinned")],
    ),
    s(
        "a pin on an absent host is reported",
        [mini_32g("mini-1")],
        [baseline("m", 4096, pins=("ghost",))],
        [placed("m"), unsatisfied("m", "pinned_node_unavailable")],
    ),
    s(
        "a pin on a paused host is reported",
        [mini_32g("mini-1", state=HostState.PAUSED)],
        [baseline("m", 4096, pins=("mini-1",))],
        [unsatisfied("m", "pinned_node_unavailable")],
    ),
    s(
        "per-host model slots are enforced",
        [mini_32g("mini-1", max_models=1)],
        [baseline("a", 2048), baseline("b", 2048)],
        [placed("a", "mini-1"), unsatisfied("b", "insufficient_capacity")],
    ),
    s(
        "an exclusive model takes a host alone",
        [cpu_box_64g("cpu-1")],
        [baseline("solo", 4096, max_colocated_models=1, priority=60), baseline("other", 4096)],
        [placed("solo", "cpu-1"), unsatisfied("other", "colocation_conflict")],
    ),
    s(
        "an exclusive incumbent keeps later models off its host (reciprocal ceiling)",
        [with_residents(cpu_box_64g("cpu-1"), resident("solo", 4096))],
        [baseline("solo", 4096, max_colocated_models=1), baseline("other", 4096, priority=10)],
        [existing("solo", "cpu-1"), unsatisfied("other", "colocation_conflict")],
    ),
    s(
        "colocation excludes are reciprocal even when declared by one side",
        [cpu_box_64g("cpu-1"), cpu_box_64g("cpu-2")],
        [baseline("a", 4096, priority=60), baseline("b", 4096, colocation_excludes=("a",))],
        [placed("a", "cpu-1"), placed("b", "cpu-2")],
    ),
    s(
        "GPU count is enforced",
        [gpu_server_80g("gpu-1"), gpu_server_2x24g("gpu-2x")],
        [baseline("tp", 4096, min_gpu_count=2, runtimes=("vllm",))],
        [placed("tp", "gpu-2x"), rejected("tp", "gpu-1", "gpu_count")],
    ),
    s(
        "GPU memory is enforced",
        [gpu_server_80g("gpu-1"), gpu_server_2x24g("gpu-2x")],
        [baseline("big", 4096, min_gpu_memory_mb=40000, runtimes=("vllm",))],
        [placed("big", "gpu-1"), rejected("big", "gpu-2x", "gpu_memory")],
    ),
    s(
        "an artifact larger than free disk is refused",
        [mini_32g("mini-1", disk_free_mb=3000)],
        [baseline("m", 4096, size_mb=4000)],
        [unsatisfied("m", "disk_admission")],
    ),
    s(
        "disk is reserved cumulatively across uncached models on one host",
        [mini_32g("mini-1", disk_free_mb=7000)],
        [baseline("a", 4096, size_mb=4000, priority=60), baseline("b", 4096, size_mb=4000)],
        [placed("a", "mini-1"), unsatisfied("b", "disk_admission")],
    ),
    s(
        "cached exact weights pay no disk",
        [with_cache(mini_32g("mini-1", disk_free_mb=100), ("m", SHA_A))],
        [baseline("m", 4096, size_mb=4000, sha256=SHA_A)],
        [placed("m", "mini-1")],
    ),
    s(
        "unknown free disk never authorises a transfer",
        [mini_32g("mini-1", disk_free_mb=None)],
        [baseline("m", 4096, size_mb=4000)],
        [unsatisfied("m", "disk_admission"), rejected("m", "mini-1", "disk_unknown")],
    ),
    s(
        "new work needs admission headroom beside live processes (make-before-break)",
        [with_residents(mini_32g("mini-1"), resident("old", 20000))],
        [baseline("old", 20000), baseline("m", 8500)],
        [unsatisfied("m", "insufficient_capacity")],
        pol=policy(admission_headroom_mb=256),
    ),
    s(
        "thermal derating shrinks the desired footprint ledger",
        [mini_32g("mini-1", thermal_derate=0.5)],
        [baseline("m", 16000)],
        [unsatisfied("m", "insufficient_capacity")],
    ),
    s(
        "reserve growth migrates the lowest-priority incumbent to a safe peer",
        [
            with_residents(
                mini_32g("mini-1", reserved_mb=20000), resident("hi", 8192), resident("lo", 8192)
            ),
            mini_32g("mini-2"),
        ],
        [baseline("hi", 8192, priority=90), baseline("lo", 8192, priority=10)],
        [existing("hi", "mini-1"), placed("lo", "mini-2")],
    ),
    s(
        "unmanaged workloads consume capacity first",
        [mini_32g("mini-1", external_mb=20000)],
        [baseline("m", 12000)],
        [unsatisfied("m", "insufficient_capacity")],
    ),
    s(
        "a new placement picks the runtime with the smallest footprint",
        [gpu_server_80g("gpu-1")],
        [baseline("m", 20000, runtimes=("llama.cpp", "vllm"), runtime_memory_mb={"vllm": 12000})],
        [runtime("m", "gpu-1", "vllm")],
    ),
    s(
        "a live compatible residency keeps its runtime",
        [with_residents(gpu_server_80g("gpu-1"), resident("m", 20000, runtime="llama.cpp"))],
        [baseline("m", 20000, runtimes=("llama.cpp", "vllm"), runtime_memory_mb={"vllm": 12000})],
        [existing("m", "gpu-1"), runtime("m", "gpu-1", "llama.cpp")],
    ),
    s(
        "a residency without a runtime is charged the largest matching estimate",
        [
            with_residents(
                mini_32g("mini-1", runtimes=("llama.cpp", "vllm")),
                resident("m", 1000, runtime=None),
            )
        ],
        [
            baseline("m", 9000, runtimes=("llama.cpp", "vllm"), runtime_memory_mb={"vllm": 20000}),
            baseline("other", 9000),
        ],
        [existing("m", "mini-1"), unsatisfied("other", "insufficient_capacity")],
    ),
    s(
        "an old artifact revision does not satisfy; the new one is placed elsewhere first",
        [
            with_residents(mini_32g("mini-1"), resident("m", 4096, artifact_sha256=SHA_B)),
            mini_32g("mini-2"),
        ],
        [baseline("m", 4096, sha256=SHA_A)],
        [placed("m", "mini-2"), preemption_count(0)],
    ),
    s(
        "an unsafe in-place replacement is refused when no peer keeps availability",
        [with_residents(mini_32g("mini-1"), resident("m", 4096, artifact_sha256=SHA_B))],
        [baseline("m", 4096, sha256=SHA_A)],
        [unsatisfied("m", "unsafe_replacement"), preemption_count(0)],
    ),
    s(
        "a loading incumbent counts as occupied: no duplicate cold load",
        [
            with_residents(mini_32g("mini-1"), resident("m", 4096, state=ResidencyState.LOADING)),
            mini_32g("mini-2"),
        ],
        [baseline("m", 4096)],
        [existing("m", "mini-1"), placed("m", "mini-1")],
    ),
    s(
        "a model's sole eligible host is a hard override: the incumbent is repacked",
        [
            with_residents(gpu_server_80g("gpu-1"), resident("small", 60000, runtime="llama.cpp")),
            cpu_box_64g("cpu-1"),
        ],
        [
            baseline("big", 40000, runtimes=("vllm",), priority=50),
            baseline("small", 60000, priority=50),
        ],
        [
            placed("small", "cpu-1"),
            preempts("gpu-1", "small", "big"),
            unsatisfied("big", "preemption_staged"),
        ],
    ),
    s(
        "the repack target stays sticky while the victim drains",
        [
            with_residents(
                gpu_server_80g("gpu-1"), resident("small", 60000, state=ResidencyState.DRAINING)
            ),
            with_residents(cpu_box_64g("cpu-1"), resident("small", 60000)),
        ],
        [baseline("big", 40000, runtimes=("vllm",)), baseline("small", 60000)],
        [
            existing("small", "cpu-1"),
            unsatisfied("big", "preemption_staged"),
            not_on("big", "cpu-1"),
        ],
    ),
    # ---- proactive repack (threshold: repacking.REPACK_MATERIAL_GAIN) --------------------
    s(
        "a materially worse free host stages a proactive repack: the incumbent moves first",
        repack_fleet(),
        [big(), SMALL],
        [
            placed("small", "cpu-1"),
            preempts("gpu-1", "small", "big"),
            preemption_count(1),
            unsatisfied("big", "preemption_staged", missing=1),
            placed_count("big", 0),
        ],
        [HOT],
    ),
    s(
        "a marginally worse free host is used at once: no proactive repack",
        repack_fleet(),
        [big(), SMALL],
        [placed("big", "cpu-1"), existing("small", "gpu-1"), preemption_count(0)],
        [busy("big", rpm=6)],
    ),
    s(
        "cached weights on an occupied host are worth a proactive repack",
        [
            with_residents(with_cache(mini_32g("mini-1"), ("big", None)), resident("small", 20000)),
            mini_32g("mini-2"),
            mini_32g("mini-3"),
        ],
        [baseline("big", 16000), baseline("small", 20000)],
        [
            placed("small", "mini-2"),
            preempts("mini-1", "small", "big"),
            unsatisfied("big", "preemption_staged"),
        ],
    ),
    s(
        "correlation-only demand never stages a proactive repack",
        [
            with_residents(with_cache(mini_32g("mini-1"), ("big", None)), resident("small", 20000)),
            mini_32g("mini-2"),
            mini_32g("mini-3"),
        ],
        [profile("big", 16000, max_replicas=1), baseline("small", 20000)],
        [placed("big", "mini-2"), existing("small", "mini-1"), preemption_count(0)],
        [correlated("big", rpm=600)],
    ),
    s(
        "a proactive repack never moves higher-priority work",
        repack_fleet(),
        [big(priority=50), baseline("small", 50000, priority=90)],
        [placed("big", "cpu-1"), existing("small", "gpu-1"), preemption_count(0)],
        [HOT],
    ),
    s(
        "a proactive repack leaves an incumbent inside its minimum residency alone",
        repack_fleet(loaded_at=NOW - 10),
        [big(), baseline("small", 50000, min_residency_seconds=300)],
        [placed("big", "cpu-1"), existing("small", "gpu-1"), preemption_count(0)],
        [HOT],
    ),
    s(
        "a proactive repack needs a replacement host for the incumbent",
        repack_fleet(),
        [big(), baseline("small", 50000, required_tags=("gpu",))],
        [placed("big", "cpu-1"), existing("small", "gpu-1"), preemption_count(0)],
        [HOT],
    ),
    s(
        "the eviction budget bounds the proactive repack",
        repack_fleet(),
        [big(), SMALL],
        [placed("big", "cpu-1"), existing("small", "gpu-1"), preemption_count(0)],
        [HOT],
        policy(max_evictions_per_plan=0),
    ),
    s(
        "the proactive repack target stays sticky while the victim drains",
        repack_fleet(gpu=ResidencyState.DRAINING, cpu=ResidencyState.READY),
        [big(), SMALL],
        [
            existing("small", "cpu-1"),
            preempts("gpu-1", "small", "big"),
            unsatisfied("big", "preemption_staged"),
            not_on("big", "cpu-2"),
        ],
        [HOT],
    ),
    s(
        "a release in progress holds the replica for a gain too small to start a repack",
        repack_fleet(gpu=ResidencyState.DRAINING, cpu=ResidencyState.READY),
        [big(), SMALL],
        [preempts("gpu-1", "small", "big"), not_on("big", "cpu-2")],
        [busy("big", rpm=60)],  # the same demand on the undisturbed fleet uses cpu-1 now
    ),
    s(
        "a lowered model limit keeps the higher-priority survivor and stages the other out",
        [
            with_residents(
                mini_32g("mini-1", max_models=1), resident("hi", 4096), resident("lo", 4096)
            ),
            mini_32g("mini-2"),
        ],
        [baseline("hi", 4096, priority=90), baseline("lo", 4096, priority=10)],
        [existing("hi", "mini-1"), placed("lo", "mini-2"), preempts("mini-1", "lo", "hi")],
    ),
    s(
        "failed warm attempts steer a replica to a healthy peer",
        [mini_32g("mini-1", failed_attempts=(("m", 3),)), mini_32g("mini-2")],
        [baseline("m", 4096)],
        [placed("m", "mini-2"), scored_with("m", "mini-1", "failed_attempts")],
    ),
    s(
        "a failed host remains a fallback when it is the only one",
        [mini_32g("mini-1", failed_attempts=(("m", 3),))],
        [baseline("m", 4096)],
        [placed("m", "mini-1")],
    ),
    # ---- placement order and scoring ----------------------------------------------------
    s(
        "hard pins are reserved before higher-priority work",
        [mini_32g("mini-1")],
        [
            baseline("pinned", 16000, pins=("mini-1",), priority=10),
            baseline("vip", 16000, priority=90),
        ],
        [placed("pinned", "mini-1"), unsatisfied("vip", "insufficient_capacity")],
    ),
    s(
        "higher priority classes fill first",
        [mini_32g("mini-1")],
        [baseline("lo", 16000, priority=10), baseline("hi", 16000, priority=90)],
        [placed("hi", "mini-1"), unsatisfied("lo", "insufficient_capacity")],
    ),
    s(
        "baseline replicas place before direct demand of the same class",
        [mini_32g("mini-1")],
        [baseline("aaa-base", 16000), profile("zzz-direct", 16000)],
        [placed("aaa-base", "mini-1"), unsatisfied("zzz-direct", "insufficient_capacity")],
        [busy("zzz-direct")],
    ),
    s(
        "direct demand places before inferred-only prewarms",
        [mini_32g("mini-1")],
        [profile("aaa-guess", 16000), profile("zzz-real", 16000)],
        [placed("zzz-real", "mini-1"), unsatisfied("aaa-guess", "insufficient_capacity")],
        [correlated("aaa-guess"), busy("zzz-real")],
    ),
    s(
        "rounds are max-min fair: every model gets one before any gets two",
        [laptop_16g("l1"), laptop_16g("l2")],
        [profile("a", 8000, max_replicas=2), profile("b", 8000, max_replicas=2)],
        [placed_count("a", 1), placed_count("b", 1)],
        [busy("a", 6000), busy("b", 6000)],
    ),
    s(
        "the more constrained model places first",
        [gpu_server_80g("gpu-1", tags=("gpu",), reserved_mb=81920 - 30000), mini_32g("mini-1")],
        [baseline("flex", 20000), baseline("needs-gpu", 20000, required_tags=("gpu",))],
        [placed("needs-gpu", "gpu-1"), placed("flex", "mini-1")],
    ),
    s(
        "a partial round goes to the model with more attributable harm, not the smaller id",
        [laptop_16g("l1")],
        [profile("aaa", 8000), profile("zzz", 8000)],
        [placed("zzz", "l1"), unsatisfied("aaa", "insufficient_capacity")],
        [busy("aaa", 60), busy("zzz", 60, queue_depth=5)],
    ),
    s(
        "replicas spread over failure domains first",
        [
            cpu_box_64g("a1", failure_domain="rack-a"),
            cpu_box_64g("a2", failure_domain="rack-a"),
            mini_32g("b1", failure_domain="rack-b"),
        ],
        [baseline("m", 4096, replicas=2, min_failure_domains=2)],
        [placed_count("m", 2), placed("m", "a1", "b1"), satisfied("m")],
    ),
    s(
        "a failure-domain shortfall is reported, not hidden",
        [cpu_box_64g("a1", failure_domain="rack-a"), cpu_box_64g("a2", failure_domain="rack-a")],
        [baseline("m", 4096, replicas=2, min_failure_domains=2)],
        [placed_count("m", 2), unsatisfied("m", "failure_domain_shortfall")],
    ),
    s(
        "an existing ready residency is preferred",
        [mini_32g("mini-1"), with_residents(mini_32g("mini-2"), resident("m", 4096))],
        [baseline("m", 4096)],
        [existing("m", "mini-2")],
    ),
    s(
        "cached weights are preferred over a cold host",
        [mini_32g("mini-1"), with_cache(mini_32g("mini-2"), ("m", None))],
        [baseline("m", 4096)],
        [placed("m", "mini-2"), scored_with("m", "mini-2", "cached_weights")],
    ),
    s(
        "measured throughput is preferred",
        [
            cpu_box_64g("slow", measured_tokens_per_second=10.0),
            cpu_box_64g("fast", measured_tokens_per_second=90.0),
        ],
        [baseline("m", 4096)],
        [placed("m", "fast")],
    ),
    s(
        "hardware priors break cold ties before measurements exist",
        [mini_32g("mini-1"), gpu_server_80g("gpu-1", runtimes=("llama.cpp",))],
        [baseline("m", 4096)],
        [placed("m", "gpu-1"), scored_with("m", "gpu-1", "hardware_prior")],
    ),
    s(
        "light demand keeps cached weights over a faster cold host",
        [
            with_cache(mini_32g("mini-1"), ("m", None)),
            gpu_server_80g("gpu-1", runtimes=("llama.cpp",)),
        ],
        [profile("m", 4096)],
        [placed("m", "mini-1")],
        [busy("m", rpm=6)],
    ),
    s(
        "hot demand's performance factor amortises a faster cold host",
        [
            with_cache(
                laptop_16g("lap-1", memory_bandwidth_gbps=50.0, compute_gflops=500.0), ("m", None)
            ),
            gpu_server_80g("gpu-1", runtimes=("llama.cpp",)),
        ],
        [profile("m", 4096)],
        [placed("m", "gpu-1")],
        [busy("m", rpm=600)],
    ),
    s(
        "host priority and measured latency lower a score",
        [mini_32g("busy-host", host_priority=900, measured_latency_ms=2000.0), mini_32g("mini-2")],
        [baseline("m", 4096)],
        [placed("m", "mini-2"), scored_with("m", "busy-host", "host_priority")],
    ),
    s(
        "a complete current placement is kept as the feasibility witness",
        [with_residents(mini_32g("mini-1"), resident("flex", 8192)), gpu_server_80g("gpu-1")],
        [baseline("flex", 8192), baseline("gpu-only", 8192, required_tags=("gpu",))],
        [existing("flex", "mini-1"), placed("gpu-only", "gpu-1"), preemption_count(0)],
    ),
    s(
        "a flexible model avoids the host a constrained model needs",
        [
            gpu_server_80g("gpu-1"),
            mini_32g("mini-1", memory_bandwidth_gbps=100.0, compute_gflops=1000.0),
        ],
        [baseline("flex", 4096, priority=90), profile("gpu-only", 4096, required_tags=("gpu",))],
        [placed("flex", "mini-1"), scored_with("flex", "gpu-1", "scarcity")],
        [correlated("gpu-only")],
    ),
    s(
        "bounded repair moves a fresh replica to fit a fragmented fleet",
        [host("h1", 10_000, failure_domain="a"), host("h2", 6_000, failure_domain="b")],
        [baseline("big", 9_000, max_colocated_models=0), baseline("small", 5_000)],
        [placed("big", "h1"), placed("small", "h2")],
        pol=policy(admission_headroom_mb=0),
    ),
    s(
        "a saturated homogeneous empty fleet fails fast",
        [host(f"h{i}", 8_000) for i in range(3)],
        [baseline("m", 6_000, replicas=3), baseline("n", 6_000)],
        [placed_count("m", 2), placed_count("n", 1), unsatisfied("m", "insufficient_capacity", 1)],
        pol=policy(admission_headroom_mb=0),
    ),
    # ---- preemption --------------------------------------------------------------------
    s(
        "lower-priority managed work is preempted, the beneficiary waits",
        [with_residents(mini_32g("mini-1"), resident("batch", 20000))],
        [baseline("batch", 20000, priority=10), baseline("critical", 16000, priority=90)],
        [
            preempts("mini-1", "batch", "critical"),
            unsatisfied("critical", "preemption_staged"),
            not_on("critical", "mini-1"),
        ],
    ),
    s(
        "equal priority never preempts",
        [with_residents(mini_32g("mini-1"), resident("a", 20000))],
        [baseline("a", 20000), baseline("b", 16000)],
        [preemption_count(0), existing("a", "mini-1"), unsatisfied("b", "insufficient_capacity")],
    ),
    s(
        "idle victims are preferred over busy ones",
        [
            with_residents(mini_32g("busy"), resident("x", 20000, active_requests=3)),
            with_residents(mini_32g("idle"), resident("y", 20000)),
        ],
        [
            baseline("x", 20000, priority=10),
            baseline("y", 20000, priority=10),
            baseline("vip", 16000, priority=90),
        ],
        [preempts("idle", "y", "vip"), preemption_count(1)],
    ),
    s(
        "among equal victims the lowest warm-back cost goes",
        [
            with_residents(mini_32g("m1"), resident("slow", 20000)),
            with_residents(mini_32g("m2"), resident("quick", 20000)),
        ],
        [
            baseline("slow", 20000, priority=10, load_seconds=600),
            baseline("quick", 20000, priority=10, load_seconds=5),
            baseline("vip", 16000, priority=90),
        ],
        [preempts("m2", "quick", "vip"), preemption_count(1)],
    ),
    s(
        "failure-domain diversity is reserved before disruption cost",
        [
            with_residents(mini_32g("a1", failure_domain="rack-a"), resident("vip", 16000)),
            with_residents(mini_32g("a2", failure_domain="rack-a"), resident("cheap", 20000)),
            with_residents(
                mini_32g("b1", failure_domain="rack-b"), resident("dear", 20000, active_requests=4)
            ),
        ],
        [
            baseline("vip", 16000, replicas=2, priority=90, min_failure_domains=2),
            baseline("cheap", 20000, priority=10),
            baseline("dear", 20000, priority=10),
        ],
        [preempts("b1", "dear", "vip"), preemption_count(1)],
    ),
    s(
        "a missing hard pin targets its exact node",
        [
            with_residents(mini_32g("mini-1"), resident("batch", 20000)),
            with_residents(mini_32g("mini-2"), resident("batch2", 20000)),
        ],
        [
            baseline("batch", 20000, priority=10),
            baseline("batch2", 20000, priority=10),
            baseline("pinned", 16000, priority=90, pins=("mini-1",)),
        ],
        [
            preempts("mini-1", "batch", "pinned"),
            preemption_count(1),
            unsatisfied("pinned", "preemption_staged"),
        ],
    ),
    s(
        "evictions per plan are bounded by policy",
        [with_residents(mini_32g(f"m{i}"), resident("batch", 20000)) for i in range(3)],
        [
            baseline("batch", 20000, priority=10, max_replicas=3, replicas=3),
            baseline("vip", 16000, priority=90, replicas=3),
        ],
        [preemption_count(2), unsatisfied("vip", "eviction_limit")],
        pol=policy(max_evictions_per_plan=2),
    ),
    s(
        "a staged-out victim is not kept on the host it drains from",
        [
            with_residents(
                mini_32g("mini-1"),
                resident("batch", 6000),
                resident("junk", 12000, state=ResidencyState.FAILED),
            )
        ],
        [
            baseline("batch", 6000, priority=10),
            baseline("junk", 12000, priority=10),
            baseline("vip", 12000, priority=90),
        ],
        [
            preempts("mini-1", "batch", "vip"),
            not_on("batch", "mini-1"),
            unsatisfied("batch", "insufficient_capacity"),
        ],
    ),
    s(
        "external and manual work is never preempted but still serves",
        [
            with_residents(mini_32g("mini-1"), external("ext", 20000)),
            with_residents(mini_32g("mini-2"), manual("man", 20000)),
        ],
        [
            baseline("ext", 20000, priority=10),
            baseline("man", 20000, priority=10),
            baseline("vip", 16000, priority=90),
        ],
        [
            preemption_count(0),
            existing("ext", "mini-1"),
            existing("man", "mini-2"),
            unsatisfied("vip", "insufficient_capacity"),
        ],
    ),
    s(
        "minimum residency protects a freshly loaded victim",
        [with_residents(mini_32g("mini-1"), resident("batch", 20000, loaded_at=NOW - 10))],
        [
            baseline("batch", 20000, priority=10, min_residency_seconds=300),
            baseline("vip", 16000, priority=90),
        ],
        [preemption_count(0), unsatisfied("vip", "insufficient_capacity")],
    ),
    s(
        "a failed victim goes before a ready one",
        [
            with_residents(mini_32g("ok"), resident("x", 20000)),
            with_residents(
                mini_32g("broken"),
                resident("y", 20000, state=ResidencyState.FAILED, active_requests=1),
            ),
        ],
        [
            baseline("x", 20000, priority=10),
            baseline("y", 20000, priority=10),
            baseline("vip", 16000, priority=90),
        ],
        [preempts("broken", "y", "vip"), preemption_count(1)],
    ),
    s(
        "an external endpoint is inventory only",
        [external_endpoint("ext-1")],
        [baseline("m", 4096, runtimes=("vllm",))],
        [unsatisfied("m", "no_eligible_nodes"), rejected("m", "ext-1", "host_unmanaged")],
    ),
]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[sc.name for sc in SCENARIOS])
def test_scenario(scenario: Scenario) -> None:
    snapshot = fleet(*scenario.hosts, demand=scenario.demand)  # type: ignore[arg-type]
    profiles = list(scenario.models)
    plan = plan_placement(profiles, snapshot, scenario.policy)
    for expectation in scenario.expect:
        expectation(plan)
    assert hard_rule_violations(profiles, snapshot, scenario.policy, plan) == []
    assert preemption_violations(profiles, snapshot, scenario.policy, plan) == []


def test_a_gain_too_small_to_start_a_repack_uses_the_free_host() -> None:
    """The pair of the hysteresis scenario: on the undisturbed fleet the same demand
    does not start a repack."""
    plan = plan_placement([big(), SMALL], fleet(*repack_fleet(), demand=(busy("big", rpm=60),)))
    placed("big", "cpu-1")(plan)
    preemption_count(0)(plan)


@pytest.mark.parametrize(
    ("gpu", "cpu"),
    [
        # the repack is staged: the incumbent's replacement is a new assignment
        pytest.param(ResidencyState.READY, None, id="staged"),
        # the replacement loads, then is ready beside the old copy: the repack holds
        pytest.param(ResidencyState.READY, ResidencyState.LOADING, id="replacement-loading"),
        pytest.param(ResidencyState.READY, ResidencyState.READY, id="replacement-ready"),
        # the old copy drains, then unloads: the target stays sticky
        pytest.param(ResidencyState.DRAINING, ResidencyState.READY, id="victim-draining"),
        pytest.param(ResidencyState.UNLOADING, ResidencyState.READY, id="victim-unloading"),
    ],
)
def test_proactive_repack_holds_through_every_step_of_the_release(
    gpu: ResidencyState, cpu: ResidencyState | None
) -> None:
    snapshot = fleet(*repack_fleet(gpu=gpu, cpu=cpu), demand=(HOT,))
    plan = plan_placement([big(), SMALL], snapshot)
    placed("small", "cpu-1")(plan)
    if cpu is not None:
        existing("small", "cpu-1")(plan)
    preempts("gpu-1", "small", "big")(plan)
    preemption_count(1)(plan)
    unsatisfied("big", "preemption_staged")(plan)
    placed_count("big", 0)(plan)
    assert preemption_violations([big(), SMALL], snapshot, ControllerPolicy(), plan) == []


def test_proactive_repack_places_the_beneficiary_once_the_host_is_released() -> None:
    plan = plan_placement(
        [big(), SMALL], fleet(*repack_fleet(gpu=None, cpu=ResidencyState.READY), demand=(HOT,))
    )
    placed("big", "gpu-1")(plan)
    existing("small", "cpu-1")(plan)
    preemption_count(0)(plan)
    satisfied("big")(plan)


def test_there_are_at_least_forty_named_scenarios() -> None:
    assert len({sc.name for sc in SCENARIOS}) == len(SCENARIOS) >= 40
