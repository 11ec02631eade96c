"""Fleet-wide topology option value: a flexible model pays for taking a host that
more constrained models are the only ones able to use.

The index (``ScarcityIndex``) is checked on hand-computed pressures (slot-aware,
eligible-set intersections, enabled models without demand counted, disabled
ones not), and through ``plan_placement`` on both sides: a flexible model keeps
off the constrained models' hosts while they are enabled and has the fast host
back once they are not, or when it has no other destination.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings

from gridctl.domain import ControllerPolicy, FleetSnapshot, HostSnapshot, ModelProfile
from gridctl.planner import plan_placement
from gridctl.planner.host_classes import HostClasses
from gridctl.planner.planning import set_targets
from gridctl.planner.scoring import SCARCITY, ScarcityIndex
from gridctl.planner.workspace import Workspace

from .builders import baseline, fleet, gpu_server_80g, mini_32g, policy, profile
from .strategies import planning_inputs

HOSTS = ("gpu", "media", "mini")
ONE_CLASS_EACH = {h: i for i, h in enumerate(HOSTS)}


def _index(
    eligible: dict[str, tuple[str, ...]],
    ceilings: dict[str, int],
    slots: dict[str, int],
    targets: dict[str, int] | None = None,
) -> ScarcityIndex:
    return ScarcityIndex(
        {m: frozenset(h) for m, h in eligible.items()},
        targets or {},
        ONE_CLASS_EACH,
        HOSTS,
        slots,
        ceilings,
    )


def test_pressure_counts_the_slots_of_the_constrained_set() -> None:
    eligible = {"video": ("gpu", "media"), "image": ("gpu", "media"), "flex": HOSTS}
    ceilings = {"video": 2, "image": 2, "flex": 3}
    roomy = _index(eligible, ceilings, {"gpu": 4, "media": 1, "mini": 2})
    # video and image claim 4 of the 5 slots on {gpu, media}
    assert roomy.need("gpu", 3) == 0.8
    assert roomy.need("media", 3) == 0.8
    assert roomy.need("mini", 3) == 0.0  # no constrained model can use it
    tight = _index(eligible, ceilings, {"gpu": 2, "media": 1, "mini": 2})
    assert tight.need("gpu", 3) == 1.0  # claims beyond the slots are capped at 1
    unlimited = _index(eligible, ceilings, {"gpu": 0, "media": 1, "mini": 2})
    # no per-host limit: one slot per enabled model (3) plus media's, 4 of 4 claimed
    assert unlimited.need("gpu", 3) == 1.0


def test_only_models_more_constrained_than_the_placed_one_count() -> None:
    eligible = {"video": ("gpu", "media"), "flex": HOSTS}
    index = _index(eligible, {"video": 2, "flex": 1}, {"gpu": 4, "media": 1, "mini": 2})
    assert index.need("gpu", 3) == 0.4
    assert index.need("gpu", 2) == 0.0  # as constrained as video: no penalty
    assert index.need("gpu", 1) == 0.0  # no other destination: never penalised


def test_enabled_models_count_without_demand_and_disabled_ones_do_not() -> None:
    eligible = {"video": ("gpu", "media"), "flex": HOSTS}
    slots = {"gpu": 4, "media": 1, "mini": 2}
    idle = _index(eligible, {"video": 1, "flex": 1}, slots)
    assert idle.need("gpu", 3) == 0.2  # one claimed slot of five, with no demand at all
    busy = _index(eligible, {"video": 1, "flex": 1}, slots, targets={"video": 3})
    assert busy.need("gpu", 3) == 0.6  # the demanded target counts when above the ceiling
    disabled = _index(eligible, {"video": 0, "flex": 1}, slots)
    assert disabled.need("gpu", 3) == 0.0


def test_a_more_constrained_model_claims_its_share_of_an_intersecting_set() -> None:
    slots = {"gpu": 1, "media": 1, "mini": 1}
    alone = _index({"video": ("gpu", "media"), "flex": HOSTS}, {"video": 1, "flex": 1}, slots)
    assert alone.need("gpu", 3) == 0.5
    # "solo" fits only media: its whole claim lands inside {gpu, media}
    inside = _index(
        {"video": ("gpu", "media"), "solo": ("media",), "flex": HOSTS},
        {"video": 1, "solo": 1, "flex": 1},
        slots,
    )
    assert inside.need("gpu", 3) == 1.0  # (1 + 1) / 2
    # "side" fits {gpu, mini}: half of its claim falls on {gpu, media}
    overlapping = _index(
        {"video": ("gpu", "media"), "side": ("gpu", "mini"), "flex": HOSTS},
        {"video": 1, "side": 1, "flex": 1},
        slots,
    )
    assert overlapping.need("media", 3) == 0.75  # (1 + 1 * 1/2) / 2
    assert overlapping.need("mini", 3) == 0.75  # side's own set, video's half inside it


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs())
def test_hosts_of_one_class_have_one_option_value(
    inputs: tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy],
) -> None:
    """The class search treats a class's members alike: their option values must agree."""
    profiles, snapshot, pol = inputs
    ws = Workspace(profiles, snapshot, pol)
    set_targets(ws)
    ws.build_scarcity()
    assert ws.scarcity is not None
    classes = HostClasses(ws)
    groups = [m for g in classes.by_static.values() for m in g.values()]
    for members in groups:
        for model_id in ws.model_ids:
            count = len(ws.eligible[model_id])
            values = {ws.scarcity.need(h, count) for h in members}
            assert len(values) == 1, (model_id, members, values)


def _hosts() -> tuple[HostSnapshot, ...]:
    return (
        gpu_server_80g("gpu-1", runtimes=("comfyui", "llama.cpp"), max_models=2),
        mini_32g("mini-1", max_models=2),
    )


def test_a_flexible_model_keeps_off_the_host_an_idle_constrained_model_needs() -> None:
    flex = baseline("flex", 4096)
    video = profile("video", 16384, runtimes=("comfyui",), max_replicas=2)  # no demand
    plan = plan_placement([flex, video], fleet(*_hosts()), policy())
    assert [(a.model_id, a.host_id) for a in plan.assignments] == [("flex", "mini-1")]
    rows = {c.host_id: c for e in plan.explanations if e.model_id == "flex" for c in e.candidates}
    parts = {s.name: s.value for s in rows["gpu-1"].components}
    assert parts["scarcity"] == -SCARCITY * 1.0  # 2 claimed slots of gpu-1's 2


def test_the_fast_host_is_back_when_the_constrained_model_is_disabled() -> None:
    flex = baseline("flex", 4096)
    video = profile("video", 16384, runtimes=("comfyui",), max_replicas=0)
    plan = plan_placement([flex, video], fleet(*_hosts()), policy())
    assert [(a.model_id, a.host_id) for a in plan.assignments] == [("flex", "gpu-1")]


def test_a_model_with_no_other_destination_takes_the_scarce_host() -> None:
    flex = baseline("flex", 4096, required_tags=("gpu",))
    video = profile("video", 16384, runtimes=("comfyui",), max_replicas=2)
    plan = plan_placement([flex, video], fleet(*_hosts()), policy())
    assert [(a.model_id, a.host_id) for a in plan.assignments] == [("flex", "gpu-1")]
