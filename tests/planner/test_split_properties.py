"""Split placement properties over random fleets and profiles (hypothesis).

Random planning inputs from ``strategies`` get, for some models, a split policy and a
larger footprint, so that some models fit no single host and others fit one. The
rules checked here are restated independently where they can be (eligibility,
the single-host fit), never read back from the code under test.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.domain import (
    DEFAULT_RUNTIME,
    Artifact,
    ControllerPolicy,
    DataTier,
    FleetSnapshot,
    HostState,
    ModelProfile,
    SplitPolicy,
)
from gridctl.planner import plan_bytes, plan_placement
from gridctl.planner.canonical import input_digest
from gridctl.planner.placers import SingleHostPlacer
from gridctl.planner.planning import assemble, report_domain_shortfalls, set_targets
from gridctl.planner.rounds import place_pins, place_rounds
from gridctl.planner.scoring import forget_roundings
from gridctl.planner.seeding import seed_incumbents
from gridctl.planner.splits import place_splits
from gridctl.planner.workspace import Workspace

from .builders import (
    baseline,
    fleet,
    host,
    laptop_16g,
    mini_32g,
    resident,
    serving_stages,
    with_residents,
)
from .rules import admits, static_ok
from .strategies import planning_inputs

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def split_inputs(draw: st.DrawFn) -> Inputs:
    """Planning inputs where some profiles allow a split and some are larger than a host."""
    profiles, snapshot, policy = draw(planning_inputs(max_hosts=8, max_models=4))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    changed = []
    for p in profiles:
        if rng.random() < 0.6:
            split = SplitPolicy(rng.randint(2, 5), rng.randint(2, 80), rng.choice((4096, 131072)))
            p = replace(p, split=split, memory_mb=p.memory_mb * rng.choice((1, 2, 4, 8)))
            if rng.random() < 0.5:  # a plain model: few hard rules, so splits happen often
                p = replace(
                    p,
                    runtimes=(DEFAULT_RUNTIME,),
                    backends=(),
                    data_tier=DataTier.INTERNAL,
                    required_tags=(),
                    forbidden_tags=(),
                    pins=(),
                    min_gpu_count=0,
                    artifact=Artifact(),
                    min_replicas=max(1, p.min_replicas),
                    max_replicas=max(1, p.max_replicas, p.min_replicas),
                )
        changed.append(p)
    # a few plain llama.cpp hosts beside the random ones
    plain = [
        host(f"plain-{i}", rng.choice((16384, 24576, 32768)), reserved_mb=rng.choice((0, 2048)))
        for i in range(draw(st.integers(0, 5)))
    ]
    return changed, replace(snapshot, hosts=(*snapshot.hosts, *plain)), policy


@st.composite
def split_fleets(draw: st.DrawFn) -> Inputs:
    """Small fleets of llama.cpp-ish hosts and models larger than any one of them, with
    the hard rules that decide stage hosts drawn at random."""
    hosts = []
    for i in range(draw(st.integers(3, 6))):
        made = host(
            f"h{i}",
            draw(st.sampled_from((8192, 16384, 24576, 32768))),
            reserved_mb=draw(st.sampled_from((0, 2048))),
            runtimes=draw(st.sampled_from(((DEFAULT_RUNTIME,),) * 5 + (("vllm",),))),
            tags=draw(st.sampled_from(((), ("office",)))),
            allowed_data_tiers=draw(
                st.sampled_from((tuple(DataTier), (DataTier.PUBLIC, DataTier.INTERNAL)))
            ),
            max_models=draw(st.sampled_from((0, 0, 0, 2))),
            failure_domain=draw(st.sampled_from(("d1", "d2"))),
        )
        state = draw(st.sampled_from((HostState.ACCEPTING,) * 12 + tuple(HostState)))
        if draw(st.integers(0, 3)) == 0:
            made = with_residents(made, resident("small", 6144))
        hosts.append(replace(made, state=state))
    profiles = [
        baseline(
            name,
            draw(st.sampled_from(memories)),
            priority=draw(st.sampled_from((10, 50, 90))),
            data_tier=draw(st.sampled_from((DataTier.INTERNAL,) * 3 + (DataTier.CONFIDENTIAL,))),
            required_tags=draw(st.sampled_from(((),) * 3 + (("office",),))),
            split=draw(
                st.sampled_from((None, SplitPolicy(2, 24, 8192), SplitPolicy(4, 61, 131072)))
            ),
        )
        for name, memories in (
            ("big", (20_000, 40_000, 60_000, 90_000)),
            ("huge", (40_000, 70_000)),
            ("small", (6144,)),
        )
    ]
    policy = ControllerPolicy(admission_headroom_mb=draw(st.sampled_from((0, 256))))
    return profiles, fleet(*hosts), policy


def rounds_then(inputs: Inputs, splits: bool) -> Workspace:
    """``plan_placement``'s steps up to the splits (and the splits when asked)."""
    profiles, snapshot, policy = inputs
    forget_roundings()
    ws = Workspace(profiles, snapshot, policy)
    set_targets(ws)
    ws.build_scarcity()
    seed_incumbents(ws)
    place_pins(ws)
    place_rounds(ws, SingleHostPlacer())
    if splits:
        place_splits(ws)
    return ws


@PROPERTY
@given(st.one_of(split_inputs(), split_fleets()))
def test_a_split_charges_exactly_its_stage_memories(inputs: Inputs) -> None:
    ws = rounds_then(inputs, splits=False)
    before = {h: (ledger.new_mb, ledger.desired_mb) for h, ledger in ws.ledgers.items()}
    free = {
        h: (ledger.incremental_free_mb, ledger.desired_free_mb) for h, ledger in ws.ledgers.items()
    }
    place_splits(ws)
    charged: dict[str, int] = {}
    for split in ws.splits:
        for stage in split.stages:
            charged[stage.host_id] = charged.get(stage.host_id, 0) + stage.memory_mb
    headroom = ws.policy.admission_headroom_mb
    for host_id, ledger in ws.ledgers.items():
        new_mb, desired_mb = before[host_id]
        stage_mb = charged.get(host_id, 0)
        assert ledger.new_mb - new_mb == stage_mb
        assert ledger.desired_mb - desired_mb == stage_mb
        incremental, desired = free[host_id]
        if stage_mb:  # (within both ledgers' room before the splits)
            assert stage_mb + headroom <= incremental
            assert stage_mb <= desired


@PROPERTY
@given(st.one_of(split_inputs(), split_fleets()))
def test_no_split_where_a_single_eligible_host_fits(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    ws = rounds_then(inputs, splits=False)
    plan = plan_placement(profiles, snapshot, policy)
    by_name = {p.name: p for p in profiles}
    hosts = {h.host_id: h for h in snapshot.hosts}
    for split in plan.splits:
        p = by_name[split.model_id]
        for host_id, h in hosts.items():
            if not admits(h, snapshot.now, policy) or static_ok(p, h) is not None:
                continue
            if host_id in ws.assignments[p.name]:
                continue
            runtimes = [r for r in p.runtimes if r in h.resources.runtimes]
            qualified = h.resources.qualified_runtimes
            runtimes = [r for r in runtimes if qualified is None or r in qualified]
            if not runtimes:
                continue
            footprint = min(p.memory_for(r) for r in runtimes)
            ledger = ws.ledgers[host_id]
            room = min(
                ledger.incremental_free_mb - policy.admission_headroom_mb, ledger.desired_free_mb
            )
            assert footprint > room, f"{p.name} fits {host_id} alone but was split"


@PROPERTY
@given(st.one_of(split_inputs(), split_fleets()))
def test_splits_only_for_profiles_that_allow_them(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    allowed = {p.name: p.split for p in profiles if p.split is not None}
    for split in plan.splits:
        policy_of = allowed[split.model_id]
        assert 2 <= len(split.stages) <= policy_of.max_stages
        layers = [n for s in split.stages for n in range(s.layer_start, s.layer_end)]
        assert layers == list(range(policy_of.layers))
    assert len({s.model_id for s in plan.splits}) == len(plan.splits)  # one per model
    stripped = [replace(p, split=None) for p in profiles]
    assert plan_placement(stripped, snapshot, policy).splits == ()


@PROPERTY
@given(st.one_of(split_inputs(), split_fleets()))
def test_a_split_never_uses_an_ineligible_host(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    by_name = {p.name: p for p in profiles}
    hosts = {h.host_id: h for h in snapshot.hosts}
    for split in plan.splits:
        p = by_name[split.model_id]
        for stage in split.stages:
            h = hosts[stage.host_id]
            assert admits(h, snapshot.now, policy), f"{stage.host_id} takes no new work"
            assert static_ok(p, h) is None, f"{p.name} on {stage.host_id}: {static_ok(p, h)}"
            assert DEFAULT_RUNTIME in h.resources.runtimes
            assert all(a.host_id != stage.host_id for a in plan.assignments_for(p.name))


@PROPERTY
@given(st.one_of(split_inputs(), split_fleets()))
def test_splits_leave_every_single_host_decision_alone(inputs: Inputs) -> None:
    """Splits come after, and only into free memory: the replicas, preemptions and the
    other models' shortfalls are those of the same plan with no split allowed."""
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    stripped = plan_placement([replace(p, split=None) for p in profiles], snapshot, policy)
    assert plan.assignments == stripped.assignments
    assert plan.preemptions == stripped.preemptions
    split_models = {s.model_id for s in plan.splits}
    keep = [u for u in plan.unsatisfied if u.model_id not in split_models]
    before = [u for u in stripped.unsatisfied if u.model_id not in split_models]
    assert [(u.model_id, u.code, u.missing_replicas) for u in keep] == [
        (u.model_id, u.code, u.missing_replicas) for u in before
    ]
    for now, was in zip(keep, before, strict=True):  # a split's reason only ever added
        assert now.message == was.message or now.message.startswith(f"{was.message}; split: ")


@PROPERTY
@given(st.one_of(split_inputs(), split_fleets()), st.randoms(use_true_random=False))
def test_split_plans_are_deterministic(inputs: Inputs, shuffler: random.Random) -> None:
    profiles, snapshot, policy = inputs
    first = plan_bytes(plan_placement(profiles, snapshot, policy))
    hosts = list(snapshot.hosts)
    shuffler.shuffle(hosts)
    shuffled = list(profiles)
    shuffler.shuffle(shuffled)
    again = plan_placement(shuffled, replace(snapshot, hosts=tuple(hosts)), policy)
    assert plan_bytes(again) == first
    assert input_digest(profiles, snapshot, policy) == again.input_digest


@PROPERTY
@given(split_fleets(), st.sampled_from((8192, 16384, 24576, 32768)), st.sampled_from(("a", "z")))
def test_a_joining_host_never_moves_a_split_that_still_fits(
    inputs: Inputs, capacity_mb: int, name: str
) -> None:
    """One model that allows a split: once its stages serve, a host joining (first or last
    by id, of any size) leaves the split exactly where it is, unless the new host holds
    the whole model (a whole replica beats a split)."""
    profiles, snapshot, policy = inputs
    only = [p for p in profiles if p.name == "big"]
    plan = plan_placement(only, snapshot, policy)
    if not plan.splits:
        return
    (split,) = plan.splits
    joined = host(name, capacity_mb)
    serving = replace(snapshot, hosts=serving_stages(snapshot.hosts, split, 1))
    again = plan_placement(only, replace(serving, hosts=(*serving.hosts, joined)), policy)
    if again.assignments_for("big"):
        assert [a.host_id for a in again.assignments_for("big")] == [name]
        return
    assert again.splits == (split,)


def test_the_pipeline_here_is_plan_placements() -> None:
    """``rounds_then`` restates ``plan_placement``'s steps: the same plan bytes, so the
    properties above judge the planner production runs."""
    profiles = [baseline("big", 40_000, split=SplitPolicy(3, 20, 4096)), baseline("small", 4096)]
    snapshot = fleet(laptop_16g("lap-a"), laptop_16g("lap-b"), mini_32g("mini-c"))
    policy = ControllerPolicy()
    ws = rounds_then((profiles, snapshot, policy), splits=True)
    assert ws.splits  # (the example splits)
    report_domain_shortfalls(ws)
    made = assemble(ws, input_digest(profiles, snapshot, policy))
    assert plan_bytes(made) == plan_bytes(plan_placement(profiles, snapshot, policy))
