"""Per-layer memory arithmetic and the split of layers over a chosen node set."""

from __future__ import annotations

from gridctl.split import ModelShape, PlannerNode, bytes_per_layer
from gridctl.split.layer_fitting import can_fit, lay_out_stages, split_layers

from .builders import GiB, gpu, qwen_480b


def test_bytes_per_layer_rounds_both_terms_up() -> None:
    model = ModelShape(layer_count=3, weight_bytes=10, kv_bytes_per_token=10, native_context=8)
    assert bytes_per_layer(model, 8) == 4 + 4 * 8


def test_bytes_per_layer_for_the_480b_shape() -> None:
    per_layer = bytes_per_layer(qwen_480b(), 262_144)
    assert per_layer == -(-272 * GiB // 62) + 4096 * 262_144


def test_usable_memory_is_capped_detected_minus_headroom() -> None:
    assert gpu("a", 80).usable_bytes == 76 * GiB
    assert gpu("a", 80, max_gib=72).usable_bytes == 68 * GiB
    assert gpu("a", 80, max_gib=96).usable_bytes == 76 * GiB
    assert PlannerNode("a", 1 * GiB, headroom_bytes=2 * GiB).usable_bytes == 0


def test_every_node_must_take_a_layer() -> None:
    tiny = PlannerNode("tiny", 9)
    assert not can_fit([PlannerNode("big", 1000), tiny], 4, per_layer=10)
    assert split_layers([PlannerNode("big", 1000), tiny], 4, per_layer=10) is None


def test_all_layers_must_find_a_node() -> None:
    nodes = [PlannerNode("a", 30), PlannerNode("b", 30)]
    assert split_layers(nodes, 6, per_layer=10) == (3, 3)
    assert split_layers(nodes, 7, per_layer=10) is None


def test_more_nodes_than_layers_cannot_fit() -> None:
    nodes = [PlannerNode(n, 100) for n in "abc"]
    assert split_layers(nodes, 2, per_layer=10) is None


def test_smaller_nodes_take_fewer_layers() -> None:
    nodes = [PlannerNode("big", 100), PlannerNode("small", 45)]
    # margins 20 and 25: any other split leaves one node with less than 20
    assert split_layers(nodes, 10, per_layer=10) == (8, 2)


def test_split_maximises_the_smallest_margin() -> None:
    nodes = [PlannerNode("a", 100), PlannerNode("b", 80), PlannerNode("c", 50)]
    counts = split_layers(nodes, 17, per_layer=10)
    assert counts == (8, 6, 3)
    margins = [n.usable_bytes - c * 10 for n, c in zip(nodes, counts or (), strict=True)]
    assert min(margins) == 20


def test_zero_cost_layers_always_fit() -> None:
    assert split_layers([PlannerNode("a", 0)], 5, per_layer=0) == (5,)


def test_stages_are_contiguous_in_node_id_order() -> None:
    nodes = [PlannerNode("zeta", 100), PlannerNode("alpha", 50)]
    stages = lay_out_stages(nodes, (7, 3), per_layer=10)
    assert [(s.node_id, s.layer_start, s.layer_end) for s in stages] == [
        ("alpha", 0, 3),
        ("zeta", 3, 10),
    ]
    assert [(s.used_bytes, s.usable_bytes, s.margin_bytes) for s in stages] == [
        (30, 50, 20),
        (70, 100, 30),
    ]
