"""Load/warm dependencies, modes and stable action identities."""

from __future__ import annotations

from dataclasses import replace

from gridctl.domain import ActionKind, Mode, ReceiptStatus, ResidencyState
from gridctl.reconcile import (
    ActionKey,
    BlockedCode,
    CancelReason,
    PlanGeneration,
    action_to_json,
    derive_action_id,
    history_from_json,
    pending_from_json,
)

from .builders import (
    NOW,
    SHA_A,
    assign,
    done,
    find,
    fleet,
    host,
    pending_of,
    plan,
    policy,
    profile,
    profiles,
    res,
    run,
)

PROFS = profiles(profile("m", sha=SHA_A))


def test_missing_uncached_replica_loads_then_warms_with_dependency() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS)
    load = find(result, ActionKind.LOAD, "h1", "m")
    warm = find(result, ActionKind.WARM, "h1", "m")
    assert load.executable and load.blocked is None
    assert warm.depends_on == (load.action_id,)
    assert [a.kind for a in result.actions] == [ActionKind.LOAD, ActionKind.WARM]


def test_cached_artifact_needs_only_a_warm() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1", cached=[("m", SHA_A)])), PROFS)
    assert [a.kind for a in result.actions] == [ActionKind.WARM]
    assert result.actions[0].depends_on == ()


def test_cached_with_another_digest_does_not_count() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1", cached=[("m", "f" * 64)])), PROFS)
    assert [a.kind for a in result.actions] == [ActionKind.LOAD, ActionKind.WARM]


def test_ready_replica_needs_nothing() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1", res("m", sha=SHA_A))), PROFS)
    assert result.actions == ()


def test_observe_mode_proposes_nothing_and_records_drift_as_deferred() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, mode=Mode.OBSERVE)
    assert result.actions == () and result.enqueue == ()
    assert {d.kind for d in result.deferred} == {ActionKind.LOAD, ActionKind.WARM}
    assert all(d.blocked == BlockedCode.OBSERVE_MODE and not d.executable for d in result.deferred)


def test_recommend_mode_proposes_but_nothing_is_executable() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, mode=Mode.RECOMMEND)
    assert len(result.actions) == 2
    assert not any(a.executable for a in result.actions)
    assert result.enqueue == ()


def test_automatic_mode_executes_and_enqueues() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS)
    assert [p.action.kind for p in result.enqueue] == [ActionKind.LOAD]
    # one mutation per host by default: the warm waits for the next slot
    assert find(result, ActionKind.WARM, "h1", "m").blocked == BlockedCode.HOST_GOVERNOR
    roomy = run(
        plan(assign("m", "h1")),
        fleet(host("h1")),
        PROFS,
        pol=policy(max_concurrent_mutations_per_host=2),
    )
    assert [p.action.kind for p in roomy.enqueue] == [ActionKind.LOAD, ActionKind.WARM]
    assert all(p.action.executable for p in roomy.enqueue)


def test_leaving_automatic_cancels_every_pending_command() -> None:
    pending = [
        pending_of(ActionKind.LOAD, "h1", "m", sha=SHA_A, delivered=True),
        pending_of(ActionKind.DRAIN, "h2", "x", cls=None),
    ]
    for mode in (Mode.RECOMMEND, Mode.OBSERVE):
        result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, mode=mode, pending=pending)
        assert {c.reason for c in result.cancellations} == {CancelReason.MODE_CHANGED}
        assert {c.action_id for c in result.cancellations} == {p.action_id for p in pending}


def test_action_id_is_the_digest_of_kind_host_model_artifact_attempt() -> None:
    result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS)
    load = find(result, ActionKind.LOAD, "h1", "m")
    assert load.action_id == derive_action_id(ActionKey(ActionKind.LOAD, "h1", "m", SHA_A), 0)
    other = derive_action_id(ActionKey(ActionKind.LOAD, "h1", "m", SHA_A), 1)
    assert other != load.action_id


def test_plan_generation_is_not_part_of_identity() -> None:
    first = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS)
    other_plan = replace(plan(assign("m", "h1")), input_digest="e" * 16)
    second = run(other_plan, fleet(host("h1")), PROFS, now=NOW + 7)
    assert [a.action_id for a in first.actions] == [a.action_id for a in second.actions]


def test_pending_equivalent_is_suppressed_across_ticks() -> None:
    first = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS)
    second = run(
        plan(assign("m", "h1")), fleet(host("h1")), PROFS, pending=first.enqueue, now=NOW + 5
    )
    assert second.enqueue == ()
    assert second.cancellations == ()
    assert [a.action_id for a in second.actions] == [a.action_id for a in first.actions]


def test_a_finished_attempt_gives_the_next_lifecycle_a_new_id() -> None:
    failed = done(ActionKind.LOAD, "h1", "m", ReceiptStatus.FAILED, at=NOW - 10_000, sha=SHA_A)
    result = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, history=[failed])
    load = find(result, ActionKind.LOAD, "h1", "m")
    assert load.attempt == 1 and load.action_id != failed.action_id


def test_undelivered_pending_work_the_plan_dropped_is_cancelled_but_delivered_is_kept() -> None:
    stale = pending_of(ActionKind.LOAD, "h2", "m", sha=SHA_A)
    running = pending_of(ActionKind.LOAD, "h3", "m", sha=SHA_A, delivered=True)
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1"), host("h2"), host("h3")),
        PROFS,
        pending=[stale, running],
    )
    assert [(c.action_id, c.reason) for c in result.cancellations] == [
        (stale.action_id, CancelReason.SUPERSEDED)
    ]
    assert running.action_id in {a.action_id for a in result.actions}


def test_failed_residency_on_an_assigned_host_is_warmed_again() -> None:
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", res("m", ResidencyState.FAILED, sha=SHA_A), cached=[("m", SHA_A)])),
        PROFS,
    )
    assert [a.kind for a in result.actions] == [ActionKind.WARM]


def test_obsolete_failed_residency_is_unloaded_without_a_drain() -> None:
    result = run(plan(), fleet(host("h1", res("m", ResidencyState.FAILED, sha=SHA_A))), PROFS)
    assert [a.kind for a in result.actions] == [ActionKind.UNLOAD]


def test_same_input_gives_identical_output() -> None:
    args = (plan(assign("m", "h1"), assign("m", "h2")), fleet(host("h1"), host("h2")), PROFS)
    assert run(*args) == run(*args)


def test_json_rows_round_trip_into_the_reconciler() -> None:
    first = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS)
    rows = [
        {**action_to_json(p.action), "delivered": True, "demand_class": "baseline"}
        for p in first.enqueue
    ]
    pending = pending_from_json(rows)
    again = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, pending=pending)
    assert again.enqueue == () and again.cancellations == ()
    history = history_from_json(
        [
            {
                "kind": "load",
                "host_id": "h1",
                "model_id": "m",
                "status": "failed",
                "finished_at": NOW - 1,
                "artifact_sha256": SHA_A,
            }
        ]
    )
    blocked = run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, history=history)
    assert find(blocked, ActionKind.LOAD, "h1", "m").blocked == BlockedCode.FAILURE_BACKOFF


def test_plan_generation_format_round_trips() -> None:
    g = PlanGeneration("c91d", 42, "4fc1")
    assert str(g) == "c91d:00000000000000000042:4fc1"
    assert PlanGeneration.parse(str(g)) == g
    assert PlanGeneration("c91d", 41, "ff").older_than(g)
    assert not PlanGeneration("beef", 1, "ff").older_than(g)
