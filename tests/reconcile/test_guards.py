"""Residency guards: replacement, trust, drain-before-unload, minimum residency, ownership."""

from __future__ import annotations

import pytest

from gridctl.domain import ActionKind, DemandClass, HostState, Ownership, Preemption, ResidencyState
from gridctl.reconcile import BlockedCode, CancelReason, ControllerMemory, Tombstone

from .builders import (
    NOW,
    SHA_A,
    assign,
    find,
    fleet,
    host,
    pending_of,
    plan,
    profile,
    profiles,
    res,
    run,
)

PROFS = profiles(profile("m", sha=SHA_A, min_replicas=1))


def test_old_replica_is_not_drained_before_its_replacement_is_ready() -> None:
    # the plan moves m from h1 to h2; h2 is still warming
    result = run(
        plan(assign("m", "h2")),
        fleet(
            host("h1", res("m", sha=SHA_A)), host("h2", res("m", ResidencyState.WARMING, sha=SHA_A))
        ),
        PROFS,
    )
    drain = find(result, ActionKind.DRAIN, "h1", "m")
    assert drain.blocked == BlockedCode.REPLACEMENT_NOT_READY and not drain.executable


def test_drain_proceeds_once_the_replacement_is_ready() -> None:
    result = run(
        plan(assign("m", "h2")),
        fleet(host("h1", res("m", sha=SHA_A)), host("h2", res("m", sha=SHA_A))),
        PROFS,
    )
    assert find(result, ActionKind.DRAIN, "h1", "m").executable


def test_replacement_on_a_fenced_host_is_not_proof() -> None:
    result = run(
        plan(assign("m", "h2")),
        fleet(
            host("h1", res("m", sha=SHA_A)),
            host("h2", res("m", sha=SHA_A), state=HostState.PAUSED),
        ),
        PROFS,
    )
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked == BlockedCode.REPLACEMENT_NOT_READY


def test_last_replica_on_a_paused_host_is_kept_when_the_plan_cannot_place_it() -> None:
    result = run(
        plan(targets={"m": 1}),
        fleet(host("h1", res("m", sha=SHA_A), state=HostState.PAUSED)),
        PROFS,
    )
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked == BlockedCode.REPLACEMENT_NOT_READY


def test_external_inventory_cannot_justify_draining_the_last_managed_baseline() -> None:
    result = run(
        plan(assign("m", "ext")),
        fleet(
            host("h1", res("m", sha=SHA_A)),
            host("ext", res("m", sha=SHA_A, ownership=Ownership.EXTERNAL)),
        ),
        PROFS,
    )
    drain = find(result, ActionKind.DRAIN, "h1", "m")
    assert drain.blocked == BlockedCode.TRUSTED_REPLACEMENT_NOT_READY


def test_a_managed_replacement_is_trusted() -> None:
    result = run(
        plan(assign("m", "h2")),
        fleet(host("h1", res("m", sha=SHA_A)), host("h2", res("m", sha=SHA_A))),
        PROFS,
    )
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked is None


def test_draining_residency_with_requests_in_flight_is_not_unloaded() -> None:
    result = run(
        plan(),
        fleet(host("h1", res("m", ResidencyState.DRAINING, sha=SHA_A, active=2))),
        profiles(profile("m", sha=SHA_A)),
    )
    unload = find(result, ActionKind.UNLOAD, "h1", "m")
    assert unload.blocked == BlockedCode.REQUESTS_IN_FLIGHT


def test_other_models_work_on_the_host_does_not_block_the_unload() -> None:
    result = run(
        plan(assign("busy", "h1")),
        fleet(host("h1", res("m", ResidencyState.DRAINING, sha=SHA_A), res("busy", active=9))),
        profiles(profile("m", sha=SHA_A), profile("busy")),
    )
    assert find(result, ActionKind.UNLOAD, "h1", "m").executable


def test_unload_only_follows_a_drain() -> None:
    result = run(plan(), fleet(host("h1", res("m", sha=SHA_A))), profiles(profile("m", sha=SHA_A)))
    assert [a.kind for a in result.actions] == [ActionKind.DRAIN]


def test_minimum_residency_holds_a_fresh_replica_with_its_end_time() -> None:
    profs = profiles(profile("m", sha=SHA_A, min_residency=300))
    result = run(plan(), fleet(host("h1", res("m", sha=SHA_A, loaded_at=NOW - 100))), profs)
    drain = find(result, ActionKind.DRAIN, "h1", "m")
    assert drain.blocked == BlockedCode.MINIMUM_RESIDENCY
    assert drain.not_before == pytest.approx(NOW + 200)
    later = run(
        plan(),
        fleet(host("h1", res("m", sha=SHA_A, loaded_at=NOW - 100), seen=NOW + 201)),
        profs,
        now=NOW + 201,
    )
    assert find(later, ActionKind.DRAIN, "h1", "m").executable


def test_minimum_residency_also_protects_a_preemption_victim() -> None:
    profs = profiles(profile("low", priority=10, min_residency=300), profile("high", priority=90))
    result = run(
        plan(preemptions=[Preemption("h1", "low", "high", "capacity")]),
        fleet(host("h1", res("low", loaded_at=NOW - 10))),
        profs,
    )
    assert find(result, ActionKind.DRAIN, "h1", "low").blocked == BlockedCode.MINIMUM_RESIDENCY


@pytest.mark.parametrize(
    "residency",
    [
        res("m", sha=SHA_A, ownership=Ownership.EXTERNAL),
        res("m", sha=SHA_A, ownership=Ownership.MANUAL),
        res("m", sha=SHA_A, pinned=True),
        res("m", ResidencyState.DRAINING, sha=SHA_A, ownership=Ownership.EXTERNAL),
    ],
)
def test_external_manual_and_pinned_residencies_are_never_actuated(residency: object) -> None:
    result = run(
        plan(preemptions=[Preemption("h1", "m", "x", "capacity")]),
        fleet(host("h1", residency)),  # type: ignore[arg-type]
        profiles(profile("m", sha=SHA_A), profile("x")),
    )
    assert result.actions == ()


def test_an_assignment_satisfied_by_external_inventory_gets_no_warm() -> None:
    result = run(
        plan(assign("m", "h1", cls=DemandClass.DIRECT)),
        fleet(host("h1", res("m", ResidencyState.CACHED, ownership=Ownership.EXTERNAL))),
        profiles(profile("m")),
    )
    assert result.actions == ()


def test_in_place_revision_change_without_a_peer_is_refused() -> None:
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", res("m", sha="f" * 64))),
        PROFS,
    )
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked == BlockedCode.REPLACEMENT_NOT_READY
    assert find(result, ActionKind.WARM, "h1", "m").blocked == BlockedCode.IN_PLACE_REPLACEMENT


def test_unknown_models_are_left_alone() -> None:
    result = run(plan(), fleet(host("h1", res("mystery"))), {})
    assert result.actions == ()


def test_minimum_residency_ends_at_its_end_time() -> None:
    profs = profiles(profile("m", sha=SHA_A, min_residency=300))
    at_end = run(
        plan(),
        fleet(host("h1", res("m", sha=SHA_A, loaded_at=NOW - 300))),
        profs,
    )
    assert find(at_end, ActionKind.DRAIN, "h1", "m").executable


def test_a_retired_model_keeps_its_minimum_residency_from_the_tombstone() -> None:
    memory = ControllerMemory(tombstones=(Tombstone("gone", NOW - 5, SHA_A, 300.0),))
    result = run(
        plan(),
        fleet(host("h1", res("gone", sha=SHA_A, loaded_at=NOW - 100))),
        profiles(),
        memory=memory,
    )
    drain = find(result, ActionKind.DRAIN, "h1", "gone")
    assert drain.blocked == BlockedCode.MINIMUM_RESIDENCY
    assert drain.not_before == pytest.approx(NOW + 200)


def test_an_explicit_preemption_drains_a_victim_with_no_replacement() -> None:
    # invariant 3's deliberate exception: the victim's floor is only its replacements
    profs = profiles(
        profile("low", sha=SHA_A, priority=10, min_replicas=1), profile("high", priority=90)
    )
    the_plan = plan(preemptions=[Preemption("h1", "low", "high", "capacity")], targets={"low": 1})
    snapshot = fleet(host("h1", res("low", sha=SHA_A)))
    assert find(run(the_plan, snapshot, profs), ActionKind.DRAIN, "h1", "low").executable
    delivered = pending_of(ActionKind.DRAIN, "h1", "low", sha=SHA_A, delivered=True, cls=None)
    result = run(the_plan, snapshot, profs, pending=[delivered])
    assert result.cancellations == ()  # fresh evidence: none against a staged preemption


def test_the_plans_target_is_the_floor_when_it_exceeds_min_replicas() -> None:
    # the planner wants three replicas and could place two; draining the third ready
    # copy (on a host the plan does not use) would leave fewer than the target
    profs = profiles(profile("m", sha=SHA_A, min_replicas=1))
    the_plan = plan(assign("m", "h1"), assign("m", "h2"), targets={"m": 3})
    snapshot = fleet(*(host(h, res("m", sha=SHA_A)) for h in ("h1", "h2", "h3")))
    drain = find(run(the_plan, snapshot, profs), ActionKind.DRAIN, "h3", "m")
    assert drain.blocked == BlockedCode.REPLACEMENT_NOT_READY
    # and a drain already delivered there is withdrawn on that evidence
    delivered = pending_of(ActionKind.DRAIN, "h3", "m", sha=SHA_A, delivered=True, cls=None)
    result = run(the_plan, snapshot, profs, pending=[delivered])
    assert [(c.action_id, c.reason) for c in result.cancellations] == [
        (delivered.action_id, CancelReason.WITHDRAWN_UNSAFE)
    ]


def test_every_assigned_replica_elsewhere_must_be_ready_not_just_enough_of_them() -> None:
    # the plan moves m to h2 (still loading); a stray ready copy on h3 does not stand in
    the_plan = plan(assign("m", "h2"))
    snapshot = fleet(
        host("h1", res("m", sha=SHA_A)),
        host("h2", res("m", ResidencyState.LOADING, sha=SHA_A)),
        host("h3", res("m", sha=SHA_A)),
    )
    drain = find(run(the_plan, snapshot, PROFS), ActionKind.DRAIN, "h1", "m")
    assert drain.blocked == BlockedCode.REPLACEMENT_NOT_READY
