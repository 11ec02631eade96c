"""Conservative memory arithmetic and the split of layers over chosen nodes.

Per-layer cost at a context length is

    ceil(weight_bytes / layer_count) + ceil(kv_bytes_per_token / layer_count) * context

rounded up twice so the estimate never undershoots. Parallel lanes share one
unified KV cache (llama.cpp ``kv_unified=true``), so the lane count does not
change the cost; nothing here takes lanes as an input.

A node set fits when every node holds at least one layer and together they
hold all layers. Layers are then handed out one at a time to the node with
the most memory left (ties to the node ranked first), starting from one layer
each. That greedy split maximises the smallest remaining margin, which is the
margin the planner compares, and naturally gives smaller or capped nodes
fewer layers than their larger peers.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from gridctl.split.topologies import ModelShape, PlannerNode, Stage


def ceil_div(numerator: int, denominator: int) -> int:
    return -(-numerator // denominator)


def bytes_per_layer(model: ModelShape, context: int) -> int:
    """The conservative per-layer memory estimate at ``context`` tokens."""
    weights = ceil_div(model.weight_bytes, model.layer_count)
    kv = ceil_div(model.kv_bytes_per_token, model.layer_count)
    return weights + kv * context


def layer_capacity(node: PlannerNode, per_layer: int, layer_count: int) -> int:
    """How many layers ``node`` could hold on its own, at most ``layer_count``."""
    if per_layer == 0:
        return layer_count
    return min(layer_count, node.usable_bytes // per_layer)


def can_fit(nodes: Sequence[PlannerNode], layer_count: int, per_layer: int) -> bool:
    """Every node takes at least one layer and all layers find a node."""
    capacities = [layer_capacity(node, per_layer, layer_count) for node in nodes]
    return 0 < len(nodes) <= layer_count and min(capacities) >= 1 and sum(capacities) >= layer_count


def split_layers(
    nodes: Sequence[PlannerNode], layer_count: int, per_layer: int
) -> tuple[int, ...] | None:
    """Layers per node (in ``nodes`` order) maximising the smallest margin, or ``None``."""
    if not can_fit(nodes, layer_count, per_layer):
        return None
    counts = [1] * len(nodes)
    # Max-heap on remaining bytes; the index breaks ties towards earlier-ranked nodes.
    heap = [(-(node.usable_bytes - per_layer), index) for index, node in enumerate(nodes)]
    heapq.heapify(heap)
    for _ in range(layer_count - len(nodes)):
        negative_margin, index = heapq.heappop(heap)
        counts[index] += 1
        heapq.heappush(heap, (negative_margin + per_layer, index))
    return tuple(counts)


def lay_out_stages(
    nodes: Sequence[PlannerNode], counts: Sequence[int], per_layer: int
) -> tuple[Stage, ...]:
    """Contiguous layer ranges, assigned in node-id order so input order never matters."""
    stages: list[Stage] = []
    start = 0
    for node, count in sorted(zip(nodes, counts, strict=True), key=lambda pair: pair[0].node_id):
        stages.append(
            Stage(
                node_id=node.node_id,
                layer_start=start,
                layer_end=start + count,
                used_bytes=count * per_layer,
                usable_bytes=node.usable_bytes,
            )
        )
        start += count
    return tuple(stages)
