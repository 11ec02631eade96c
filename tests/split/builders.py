"""Named builders for split tests: claims, loads, stops, the 480B model and GPU nodes.

The 480B-class shape (Qwen3-Coder-480B-like, Q4_K_M-sized) is chosen so every
representative outcome in the specification holds at once:

* 62 layers, 272 GiB of weights -> ceil(272 GiB / 62) = 4,710,609,293 B/layer (~4.39 GiB)
* 253,952 KV bytes per token (62 layers x 8 KV heads x 128 dims x K+V x f16)
  -> 4,096 B per layer per token: 0.25 GiB/layer at 65,536, 0.5 at 131,072, 1 at 262,144
* native context 262,144; 4 GiB runtime headroom per node

Usable memory: 80 GiB nodes -> 76 GiB, 70 GiB nodes -> 66 GiB. Layers per node:

    context   per layer   80 GiB node   70 GiB node
    262,144   ~5.39 GiB   14            12
    131,072   ~4.89 GiB   15            13
     65,536   ~4.64 GiB   16            14

So 4 x 70 GiB holds at most 56 < 62 layers anywhere (rejected); 4 x 80 GiB first
fits at 65,536 (64 >= 62); 5 x 80 GiB fits at native (70 >= 62) while 4 do not
(56), so 10 x 80 GiB still uses 5.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.split import Claim, ModelShape, PlannerNode, StageLoad, StopRequest

GiB = 1 << 30
MiB = 1 << 20
NOW_MS = 1_800_000_000_000
LEASE_MS = 4 * 60 * 60 * 1000  # the host runtime's 4 hour split lease


def claim(**changes: object) -> Claim:
    """A valid term-10 claim by coordinator ``node-a``, leased for 4 hours from ``NOW_MS``."""
    base = Claim(
        model_id="qwen3-coder-480b",
        package_ref="hf://qwen/qwen3-coder-480b-gguf@q4_k_m",
        manifest_sha256="a" * 64,
        coordinator_id="node-a",
        coordinator_term=10,
        topology_id="topo-1",
        run_id="run-1",
        participant_set_hash="participants-1",
        topology_hash="stages-1",
        lease_until_unix_ms=NOW_MS + LEASE_MS,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def load_for(accepted: Claim, **changes: object) -> StageLoad:
    """The load the coordinator of ``accepted`` would send."""
    base = StageLoad(
        model_id=accepted.model_id,
        package_ref=accepted.package_ref,
        manifest_sha256=accepted.manifest_sha256,
        coordinator_id=accepted.coordinator_id,
        coordinator_term=accepted.coordinator_term,
        topology_id=accepted.topology_id,
        run_id=accepted.run_id,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def unfenced_load(**changes: object) -> StageLoad:
    """A local/legacy load: term 0, no coordinator id."""
    return load_for(claim(), **{"coordinator_id": None, "coordinator_term": 0, **changes})


def stop_for(accepted: Claim, **changes: object) -> StopRequest:
    """The stop the coordinator of ``accepted`` would send."""
    base = StopRequest(
        model_id=accepted.model_id,
        package_ref=accepted.package_ref,
        manifest_sha256=accepted.manifest_sha256,
        coordinator_id=accepted.coordinator_id,
        coordinator_term=accepted.coordinator_term,
    )
    return replace(base, **changes)  # type: ignore[arg-type]


def qwen_480b() -> ModelShape:
    """The 480B-class shape documented above."""
    return ModelShape(
        layer_count=62,
        weight_bytes=272 * GiB,
        kv_bytes_per_token=253_952,
        native_context=262_144,
    )


def gpu(
    node_id: str,
    gib: int = 80,
    *,
    max_gib: int | None = None,
    headroom_gib: int = 4,
    latency_ms: float | None = None,
) -> PlannerNode:
    """A GPU node with ``gib`` detected, an optional cap, and 4 GiB headroom by default."""
    return PlannerNode(
        node_id=node_id,
        detected_bytes=gib * GiB,
        max_bytes=None if max_gib is None else max_gib * GiB,
        headroom_bytes=headroom_gib * GiB,
        stage_latency_ms=latency_ms,
    )


def gpus(count: int, gib: int = 80) -> tuple[PlannerNode, ...]:
    """``count`` identical GPU nodes named ``gpu-00``, ``gpu-01``, ..."""
    return tuple(gpu(f"gpu-{index:02d}", gib) for index in range(count))
