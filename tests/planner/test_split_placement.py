"""Split placements: a model no single host can hold, placed across several (examples)."""

from __future__ import annotations

import pickle
from dataclasses import replace

from gridctl.domain import (
    DataTier,
    HostState,
    ModelProfile,
    ObservedStage,
    Plan,
    SplitPolicy,
    UnsatisfiedCode,
)
from gridctl.planner import plan_bytes, plan_placement
from gridctl.planner.plan_document import plan_document

from .builders import (
    baseline,
    cpu_box_64g,
    fleet,
    laptop_16g,
    mini_32g,
    policy,
    resident,
    serving_stages,
)
from .builders import with_residents as holding

GEMMA_SPLIT = SplitPolicy(max_stages=3, layers=26, native_context=32768)


def big(memory_mb: int = 40_000, **changes: object) -> ModelProfile:
    """A baseline model that allows a split of at most three stages."""
    changes.setdefault("split", GEMMA_SPLIT)
    return baseline("big", memory_mb, **changes)


def three_small_hosts() -> tuple[object, ...]:
    # 12 GB, 12 GB and 28 GB free for new work: none holds 40 GB, together 52 GB do
    return (laptop_16g("lap-a"), laptop_16g("lap-b"), mini_32g("mini-c"))


def covered_once(plan: Plan, layers: int) -> bool:
    (split,) = plan.splits
    ranges = [(s.layer_start, s.layer_end) for s in split.stages]
    covered = [layer for start, end in ranges for layer in range(start, end)]
    return covered == list(range(layers))


def test_three_hosts_each_too_small_hold_the_model_together() -> None:
    plan = plan_placement([big()], fleet(*three_small_hosts()), policy(admission_headroom_mb=0))
    assert plan.assignments == ()
    assert plan.unsatisfied == ()  # the split replaces the unsatisfied row
    (split,) = plan.splits
    assert 2 <= len(split.stages) <= 3
    assert covered_once(plan, 26)
    assert split.coordinator_host_id == split.stages[0].host_id
    assert sum(s.memory_mb for s in split.stages) >= 40_000
    assert split.context_length == 32768 and split.layer_count == 26
    explanation = plan.explanation_of("big")
    assert explanation is not None and explanation.split is not None
    assert explanation.split.startswith(f"split over {len(split.stages)} hosts: ")


def test_two_stages_when_two_hosts_are_enough() -> None:
    hosts = (mini_32g("mini-a"), mini_32g("mini-b"), laptop_16g("lap-c"))
    plan = plan_placement([big(40_000)], fleet(*hosts), policy(admission_headroom_mb=0))
    (split,) = plan.splits
    assert [s.host_id for s in split.stages] == ["mini-a", "mini-b"]  # fewest, largest hosts
    assert covered_once(plan, 26)


def test_no_split_when_one_host_holds_the_model() -> None:
    plan = plan_placement([big(40_000)], fleet(cpu_box_64g(), *three_small_hosts()))
    assert plan.splits == ()
    assert [a.host_id for a in plan.assignments] == ["cpu-1"]


def test_no_split_without_the_profile_field() -> None:
    plan = plan_placement([big(split=None)], fleet(*three_small_hosts()))
    assert plan.splits == ()
    (row,) = plan.unsatisfied
    assert row.code is UnsatisfiedCode.INSUFFICIENT_CAPACITY
    assert "split" not in row.message


def test_too_little_memory_together_keeps_a_named_reason() -> None:
    plan = plan_placement([big(90_000)], fleet(*three_small_hosts()))
    assert plan.splits == ()
    (row,) = plan.unsatisfied
    assert row.code is UnsatisfiedCode.INSUFFICIENT_CAPACITY
    assert "; split: no_valid_topology across 3 hosts (" in row.message


def test_max_stages_bounds_the_split() -> None:
    two = replace(GEMMA_SPLIT, max_stages=2)
    plan = plan_placement([big(split=two)], fleet(*three_small_hosts()))
    assert plan.splits == ()
    (row,) = plan.unsatisfied
    assert "split: needs 3 stages across 3 hosts, max_stages is 2" in row.message


def test_ineligible_hosts_are_never_stages() -> None:
    confidential = big(data_tier=DataTier.CONFIDENTIAL, required_tags=("office",))
    draining = replace(mini_32g("mini-d", tags=("office",)), state=HostState.DRAINING)
    hosts = (
        mini_32g("mini-a", tags=("office",), allowed_data_tiers=(DataTier.CONFIDENTIAL,)),
        mini_32g("mini-b", tags=("office",), allowed_data_tiers=(DataTier.CONFIDENTIAL,)),
        mini_32g("mini-c", tags=("office",)),  # every data tier by default
        laptop_16g("lap-e", tags=("office",)),  # internal data only
        draining,
    )
    plan = plan_placement([confidential], fleet(*hosts), policy(admission_headroom_mb=0))
    (split,) = plan.splits
    stages = {s.host_id for s in split.stages}
    assert "lap-e" not in stages and "mini-d" not in stages
    assert stages <= {"mini-a", "mini-b", "mini-c"}


def test_a_split_uses_free_memory_only_and_never_displaces_a_replica() -> None:
    # every host holds a healthy replica of a small model; the split fits beside them
    hosts = tuple(
        holding(h, resident("small", 8000)) for h in (mini_32g("mini-a"), mini_32g("mini-b"))
    )
    profiles = [big(40_000, priority=90), baseline("small", 8000, replicas=2, priority=10)]
    plan = plan_placement(profiles, fleet(*hosts), policy(admission_headroom_mb=0))
    assert plan.preemptions == ()
    assert sorted(a.host_id for a in plan.assignments_for("small")) == ["mini-a", "mini-b"]
    (split,) = plan.splits
    for stage in split.stages:  # 28 GB offered, 8 GB taken by the incumbent
        assert stage.memory_mb <= 28672 - 8000


def test_the_document_shows_splits_only_when_there_are_some() -> None:
    plain = plan_document(plan_placement([big(split=None)], fleet(*three_small_hosts())))
    assert "splits" not in plain and "split" not in plain["models"]["big"]
    document = plan_document(plan_placement([big()], fleet(*three_small_hosts())))
    (split,) = document["splits"]  # type: ignore[misc]
    assert {"coordinator_host_id", "stages", "context_length", "layer_count"} <= set(split)
    assert {"host_id", "layer_start", "layer_end", "memory_mb"} == set(split["stages"][0])
    assert str(document["models"]["big"]["split"]).startswith("split over ")  # type: ignore[index]


def test_split_plans_are_byte_identical_whatever_the_host_order() -> None:
    hosts = three_small_hosts()
    first = plan_bytes(plan_placement([big()], fleet(*hosts)))
    assert plan_bytes(plan_placement([big()], fleet(*reversed(hosts)))) == first
    assert plan_bytes(plan_placement([big()], fleet(*hosts))) == first


def test_a_plan_with_a_split_crosses_a_process_boundary_unchanged() -> None:
    plan = plan_placement([big()], fleet(*three_small_hosts()))
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan and plan_bytes(again) == plan_bytes(plan)
    assert again.splits == plan.splits and again.splits


def stage_rows(plan: Plan) -> list[tuple[str, int, int]]:
    (split,) = plan.splits
    return [(s.host_id, s.layer_start, s.layer_end) for s in split.stages]


def test_a_host_joining_with_a_smaller_id_does_not_move_a_serving_split() -> None:
    # four equal hosts; the split takes the first three by id
    hosts = tuple(laptop_16g(f"lap-{c}") for c in "bcde")
    rules = policy(admission_headroom_mb=0)
    first = plan_placement([big(30_000)], fleet(*hosts), rules)
    assert [h for h, _, _ in stage_rows(first)] == ["lap-b", "lap-c", "lap-d"]
    # its stages serve; then lap-a, as large and first by id, joins
    joined = (laptop_16g("lap-a"), *serving_stages(hosts, first.splits[0], term=1))
    kept = plan_placement([big(30_000)], fleet(*joined), rules)
    assert stage_rows(kept) == stage_rows(first)
    # without the stages' reports the same fleet plans afresh, over lap-a
    fresh = plan_placement([big(30_000)], fleet(laptop_16g("lap-a"), *hosts), rules)
    assert [h for h, _, _ in stage_rows(fresh)] == ["lap-a", "lap-b", "lap-c"]


def test_a_forming_split_keeps_the_stage_that_already_took_its_claim() -> None:
    # lap-a, lap-b and lap-d are up: the split is planned over them. lap-d's stage took
    # its claim (the others have not answered yet) when lap-c joins: lap-c is as large
    # and before lap-d by id, yet the split stays where it is forming
    hosts = tuple(laptop_16g(f"lap-{c}") for c in "abd")
    rules = policy(admission_headroom_mb=0)
    first = plan_placement([big(30_000)], fleet(*hosts), rules)
    assert [h for h, _, _ in stage_rows(first)] == ["lap-a", "lap-b", "lap-d"]
    only_d = serving_stages(hosts, first.splits[0], 1, only=frozenset({"lap-d"}))
    again = plan_placement([big(30_000)], fleet(laptop_16g("lap-c"), *only_d), rules)
    assert stage_rows(again) == stage_rows(first)
    # a fresh plan of the same four hosts would have taken lap-c instead
    fresh = plan_placement([big(30_000)], fleet(laptop_16g("lap-c"), *hosts), rules)
    assert [h for h, _, _ in stage_rows(fresh)] == ["lap-a", "lap-b", "lap-c"]


def test_a_lost_stage_host_is_replaced_and_the_others_stay() -> None:
    hosts = tuple(laptop_16g(f"lap-{c}") for c in "bcde")
    rules = policy(admission_headroom_mb=0)
    first = plan_placement([big(30_000)], fleet(*hosts), rules)
    reported = serving_stages(hosts, first.splits[0], term=4)
    gone = "lap-c"
    left = tuple(h for h in reported if h.host_id != gone)
    again = plan_placement([big(30_000)], fleet(laptop_16g("lap-a"), *left), rules)
    stages = [h for h, _, _ in stage_rows(again)]
    assert gone not in stages and len(stages) == 3
    # the hosts still serving stay, and the largest other host, first by id, joins them
    assert set(stages) == {"lap-a", "lap-b", "lap-d"}


def test_only_the_newest_generation_counts_as_serving() -> None:
    # a host still reports a stage of an older term (its release has not landed yet):
    # the split keeps the newest term's hosts, not the stale one
    hosts = tuple(laptop_16g(f"lap-{c}") for c in "bcde")
    rules = policy(admission_headroom_mb=0)
    first = plan_placement([big(30_000)], fleet(*hosts), rules)
    reported = list(serving_stages(hosts, first.splits[0], term=2))
    stale = ObservedStage("big", "lap-x", 1, 0, 3, 0, 9, "10.0.0.9:5000")
    reported = [replace(h, split_stages=(stale,)) if h.host_id == "lap-e" else h for h in reported]
    again = plan_placement([big(30_000)], fleet(laptop_16g("lap-a"), *reported), rules)
    assert stage_rows(again) == stage_rows(first)


def test_a_serving_split_that_no_longer_fits_is_planned_afresh() -> None:
    hosts = tuple(laptop_16g(f"lap-{c}") for c in "bcd")
    rules = policy(admission_headroom_mb=0)
    first = plan_placement([big(30_000)], fleet(*hosts), rules)
    reported = serving_stages(hosts, first.splits[0], term=1)
    # lap-c is throttled to nothing new: the split moves to hosts that hold it
    shrunk = tuple(
        replace(h, resources=replace(h.resources, capacity_mb=4000)) if h.host_id == "lap-c" else h
        for h in reported
    )
    others = (mini_32g("mini-a"), laptop_16g("lap-e"))
    again = plan_placement([big(30_000)], fleet(*others, *shrunk), rules)
    assert "lap-c" not in [h for h, _, _ in stage_rows(again)]
    # the same plan as a fleet where no stage serves
    plain = tuple(replace(h, split_stages=None) for h in shrunk)
    assert again.splits == plan_placement([big(30_000)], fleet(*others, *plain), rules).splits
