"""Planner invariants, checked against brute force over every node subset.

Node counts stay small (at most 6) so every subset can be enumerated. Node
memory is drawn in whole layers (plus a remainder) at one of the candidate
contexts, so the search covers fits, near-misses, caps and rejections.
"""

from __future__ import annotations

from itertools import combinations
from random import Random

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.split import (
    ModelShape,
    PlannerNode,
    PlanRejection,
    PlanRequest,
    TopologyPlan,
    bytes_per_layer,
    context_candidates,
    plan_topology,
)
from gridctl.split.layer_fitting import can_fit, split_layers

# (target missed, network ms, -context, -lanes, -min margin, -total margin, stages, ids)
Rank = tuple[bool, float, int, int, int, int, int, tuple[str, ...]]

NATIVE_CONTEXTS = (1_000, 4_096, 40_000, 65_536, 100_000, 131_072, 200_000, 262_144)


@st.composite
def models(draw: st.DrawFn) -> ModelShape:
    layer_count = draw(st.integers(min_value=1, max_value=24))
    weight_per_layer = draw(st.integers(min_value=0, max_value=100_000))
    kv_per_layer = draw(st.integers(min_value=0, max_value=2))
    return ModelShape(
        layer_count=layer_count,
        weight_bytes=max(0, weight_per_layer * layer_count - draw(st.integers(0, layer_count))),
        kv_bytes_per_token=max(0, kv_per_layer * layer_count - draw(st.integers(0, 1))),
        native_context=draw(st.sampled_from(NATIVE_CONTEXTS)),
    )


@st.composite
def node_sets(
    draw: st.DrawFn, model: ModelShape, with_latency: bool = False
) -> tuple[PlannerNode, ...]:
    """Nodes sized in layers at one of the candidate contexts, so fits and misses both occur."""
    ids = draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=6, unique=True))
    reference = draw(st.sampled_from(context_candidates(model.native_context)))
    per_layer = max(1, bytes_per_layer(model, reference))
    latency = (
        st.one_of(st.none(), st.sampled_from([0.5, 1.0, 2.0, 5.0])) if with_latency else st.none()
    )
    nodes = []
    for node_id in ids:
        usable = draw(st.integers(0, model.layer_count)) * per_layer + draw(
            st.integers(0, per_layer)
        )
        headroom = draw(st.sampled_from([0, 0, 1, per_layer // 2]))
        capped = draw(st.booleans())
        extra = draw(st.integers(0, 2 * per_layer))
        nodes.append(
            PlannerNode(
                node_id=node_id,
                detected_bytes=usable + headroom + (extra if capped else 0),
                max_bytes=usable + headroom if capped else None,
                headroom_bytes=headroom,
                stage_latency_ms=draw(latency),
            )
        )
    return tuple(nodes)


@st.composite
def requests(draw: st.DrawFn, with_latency: bool = False) -> PlanRequest:
    target = st.one_of(st.none(), st.sampled_from([1.0, 4.0, 10.0])) if with_latency else st.none()
    model = draw(models())
    return PlanRequest(
        model=model,
        nodes=draw(node_sets(model, with_latency)),
        min_nodes=draw(st.sampled_from([1, 1, 1, 2, 3])),
        lanes_override=draw(st.one_of(st.none(), st.integers(min_value=1, max_value=8))),
        target_tpot_ms=draw(target),
    )


def fitting_subsets(request: PlanRequest, context: int, size: int) -> list[tuple[PlannerNode, ...]]:
    per_layer = bytes_per_layer(request.model, context)
    return [
        subset
        for subset in combinations(request.nodes, size)
        if can_fit(subset, request.model.layer_count, per_layer)
    ]


def sizes(request: PlanRequest) -> range:
    return range(request.min_nodes, len(request.nodes) + 1)


@settings(max_examples=400, deadline=None)
@given(requests(with_latency=True))
def test_stages_are_contiguous_cover_every_layer_and_fit(request: PlanRequest) -> None:
    plan = plan_topology(request)
    if isinstance(plan, PlanRejection):
        return
    usable = {node.node_id: node.usable_bytes for node in request.nodes}
    per_layer = bytes_per_layer(request.model, plan.context_length)
    assert plan.bytes_per_layer == per_layer
    assert plan.stages[0].layer_start == 0
    assert plan.stages[-1].layer_end == request.model.layer_count
    for before, after in zip(plan.stages, plan.stages[1:], strict=False):
        assert before.layer_end == after.layer_start
    covered = [layer for s in plan.stages for layer in range(s.layer_start, s.layer_end)]
    assert covered == list(range(request.model.layer_count))
    assert len({s.node_id for s in plan.stages}) == plan.stage_count >= request.min_nodes
    for stage in plan.stages:
        assert stage.layer_count >= 1
        assert stage.used_bytes == stage.layer_count * per_layer
        assert stage.usable_bytes == usable[stage.node_id]
        assert stage.used_bytes <= stage.usable_bytes
    assert plan.context_length in context_candidates(request.model.native_context)
    if request.lanes_override is not None:
        assert plan.parallel_lanes == request.lanes_override


@settings(max_examples=400, deadline=None)
@given(requests())
def test_without_latency_no_higher_context_or_smaller_node_set_is_valid(
    request: PlanRequest,
) -> None:
    plan = plan_topology(request)
    contexts = context_candidates(request.model.native_context)
    if isinstance(plan, PlanRejection):
        assert not any(fitting_subsets(request, c, k) for c in contexts for k in sizes(request))
        return
    for context in contexts:
        if context <= plan.context_length:
            break
        assert not any(fitting_subsets(request, context, k) for k in sizes(request))
    for smaller in range(request.min_nodes, plan.stage_count):
        assert not fitting_subsets(request, plan.context_length, smaller)
    if request.lanes_override is None:
        assert plan.parallel_lanes == 4


@settings(max_examples=300, deadline=None)
@given(requests(with_latency=True), st.randoms(use_true_random=False))
def test_output_does_not_depend_on_node_input_order(request: PlanRequest, rng: Random) -> None:
    shuffled = list(request.nodes)
    rng.shuffle(shuffled)
    reordered = PlanRequest(
        request.model,
        tuple(shuffled),
        request.min_nodes,
        request.context_override,
        request.lanes_override,
        request.target_tpot_ms,
    )
    assert plan_topology(reordered) == plan_topology(request)


@settings(max_examples=300, deadline=None)
@given(requests(with_latency=True))
def test_latency_scoring_matches_brute_force_over_every_candidate(request: PlanRequest) -> None:
    plan = plan_topology(request)
    measured = [n.stage_latency_ms for n in request.nodes if n.stage_latency_ms is not None]
    if not measured:
        return  # ordered search; covered by the test above
    slowest = max(measured)
    latency = {
        n.node_id: slowest if n.stage_latency_ms is None else n.stage_latency_ms
        for n in request.nodes
    }
    lanes = (request.lanes_override,) if request.lanes_override else (4, 3, 2, 1)
    best: Rank | None = None
    for context in context_candidates(request.model.native_context):
        per_layer = bytes_per_layer(request.model, context)
        for size in sizes(request):
            for subset in combinations(request.nodes, size):
                counts = split_layers(subset, request.model.layer_count, per_layer)
                if counts is None:
                    continue
                margins = [
                    n.usable_bytes - c * per_layer for n, c in zip(subset, counts, strict=True)
                ]
                network = size * max(latency[n.node_id] for n in subset)
                met = request.target_tpot_ms is not None and network <= request.target_tpot_ms
                ids = tuple(sorted(n.node_id for n in subset))
                for lane in lanes:
                    key = (
                        not met,
                        network,
                        -context,
                        -lane,
                        -min(margins),
                        -sum(margins),
                        size,
                        ids,
                    )
                    if best is None or key < best:
                        best = key
    if best is None:
        assert isinstance(plan, PlanRejection)
        return
    assert isinstance(plan, TopologyPlan)
    _, network, neg_context, neg_lanes, neg_min_margin, _, size, ids = best
    assert plan.estimated_decode_network_ms_per_token == network
    assert plan.context_length == -neg_context
    assert plan.parallel_lanes == -neg_lanes
    assert plan.min_margin_bytes == -neg_min_margin
    assert tuple(s.node_id for s in plan.stages) == ids
    assert plan.stage_count == size
