"""The split-topology planner: pick context, nodes and lanes for one model.

Without latency inputs the search is ordered for decode speed and stops at
the first fit: contexts from native down to the floor, then node counts from
``min_nodes`` upward, then lanes from 4 down to 1. Fewer nodes beat more
lanes, because every extra node is another split boundary and network hop.

With a stage latency or a TPOT target, every feasible context/node-count/lane
candidate is scored instead and the best wins on, in order: TPOT target met,
lower ``stage_count * max(stage latency)``, higher context, more lanes, larger
smallest margin (then larger total margin, fewer stages, node ids).

For a given context and node count the best node set is the nodes with the
most usable memory (ties to the smaller node id): no other set fits where it
does not, or leaves a larger margin. Under latency scoring the same holds
within "nodes no slower than t", so trying each distinct latency t as a
ceiling enumerates every candidate that could win without trying every set.

Readings of the specification where it leaves room:

* A node without a measured latency, when others have one, is assumed as
  slow as the slowest measured node (an unknown hop is never assumed fast).
* A TPOT target with no latency measured anywhere cannot be evaluated: the
  ordered search is used and the estimate and target-met flag stay ``None``.
* A target is met when the estimate is at or below it. The estimate follows
  the documented formula literally, so a one-stage plan costs one hop.
* "Remaining margin" is the smallest per-stage ``usable - used``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gridctl.split.contexts import context_candidates, context_floor, override_problem
from gridctl.split.layer_fitting import (
    bytes_per_layer,
    lay_out_stages,
    layer_capacity,
    split_layers,
)
from gridctl.split.topologies import (
    DEFAULT_LANES,
    PlannerNode,
    PlanRejection,
    PlanRequest,
    RejectionReason,
    TopologyPlan,
)


def plan_topology(request: PlanRequest) -> TopologyPlan | PlanRejection:
    """The best stage plan for ``request``, or the reason there is none."""
    model = request.model
    if request.context_override is not None:
        problem = override_problem(model.native_context, request.context_override)
        if problem is not None:
            return _override_rejection(request, problem)
        contexts: tuple[int, ...] = (request.context_override,)
    else:
        contexts = context_candidates(model.native_context)
    latencies = _effective_latencies(request.nodes) if request.uses_latency else None
    if latencies is None:
        plan = _first_fit(request, contexts)
    else:
        plan = _best_scored(request, contexts, latencies)
    return plan if plan is not None else _no_topology(request, contexts)


def lane_candidates(request: PlanRequest) -> tuple[int, ...]:
    """Lane counts to try, most first; an override is the only candidate."""
    if request.lanes_override is not None:
        return (request.lanes_override,)
    return tuple(range(DEFAULT_LANES, 0, -1))


def ranked_nodes(nodes: Sequence[PlannerNode]) -> tuple[PlannerNode, ...]:
    """Most usable memory first; node id breaks ties so input order never matters."""
    return tuple(sorted(nodes, key=lambda node: (-node.usable_bytes, node.node_id)))


def node_counts(request: PlanRequest) -> range:
    """Stage counts to try: from ``min_nodes`` up to one stage per node or per layer."""
    most = min(len(request.nodes), request.model.layer_count)
    return range(request.min_nodes, most + 1)


def _first_fit(request: PlanRequest, contexts: tuple[int, ...]) -> TopologyPlan | None:
    ranked = ranked_nodes(request.nodes)
    for context in contexts:
        per_layer = bytes_per_layer(request.model, context)
        for count in node_counts(request):
            chosen = ranked[:count]
            for lanes in lane_candidates(request):
                # Lanes share one KV cache, so this fit does not vary with lanes.
                layers = split_layers(chosen, request.model.layer_count, per_layer)
                if layers is not None:
                    stages = lay_out_stages(chosen, layers, per_layer)
                    return TopologyPlan(context, lanes, stages, per_layer)
    return None


@dataclass(frozen=True)
class _Candidate:
    plan: TopologyPlan
    network_ms: float
    target_met: bool | None

    def rank(self) -> tuple[int, float, int, int, int, int, int, tuple[str, ...]]:
        plan = self.plan
        total_margin = sum(stage.margin_bytes for stage in plan.stages)
        return (
            0 if self.target_met else 1,
            self.network_ms,
            -plan.context_length,
            -plan.parallel_lanes,
            -plan.min_margin_bytes,
            -total_margin,
            plan.stage_count,
            tuple(stage.node_id for stage in plan.stages),
        )


def _best_scored(
    request: PlanRequest, contexts: tuple[int, ...], latencies: dict[str, float]
) -> TopologyPlan | None:
    candidates: list[_Candidate] = []
    ceilings = sorted(set(latencies.values()))
    for context in contexts:
        per_layer = bytes_per_layer(request.model, context)
        for count in node_counts(request):
            found = _fastest_set(request, latencies, ceilings, count, per_layer)
            if found is None:
                continue
            chosen, layers = found
            network_ms = count * max(latencies[node.node_id] for node in chosen)
            met = None if request.target_tpot_ms is None else network_ms <= request.target_tpot_ms
            stages = lay_out_stages(chosen, layers, per_layer)
            for lanes in lane_candidates(request):
                plan = TopologyPlan(context, lanes, stages, per_layer, network_ms, met)
                candidates.append(_Candidate(plan, network_ms, met))
    if not candidates:
        return None
    return min(candidates, key=_Candidate.rank).plan


def _fastest_set(
    request: PlanRequest,
    latencies: dict[str, float],
    ceilings: list[float],
    count: int,
    per_layer: int,
) -> tuple[tuple[PlannerNode, ...], tuple[int, ...]] | None:
    """The best-margin fitting set of ``count`` nodes under the lowest latency ceiling.

    A higher ceiling can only add slower nodes, which raises the network
    estimate; since that estimate outranks margin, the lowest ceiling that
    fits is the only one worth keeping for this context and count.
    """
    ranked = ranked_nodes(request.nodes)  # cheap next to split_layers; keeps the call simple
    for ceiling in ceilings:
        pool = [node for node in ranked if latencies[node.node_id] <= ceiling]
        if len(pool) < count:
            continue
        chosen = tuple(pool[:count])
        layers = split_layers(chosen, request.model.layer_count, per_layer)
        if layers is not None:
            return chosen, layers
    return None


def _effective_latencies(nodes: Sequence[PlannerNode]) -> dict[str, float] | None:
    """Per-node latency, unknown ones at the slowest measured; ``None`` if none measured."""
    measured = [node.stage_latency_ms for node in nodes if node.stage_latency_ms is not None]
    if not measured:
        return None
    slowest = max(measured)
    return {
        node.node_id: slowest if node.stage_latency_ms is None else node.stage_latency_ms
        for node in nodes
    }


def _override_rejection(request: PlanRequest, problem: RejectionReason) -> PlanRejection:
    native = request.model.native_context
    floor = context_floor(native)
    requested = request.context_override
    if problem is RejectionReason.CONTEXT_EXCEEDS_NATIVE:
        message = f"requested context {requested} exceeds the native context {native}"
    else:
        message = f"requested context {requested} is below the minimum context {floor}"
    return PlanRejection(
        reason=problem,
        message=message,
        native_context=native,
        minimum_context=floor,
        requested_context=requested,
        layer_count=request.model.layer_count,
    )


def _no_topology(request: PlanRequest, contexts: tuple[int, ...]) -> PlanRejection:
    model = request.model
    lowest = contexts[-1]
    per_layer = bytes_per_layer(model, lowest)
    placeable = min(
        model.layer_count,
        sum(layer_capacity(node, per_layer, model.layer_count) for node in request.nodes),
    )
    holders = sum(1 for node in request.nodes if layer_capacity(node, per_layer, 1) >= 1)
    most_stages = min(len(request.nodes), model.layer_count)
    if request.min_nodes > most_stages:
        message = (
            f"at least {request.min_nodes} nodes are required but only "
            f"{most_stages} stages are possible"
        )
    elif placeable >= model.layer_count:
        message = (
            f"at least {request.min_nodes} nodes are required but only {holders} "
            f"can hold a layer at context {lowest}"
        )
    else:
        where = (
            f"at context {lowest}"
            if len(contexts) == 1
            else f"at any context from {contexts[0]} down to {lowest}"
        )
        message = (
            f"the {model.layer_count} layers cannot be split over the offered nodes {where} "
            f"(at most {placeable} layers fit)"
        )
    return PlanRejection(
        reason=RejectionReason.NO_VALID_TOPOLOGY,
        message=message,
        native_context=model.native_context,
        minimum_context=context_floor(model.native_context),
        requested_context=request.context_override,
        contexts_tried=contexts,
        layer_count=model.layer_count,
        placeable_layers=placeable,
    )
