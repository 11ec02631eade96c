"""The topology planner: documented 480B outcomes, search order, overrides, latency scoring."""

from __future__ import annotations

import pytest

from gridctl.split import (
    ModelShape,
    PlannerNode,
    PlanRejection,
    PlanRequest,
    RejectionReason,
    TopologyPlan,
    plan_topology,
)

from .builders import GiB, gpu, gpus, qwen_480b


def plan_of(request: PlanRequest) -> TopologyPlan:
    result = plan_topology(request)
    assert isinstance(result, TopologyPlan), result
    return result


def rejection_of(request: PlanRequest) -> PlanRejection:
    result = plan_topology(request)
    assert isinstance(result, PlanRejection), result
    return result


def layer_counts(plan: TopologyPlan) -> dict[str, int]:
    return {stage.node_id: stage.layer_count for stage in plan.stages}


# --- representative 480B outcomes (shape documented in builders.py) -------------------


def test_480b_on_4_x_70_gib_is_rejected_above_the_floor() -> None:
    rejection = rejection_of(PlanRequest(qwen_480b(), gpus(4, 70)))
    assert rejection.reason is RejectionReason.NO_VALID_TOPOLOGY
    assert rejection.contexts_tried == (262_144, 131_072, 65_536)
    assert rejection.placeable_layers == 56


def test_480b_on_4_x_80_gib_uses_4_stages_at_65536() -> None:
    plan = plan_of(PlanRequest(qwen_480b(), gpus(4)))
    assert (plan.stage_count, plan.context_length, plan.parallel_lanes) == (4, 65_536, 4)


def test_480b_on_5_x_80_gib_uses_5_stages_at_native_context() -> None:
    plan = plan_of(PlanRequest(qwen_480b(), gpus(5)))
    assert (plan.stage_count, plan.context_length, plan.parallel_lanes) == (5, 262_144, 4)


def test_480b_on_10_x_80_gib_still_uses_5_stages() -> None:
    plan = plan_of(PlanRequest(qwen_480b(), gpus(10)))
    assert (plan.stage_count, plan.context_length, plan.parallel_lanes) == (5, 262_144, 4)
    assert [s.node_id for s in plan.stages] == [f"gpu-0{i}" for i in range(5)]


def test_480b_capped_node_receives_fewer_layers() -> None:
    nodes = (*gpus(4), gpu("gpu-capped", 80, max_gib=72))
    plan = plan_of(PlanRequest(qwen_480b(), nodes))
    counts = layer_counts(plan)
    assert plan.context_length == 262_144
    assert counts["gpu-capped"] < min(v for k, v in counts.items() if k != "gpu-capped")


def test_480b_lower_vram_node_receives_fewer_layers() -> None:
    nodes = (*gpus(4), gpu("gpu-small", 72))
    plan = plan_of(PlanRequest(qwen_480b(), nodes))
    counts = layer_counts(plan)
    assert plan.context_length == 262_144 and plan.stage_count == 5
    assert counts["gpu-small"] < min(v for k, v in counts.items() if k != "gpu-small")


# --- the planner flowchart, branch by branch ------------------------------------------


def test_contexts_are_tried_from_native_down() -> None:
    # 4 x 80 GiB fails at 262,144 and 131,072 before fitting at 65,536.
    plan = plan_of(PlanRequest(qwen_480b(), gpus(4)))
    assert plan.context_length == 65_536


def test_node_counts_are_tried_from_the_minimum_upward() -> None:
    plan = plan_of(PlanRequest(qwen_480b(), gpus(10), min_nodes=7))
    assert plan.stage_count == 7
    assert plan.context_length == 262_144


def test_fewer_nodes_win_over_a_higher_node_count() -> None:
    small = ModelShape(
        layer_count=8, weight_bytes=8 * GiB, kv_bytes_per_token=0, native_context=4096
    )
    plan = plan_of(PlanRequest(small, gpus(3)))
    assert plan.stage_count == 1


def test_lanes_start_at_four() -> None:
    assert plan_of(PlanRequest(qwen_480b(), gpus(5))).parallel_lanes == 4


def test_lanes_share_the_kv_cache_so_they_never_change_the_fit() -> None:
    default = plan_of(PlanRequest(qwen_480b(), gpus(5)))
    for lanes in (1, 2, 8):
        overridden = plan_of(PlanRequest(qwen_480b(), gpus(5), lanes_override=lanes))
        assert overridden.parallel_lanes == lanes
        assert overridden.stages == default.stages


def test_a_node_set_that_cannot_fit_moves_on_to_more_nodes() -> None:
    plan = plan_of(PlanRequest(qwen_480b(), gpus(6), min_nodes=1))
    assert plan.stage_count == 5  # 1..4 nodes do not fit at native


def test_best_margin_set_is_chosen_among_equal_shapes() -> None:
    nodes = (gpu("a", 72), gpu("b", 96), gpu("c", 80), gpu("d", 80), gpu("e", 88), gpu("f", 80))
    plan = plan_of(PlanRequest(qwen_480b(), nodes))
    assert plan.stage_count == 5
    assert sorted(layer_counts(plan)) == ["b", "c", "d", "e", "f"]  # the 72 GiB node sits out


def test_ties_between_equal_nodes_break_on_node_id() -> None:
    nodes = tuple(gpu(name) for name in ("zed", "amy", "kim", "bob", "lee", "dan"))
    plan = plan_of(PlanRequest(qwen_480b(), nodes))
    assert [s.node_id for s in plan.stages] == ["amy", "bob", "dan", "kim", "lee"]


def test_every_context_below_the_floor_is_rejected() -> None:
    rejection = rejection_of(PlanRequest(qwen_480b(), gpus(3)))
    assert rejection.reason == "no_valid_topology"
    assert min(rejection.contexts_tried) == 65_536
    assert "65536" in rejection.message


def test_min_nodes_above_the_offered_nodes_is_rejected() -> None:
    rejection = rejection_of(PlanRequest(qwen_480b(), gpus(5), min_nodes=6))
    assert rejection.reason == "no_valid_topology"
    assert "6 nodes" in rejection.message


def test_a_node_too_small_for_one_layer_blocks_a_forced_node_count() -> None:
    nodes = (*gpus(5), gpu("tiny", 8))
    rejection = rejection_of(PlanRequest(qwen_480b(), nodes, min_nodes=6))
    assert "can hold a layer" in rejection.message


def test_no_nodes_is_rejected() -> None:
    assert rejection_of(PlanRequest(qwen_480b(), ())).placeable_layers == 0


def test_small_native_context_caps_the_floor() -> None:
    model = ModelShape(
        layer_count=4, weight_bytes=4 * GiB, kv_bytes_per_token=0, native_context=8192
    )
    plan = plan_of(PlanRequest(model, gpus(1)))
    assert plan.context_length == 8192


# --- explicit overrides ----------------------------------------------------------------


def test_context_override_above_native_is_rejected() -> None:
    rejection = rejection_of(PlanRequest(qwen_480b(), gpus(5), context_override=524_288))
    assert rejection.reason is RejectionReason.CONTEXT_EXCEEDS_NATIVE
    assert rejection.requested_context == 524_288


def test_context_override_below_the_floor_is_rejected() -> None:
    rejection = rejection_of(PlanRequest(qwen_480b(), gpus(5), context_override=32_768))
    assert rejection.reason is RejectionReason.CONTEXT_BELOW_MINIMUM
    assert rejection.minimum_context == 65_536


def test_context_override_is_used_exactly() -> None:
    plan = plan_of(PlanRequest(qwen_480b(), gpus(10), context_override=100_000))
    assert plan.context_length == 100_000


def test_context_override_that_does_not_fit_is_no_valid_topology() -> None:
    rejection = rejection_of(PlanRequest(qwen_480b(), gpus(4), context_override=262_144))
    assert rejection.reason == "no_valid_topology"
    assert rejection.contexts_tried == (262_144,)
    assert "offered nodes at context 262144 (at most 56 layers fit)" in rejection.message


def test_malformed_requests_raise() -> None:
    with pytest.raises(ValueError, match="duplicate node ids: a"):
        PlanRequest(qwen_480b(), (gpu("a"), gpu("a")))
    with pytest.raises(ValueError, match="min_nodes"):
        PlanRequest(qwen_480b(), gpus(1), min_nodes=0)
    with pytest.raises(ValueError, match="lanes_override"):
        PlanRequest(qwen_480b(), gpus(1), lanes_override=0)
    with pytest.raises(ValueError, match="detected_bytes"):
        PlannerNode("a", -1)
    with pytest.raises(ValueError, match="layer_count"):
        ModelShape(0, 1, 1, 1)


# --- latency scoring ---------------------------------------------------------------------

# 8 layers of 1 GiB weights, 4,096 B/token of KV per layer; 5 GiB usable per node:
# 2 nodes fit at 65,536 (1.25 GiB/layer), 3 at 131,072 (1.5), 4 at 262,144 (2).
SHALLOW = ModelShape(
    layer_count=8, weight_bytes=8 * GiB, kv_bytes_per_token=8 * 4096, native_context=262_144
)


def five_gib_nodes(latency_ms: float | None = 5.0, count: int = 4) -> tuple[PlannerNode, ...]:
    return tuple(gpu(f"n{i}", 5, headroom_gib=0, latency_ms=latency_ms) for i in range(count))


def test_without_latency_the_deep_high_context_plan_wins() -> None:
    plan = plan_of(PlanRequest(SHALLOW, five_gib_nodes(None)))
    assert (plan.stage_count, plan.context_length) == (4, 262_144)
    assert plan.estimated_decode_network_ms_per_token is None
    assert plan.tpot_target_met is None


def test_lower_context_two_stage_plan_beats_deep_plan_that_misses_the_target() -> None:
    plan = plan_of(PlanRequest(SHALLOW, five_gib_nodes(5.0), target_tpot_ms=12.0))
    assert (plan.stage_count, plan.context_length, plan.parallel_lanes) == (2, 65_536, 4)
    assert plan.estimated_decode_network_ms_per_token == 10.0
    assert plan.tpot_target_met is True


def test_estimate_is_stage_count_times_slowest_selected_latency() -> None:
    nodes = (
        gpu("a", 5, headroom_gib=0, latency_ms=2.0),
        gpu("b", 5, headroom_gib=0, latency_ms=7.5),
    )
    plan = plan_of(PlanRequest(SHALLOW, nodes))
    assert plan.stage_count == 2
    assert plan.estimated_decode_network_ms_per_token == 15.0
    assert plan.tpot_target_met is None  # no target given


def test_target_met_at_exactly_the_budget() -> None:
    plan = plan_of(PlanRequest(SHALLOW, five_gib_nodes(5.0), target_tpot_ms=10.0))
    assert plan.tpot_target_met is True


def test_missed_target_still_returns_the_fastest_plan() -> None:
    plan = plan_of(PlanRequest(SHALLOW, five_gib_nodes(5.0), target_tpot_ms=1.0))
    assert plan.tpot_target_met is False
    assert plan.stage_count == 2


def test_slow_nodes_are_left_out_when_fast_ones_fit() -> None:
    nodes = (*five_gib_nodes(1.0, count=2), gpu("slow-but-big", 40, latency_ms=50.0))
    plan = plan_of(PlanRequest(SHALLOW, nodes))
    assert [s.node_id for s in plan.stages] == ["n0", "n1"]
    assert plan.estimated_decode_network_ms_per_token == 2.0


def test_equal_network_cost_prefers_higher_context() -> None:
    # One big node fits alone at every context: 1 stage at native wins at 1 x 3 ms.
    plan = plan_of(PlanRequest(SHALLOW, (gpu("big", 40, latency_ms=3.0),)))
    assert (plan.stage_count, plan.context_length) == (1, 262_144)
    assert plan.estimated_decode_network_ms_per_token == 3.0


def test_equal_network_cost_and_context_prefers_the_larger_margin() -> None:
    # At native (2 GiB/layer) no node holds all 8 layers; every pair costs 2 x 1 ms.
    # {y-mid, z-big} keeps 1 GiB spare on its tightest node, the other pairs none,
    # so margin wins over the smaller node ids of {a-small, y-mid}.
    nodes = (
        gpu("z-big", 10, headroom_gib=0, latency_ms=1.0),
        gpu("y-mid", 9, headroom_gib=0, latency_ms=1.0),
        gpu("a-small", 8, headroom_gib=0, latency_ms=1.0),
    )
    plan = plan_of(PlanRequest(SHALLOW, nodes, context_override=262_144))
    assert [s.node_id for s in plan.stages] == ["y-mid", "z-big"]
    assert plan.min_margin_bytes == 1 * GiB


def test_unmeasured_node_is_assumed_as_slow_as_the_slowest_measured() -> None:
    nodes = (
        gpu("unmeasured", 40),
        gpu("fast-1", 5, headroom_gib=0, latency_ms=1.0),
        gpu("fast-2", 5, headroom_gib=0, latency_ms=1.0),
        gpu("slow", 5, headroom_gib=0, latency_ms=9.0),
    )
    plan = plan_of(PlanRequest(SHALLOW, nodes))
    assert [s.node_id for s in plan.stages] == ["fast-1", "fast-2"]
    assert plan.estimated_decode_network_ms_per_token == 2.0


def test_target_without_any_latency_falls_back_to_ordered_search() -> None:
    plan = plan_of(PlanRequest(SHALLOW, five_gib_nodes(None), target_tpot_ms=10.0))
    assert (plan.stage_count, plan.context_length) == (4, 262_144)
    assert plan.estimated_decode_network_ms_per_token is None
    assert plan.tpot_target_met is None


def test_lane_override_applies_under_latency_scoring() -> None:
    plan = plan_of(PlanRequest(SHALLOW, five_gib_nodes(5.0), lanes_override=2))
    assert plan.parallel_lanes == 2


def test_latency_scoring_with_nothing_feasible_is_rejected() -> None:
    nodes = (gpu("a", 2, headroom_gib=0, latency_ms=1.0),)
    assert rejection_of(PlanRequest(SHALLOW, nodes)).reason == "no_valid_topology"
