"""Inputs and outputs of the split-topology planner.

The planner never inspects machines: the host runtime describes the model
(``ModelShape``) and each node's memory budget (``PlannerNode``), and gets
back either a ``TopologyPlan`` or a ``PlanRejection``. An unplaceable model
is data, not an exception; malformed inputs (negative sizes, duplicate node
ids) are programming errors and raise ``ValueError`` when constructed.

Stage layer ranges are half-open: a stage serves layers
``layer_start <= layer < layer_end``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# The shared context floor; for models whose native context is smaller, the
# floor is the native context.
CONTEXT_FLOOR = 65_536
# llama-server's default ``--parallel 4``; lanes are tried from here down to 1.
DEFAULT_LANES = 4


@dataclass(frozen=True)
class ModelShape:
    """What the planner needs to know about the model's GGUF."""

    layer_count: int
    weight_bytes: int
    kv_bytes_per_token: int  # all layers, for the selected KV cache type
    native_context: int

    def __post_init__(self) -> None:
        _require(self.layer_count >= 1, "layer_count must be >= 1")
        _require(self.weight_bytes >= 0, "weight_bytes must be >= 0")
        _require(self.kv_bytes_per_token >= 0, "kv_bytes_per_token must be >= 0")
        _require(self.native_context >= 1, "native_context must be >= 1")


@dataclass(frozen=True)
class PlannerNode:
    """One candidate stage host and its memory budget.

    Usable memory is ``min(detected, max) - headroom``, never below zero;
    ``max_bytes`` is the operator's cap (``--max-vram``), ``headroom_bytes``
    what the local runtime keeps back.
    """

    node_id: str
    detected_bytes: int
    max_bytes: int | None = None
    headroom_bytes: int = 0
    stage_latency_ms: float | None = None  # transfer latency to this stage

    def __post_init__(self) -> None:
        _require(self.node_id.strip() != "", "node_id must not be empty")
        _require(self.detected_bytes >= 0, f"{self.node_id}: detected_bytes must be >= 0")
        _require(
            self.max_bytes is None or self.max_bytes >= 0,
            f"{self.node_id}: max_bytes must be >= 0",
        )
        _require(self.headroom_bytes >= 0, f"{self.node_id}: headroom_bytes must be >= 0")
        _require(
            self.stage_latency_ms is None or self.stage_latency_ms >= 0,
            f"{self.node_id}: stage_latency_ms must be >= 0",
        )

    @property
    def usable_bytes(self) -> int:
        budget = self.detected_bytes
        if self.max_bytes is not None:
            budget = min(budget, self.max_bytes)
        return max(0, budget - self.headroom_bytes)


@dataclass(frozen=True)
class PlanRequest:
    """Everything one planning run depends on; the same request gives the same plan."""

    model: ModelShape
    nodes: tuple[PlannerNode, ...]
    min_nodes: int = 1
    context_override: int | None = None
    lanes_override: int | None = None
    target_tpot_ms: float | None = None

    def __post_init__(self) -> None:
        _require(self.min_nodes >= 1, "min_nodes must be >= 1")
        _require(
            self.lanes_override is None or self.lanes_override >= 1,
            "lanes_override must be >= 1",
        )
        _require(
            self.context_override is None or self.context_override >= 1,
            "context_override must be >= 1",
        )
        _require(
            self.target_tpot_ms is None or self.target_tpot_ms >= 0,
            "target_tpot_ms must be >= 0",
        )
        ids = [node.node_id for node in self.nodes]
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        _require(not duplicates, f"duplicate node ids: {', '.join(duplicates)}")

    @property
    def uses_latency(self) -> bool:
        """Latency inputs switch the planner from ordered search to scoring."""
        has_latency = any(node.stage_latency_ms is not None for node in self.nodes)
        return has_latency or self.target_tpot_ms is not None


@dataclass(frozen=True)
class Stage:
    """One selected node and its contiguous, half-open layer range."""

    node_id: str
    layer_start: int
    layer_end: int
    used_bytes: int
    usable_bytes: int

    @property
    def layer_count(self) -> int:
        return self.layer_end - self.layer_start

    @property
    def margin_bytes(self) -> int:
        return self.usable_bytes - self.used_bytes


@dataclass(frozen=True)
class TopologyPlan:
    """A deterministic stage plan; stages are ordered by layer range."""

    context_length: int
    parallel_lanes: int
    stages: tuple[Stage, ...]
    bytes_per_layer: int
    estimated_decode_network_ms_per_token: float | None = None
    tpot_target_met: bool | None = None

    @property
    def stage_count(self) -> int:
        return len(self.stages)

    @property
    def min_margin_bytes(self) -> int:
        return min(stage.margin_bytes for stage in self.stages)


class RejectionReason(StrEnum):
    """Why no plan was produced."""

    NO_VALID_TOPOLOGY = "no_valid_topology"
    CONTEXT_EXCEEDS_NATIVE = "context_exceeds_native"
    CONTEXT_BELOW_MINIMUM = "context_below_minimum"


@dataclass(frozen=True)
class PlanRejection:
    """The planner refused; ``message`` says why in one sentence.

    ``contexts_tried`` lists the context lengths searched (high to low) and
    ``placeable_layers`` how many layers all offered nodes together could hold
    at the lowest of them, so "why not?" can be answered without re-planning.
    """

    reason: RejectionReason
    message: str
    native_context: int
    minimum_context: int
    requested_context: int | None = None
    contexts_tried: tuple[int, ...] = ()
    layer_count: int = 0
    placeable_layers: int = 0


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
