"""The ten scenarios of the split-coordinator specification, one test (or more) each.

A split is modelled as one ``ClaimRegistry`` per planned stage; ``claim_round``
is what a coordinator does: send a claim to the stages it can reach and count
accepts against the *planned* stage count.
"""

from __future__ import annotations

from gridctl.split import (
    Claim,
    ClaimDecision,
    ClaimRegistry,
    FenceReason,
    PlanRequest,
    StageWork,
    TopologyPlan,
    plan_topology,
    quorum_reached,
)

from .builders import LEASE_MS, NOW_MS, claim, gpus, load_for, qwen_480b, stop_for, unfenced_load

Stages = dict[str, ClaimRegistry]


def planned_stages(*names: str) -> Stages:
    return {name: ClaimRegistry() for name in names}


def claim_round(
    stages: Stages, reachable: set[str], proposed: Claim, now_ms: int = NOW_MS
) -> tuple[bool, dict[str, ClaimDecision]]:
    """Claim every reachable stage; quorum is judged against all planned stages."""
    decisions = {name: stages[name].accept(proposed, now_ms) for name in sorted(reachable)}
    accepted = sum(decision.accepted for decision in decisions.values())
    return quorum_reached(len(stages), accepted), decisions


def load_everywhere(stages: Stages, proposed: Claim, now_ms: int = NOW_MS) -> dict[str, bool]:
    return {
        name: registry.check_load(load_for(proposed), now_ms).accepted
        for name, registry in stages.items()
    }


def test_scenario_01_fresh_split_startup_loads_with_the_same_term() -> None:
    plan = plan_topology(PlanRequest(qwen_480b(), gpus(5)))
    assert isinstance(plan, TopologyPlan)
    stages = planned_stages(*(stage.node_id for stage in plan.stages))
    proposed = claim(coordinator_id="gpu-00", topology_id="topo-5x80")

    reached, decisions = claim_round(stages, set(stages), proposed)

    assert reached
    assert all(decision.accepted for decision in decisions.values())
    assert load_everywhere(stages, proposed) == dict.fromkeys(stages, True)


def test_scenario_02_one_stage_down_still_reaches_quorum() -> None:
    stages = planned_stages("a", "b", "c")
    reached, decisions = claim_round(stages, {"a", "b"}, claim())

    assert reached
    assert [name for name, d in decisions.items() if d.accepted] == ["a", "b"]
    # The later load can still fail on the stage that never accepted.
    assert load_everywhere(stages, claim()) == {"a": True, "b": True, "c": False}
    assert stages["c"].check_load(load_for(claim()), NOW_MS).reason == "missing_claim"


def test_scenario_03_too_many_stages_down_does_not_load() -> None:
    stages = planned_stages("a", "b", "c")
    reached, _ = claim_round(stages, {"a"}, claim())
    assert not reached  # 1/3 < 2: the coordinator must not send loads

    # Standby/retry: after peers come back, the same claim is retried and reaches quorum.
    retry_at = NOW_MS + 30_000
    reached, decisions = claim_round(stages, {"a", "b", "c"}, claim(), retry_at)
    assert reached
    assert decisions["a"].refreshed


def test_scenario_04_reachable_node_takes_over_with_a_newer_term() -> None:
    stages = planned_stages("a", "b", "c")
    old = claim(coordinator_id="coord-old", coordinator_term=10)
    claim_round(stages, set(stages), old)
    for name, registry in stages.items():
        registry.track(StageWork.for_load(f"{name}-10", load_for(old)))

    # coord-old disappears; another node plans a replacement and claims term 11.
    new = claim(coordinator_id="coord-new", coordinator_term=11, topology_id="topo-2")
    reached, decisions = claim_round(stages, {"a", "b"}, new)

    assert reached
    assert all(d.supersedes_term == 10 for d in decisions.values())
    assert [w.work_id for w in decisions["a"].stages_to_shut_down] == ["a-10"]
    assert load_everywhere(stages, new) == {"a": True, "b": True, "c": False}


def test_scenario_05_stale_load_and_stop_are_rejected() -> None:
    stages = planned_stages("s")
    old = claim(coordinator_id="coord-old", coordinator_term=10)
    new = claim(coordinator_id="coord-new", coordinator_term=11)
    claim_round(stages, {"s"}, old)
    running_old = StageWork.for_load("stage-10", load_for(old))
    stages["s"].track(running_old)

    _, decisions = claim_round(stages, {"s"}, new)
    assert decisions["s"].stages_to_shut_down == (running_old,)
    assert stages["s"].check_load(load_for(new), NOW_MS).accepted

    # The old coordinator rejoins and tries to mutate the split with term 10.
    stage = stages["s"]
    assert stage.check_load(load_for(old), NOW_MS).reason == FenceReason.TERM_MISMATCH
    assert stage.check_stop(stop_for(old), NOW_MS).reason == FenceReason.STALE_TERM
    assert stage.accept(old, NOW_MS).reason == FenceReason.STALE_TERM
    assert stage.check_stop(stop_for(new), NOW_MS).accepted


def test_scenario_06_same_term_race_fences_the_second_coordinator() -> None:
    stages = planned_stages("a", "b", "c")
    first = claim(coordinator_id="coord-1", topology_id="topo-1", topology_hash="h1")
    rivals = [
        claim(coordinator_id="coord-2", topology_id="topo-1", topology_hash="h1"),
        claim(coordinator_id="coord-1", topology_id="topo-2", topology_hash="h1"),
        claim(coordinator_id="coord-1", topology_id="topo-1", topology_hash="h2"),
        claim(
            coordinator_id="coord-1",
            topology_id="topo-1",
            topology_hash="h1",
            participant_set_hash="other",
        ),
    ]
    assert claim_round(stages, set(stages), first)[0]
    for rival in rivals:
        reached, decisions = claim_round(stages, set(stages), rival)
        assert not reached
        assert {d.reason for d in decisions.values()} == {FenceReason.CONFLICTING_SAME_TERM}
    assert load_everywhere(stages, first) == dict.fromkeys(stages, True)


def test_scenario_07_higher_term_wins_in_either_arrival_order() -> None:
    stages = planned_stages("a", "b", "c")
    low = claim(coordinator_id="coord-low", coordinator_term=10)
    high = claim(coordinator_id="coord-high", coordinator_term=11)

    # a sees low then high; b sees high then low; c only ever sees low.
    assert stages["a"].accept(low, NOW_MS).accepted
    assert stages["a"].accept(high, NOW_MS).supersedes_term == 10
    assert stages["b"].accept(high, NOW_MS).accepted
    assert stages["b"].accept(low, NOW_MS).reason == FenceReason.STALE_TERM
    assert stages["c"].accept(low, NOW_MS).accepted

    assert [stages[n].current(high.key) for n in ("a", "b")] == [high, high]
    assert quorum_reached(3, 2)  # high holds a and b: a majority, so it may load
    assert load_everywhere(stages, high) == {"a": True, "b": True, "c": False}
    assert load_everywhere(stages, low) == {"a": False, "b": False, "c": True}


def test_scenario_07_newer_term_without_majority_may_not_load() -> None:
    stages = planned_stages("a", "b", "c")
    reached, decisions = claim_round(stages, {"c"}, claim(coordinator_term=11))
    assert decisions["c"].accepted
    assert not reached


def test_scenario_08_only_the_majority_side_of_a_partition_loads() -> None:
    stages = planned_stages("s1", "s2", "s3")
    side_a = claim(coordinator_id="coord-a", coordinator_term=10)
    side_b = claim(coordinator_id="coord-b", coordinator_term=11)

    a_reached, _ = claim_round(stages, {"s1", "s2"}, side_a)
    b_reached, _ = claim_round(stages, {"s3"}, side_b)
    assert a_reached  # 2/3: A may load
    assert not b_reached  # 1/3: B must stay out
    assert load_everywhere(stages, side_a) == {"s1": True, "s2": True, "s3": False}

    # The partition heals: s3 accepted the newer term and rejects A's stale term.
    assert stages["s3"].accept(side_a, NOW_MS).reason == FenceReason.STALE_TERM
    assert stages["s3"].check_load(load_for(side_a), NOW_MS).reason == "term_mismatch"
    # B can now claim a majority with its newer term and take over.
    b_reached, decisions = claim_round(stages, set(stages), side_b)
    assert b_reached
    assert decisions["s1"].supersedes_term == 10


def test_scenario_09_expired_lease_blocks_loads_until_reclaimed() -> None:
    stages = planned_stages("s")
    leased = claim(lease_until_unix_ms=NOW_MS + LEASE_MS)
    claim_round(stages, {"s"}, leased)
    after_lease = NOW_MS + LEASE_MS + 1

    assert stages["s"].check_load(load_for(leased), after_lease).reason == "expired_lease"
    # A claim sent with a lease already in the past cannot authorise anything either.
    assert stages["s"].accept(leased, after_lease).reason == "expired_lease"

    renewed = claim(lease_until_unix_ms=after_lease + LEASE_MS)
    assert claim_round(stages, {"s"}, renewed, after_lease)[0]
    assert stages["s"].check_load(load_for(renewed), after_lease).accepted


def test_scenario_10_local_unfenced_load_bypasses_the_fence() -> None:
    untouched = ClaimRegistry()
    decision = untouched.check_load(unfenced_load(), NOW_MS)
    assert decision.accepted and decision.unfenced

    claimed = ClaimRegistry()
    claimed.accept(claim(coordinator_term=42), NOW_MS)
    assert claimed.check_load(unfenced_load(), NOW_MS + 100 * LEASE_MS).accepted
