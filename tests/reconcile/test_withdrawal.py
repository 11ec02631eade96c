"""Destructive-batch withdrawal, and the seven-day blocked batch."""

from __future__ import annotations

from gridctl.domain import ActionKind, HostState, ResidencyState
from gridctl.reconcile import BlockedCode, CancelReason, ControllerMemory

from .builders import (
    NOW,
    SHA_A,
    SHA_B,
    assign,
    done,
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

PROFS = profiles(profile("x", min_replicas=1), profile("y"), profile("z"))
DAY = 86_400.0


def _withdraw() -> tuple[ControllerMemory, str]:
    """x moves h1 -> h2; the delivered drain of h1 becomes unsafe when h2 pauses."""
    drain = pending_of(ActionKind.DRAIN, "h1", "x", delivered=True, cls=None)
    unload = pending_of(ActionKind.UNLOAD, "h3", "x", cls=None)
    result = run(
        plan(assign("x", "h2")),
        fleet(
            host("h1", res("x")),
            host("h2", res("x"), state=HostState.PAUSED),
            host("h3", res("x", ResidencyState.DRAINING)),
        ),
        PROFS,
        pending=[drain, unload],
    )
    assert {(c.action_id, c.reason) for c in result.cancellations} == {
        (drain.action_id, CancelReason.WITHDRAWN_UNSAFE),
        (unload.action_id, CancelReason.WITHDRAWN_UNSAFE),
    }
    # only the delivered member is remembered: it may already be running
    assert [w.action_id for w in result.withdrawn_destructive] == [drain.action_id]
    return result.memory, drain.action_id


def test_unsafe_evidence_withdraws_the_whole_destructive_batch_of_the_model() -> None:
    _withdraw()


def test_plan_wanting_the_replica_again_withdraws_its_delivered_drain() -> None:
    drain = pending_of(ActionKind.DRAIN, "h1", "x", delivered=True, cls=None)
    result = run(plan(assign("x", "h1")), fleet(host("h1", res("x"))), PROFS, pending=[drain])
    assert [c.reason for c in result.cancellations] == [CancelReason.WITHDRAWN_UNSAFE]


def test_withdrawn_batch_blocks_further_destruction_of_that_model() -> None:
    memory, _ = _withdraw()
    result = run(
        plan(assign("x", "h2")),
        fleet(host("h1", res("x"), seen=NOW + 10), host("h2", res("x"), seen=NOW + 10)),
        PROFS,
        now=NOW + 10,
        memory=memory,
    )
    assert find(result, ActionKind.DRAIN, "h1", "x").blocked == BlockedCode.WITHDRAWN_DESTRUCTIVE
    assert len(result.withdrawn_destructive) == 1


def test_withdrawn_batch_stays_blocked_after_seven_days_while_other_work_proceeds() -> None:
    memory, _ = _withdraw()
    later = NOW + 7 * DAY
    snapshot = fleet(
        host("h1", res("x"), seen=NOW),  # never heard from again
        host("h2", res("x"), seen=later),
        host("h3", res("x"), seen=later),  # an obsolete copy of x
        host("h4", seen=later),
        host("h5", res("z"), seen=later),  # z is no longer wanted
        now=later,
    )
    result = run(
        plan(assign("x", "h2"), assign("y", "h4")),
        snapshot,
        PROFS,
        now=later,
        memory=memory,
    )
    assert find(result, ActionKind.DRAIN, "h3", "x").blocked == BlockedCode.WITHDRAWN_DESTRUCTIVE
    assert find(result, ActionKind.LOAD, "h4", "y").executable  # availability work
    assert find(result, ActionKind.DRAIN, "h5", "z").executable  # other models' destruction
    assert [w.model_id for w in result.withdrawn_destructive] == ["x"]


def test_an_acknowledged_terminal_receipt_releases_the_block() -> None:
    memory, drain_id = _withdraw()
    receipt = done(ActionKind.DRAIN, "h1", "x", at=NOW + 20)
    assert receipt.action_id == drain_id
    result = run(
        plan(assign("x", "h2")),
        fleet(host("h2", res("x"), seen=NOW + 30), host("h3", res("x"), seen=NOW + 30)),
        PROFS,
        history=[receipt],
        now=NOW + 30,
        memory=memory,
    )
    assert result.withdrawn_destructive == ()
    assert find(result, ActionKind.DRAIN, "h3", "x").executable


def test_a_controller_side_cancellation_is_not_a_receipt() -> None:
    memory, _ = _withdraw()
    cancelled = done(ActionKind.DRAIN, "h1", "x", at=NOW + 1, acknowledged=False)
    result = run(
        plan(assign("x", "h2")),
        fleet(host("h2", res("x"), seen=NOW + 30), host("h3", res("x"), seen=NOW + 30)),
        PROFS,
        history=[cancelled],
        now=NOW + 30,
        memory=memory,
    )
    assert len(result.withdrawn_destructive) == 1


def test_a_newer_heartbeat_proving_the_postcondition_releases_the_block() -> None:
    memory, _ = _withdraw()
    result = run(
        plan(assign("x", "h2")),
        fleet(
            host("h1", res("x", ResidencyState.DRAINING), seen=NOW + 30),
            host("h2", res("x"), seen=NOW + 30),
        ),
        PROFS,
        now=NOW + 30,
        memory=memory,
    )
    assert result.withdrawn_destructive == ()
    assert find(result, ActionKind.UNLOAD, "h1", "x").executable


def test_a_heartbeat_older_than_the_withdrawal_proves_nothing() -> None:
    memory, _ = _withdraw()
    result = run(
        plan(assign("x", "h2")),
        fleet(host("h1", seen=NOW - 1), host("h2", res("x"), seen=NOW + 5)),
        PROFS,
        now=NOW + 5,
        memory=memory,
    )
    assert len(result.withdrawn_destructive) == 1


REVISED = profiles(profile("x", sha=SHA_A, min_replicas=1))


def _ready_on_h2_and_h3(h1_sha: str) -> tuple[object, ...]:
    """x wanted on h1 and h2 (revision A); h2 and h3 serve A, h1 serves ``h1_sha``."""
    return (
        plan(assign("x", "h1"), assign("x", "h2")),
        fleet(
            host("h1", res("x", sha=h1_sha)),
            host("h2", res("x", sha=SHA_A)),
            host("h3", res("x", sha=SHA_A)),
        ),
    )


def test_a_drain_of_a_replica_the_plan_wants_again_is_withdrawn_even_with_replacements() -> None:
    the_plan, snapshot = _ready_on_h2_and_h3(SHA_A)
    drain = pending_of(ActionKind.DRAIN, "h1", "x", sha=SHA_A, delivered=True, cls=None)
    result = run(the_plan, snapshot, REVISED, pending=[drain])  # type: ignore[arg-type]
    assert [(c.action_id, c.reason) for c in result.cancellations] == [
        (drain.action_id, CancelReason.WITHDRAWN_UNSAFE)
    ]


def test_a_drain_of_an_obsolete_revision_is_not_wanted_again() -> None:
    the_plan, snapshot = _ready_on_h2_and_h3(SHA_B)
    drain = pending_of(ActionKind.DRAIN, "h1", "x", sha=SHA_B, delivered=True, cls=None)
    result = run(the_plan, snapshot, REVISED, pending=[drain])  # type: ignore[arg-type]
    assert result.cancellations == () and result.withdrawn_destructive == ()
    assert find(result, ActionKind.DRAIN, "h1", "x").action_id == drain.action_id


def test_a_heartbeat_from_the_instant_of_the_withdrawal_proves_nothing() -> None:
    memory, drain_id = _withdraw()
    result = run(
        plan(assign("x", "h2")),
        fleet(host("h1", res("x", ResidencyState.DRAINING), seen=NOW), host("h2", res("x"))),
        PROFS,
        now=NOW + 5,
        memory=memory,
    )
    assert [w.action_id for w in result.withdrawn_destructive] == [drain_id]


def test_a_withdrawn_unload_needs_the_residency_gone_not_draining() -> None:
    drain = pending_of(ActionKind.DRAIN, "h1", "x", delivered=True, cls=None)
    unload = pending_of(ActionKind.UNLOAD, "h3", "x", delivered=True, cls=None)
    first = run(
        plan(assign("x", "h2")),
        fleet(
            host("h1", res("x")),
            host("h2", res("x"), state=HostState.PAUSED),
            host("h3", res("x", ResidencyState.DRAINING)),
        ),
        PROFS,
        pending=[drain, unload],
    )
    assert {w.action_id for w in first.withdrawn_destructive} == {
        drain.action_id,
        unload.action_id,
    }
    later = run(
        plan(assign("x", "h2")),
        fleet(
            host("h1", res("x", ResidencyState.DRAINING), seen=NOW + 30),
            host("h2", res("x"), seen=NOW + 30),
            host("h3", res("x", ResidencyState.DRAINING), seen=NOW + 30),
        ),
        PROFS,
        now=NOW + 30,
        memory=first.memory,
    )
    # the drain's postcondition (draining) is proven; the unload's (cached or gone) is not
    assert [w.action_id for w in later.withdrawn_destructive] == [unload.action_id]


def test_every_member_of_an_unsafe_batch_is_cancelled_whatever_else_is_queued() -> None:
    drain = pending_of(ActionKind.DRAIN, "h1", "x", delivered=True, cls=None)
    unload = pending_of(ActionKind.UNLOAD, "h3", "x", cls=None)
    others = [pending_of(ActionKind.WARM, f"h{i}", "y") for i in range(4, 9)]
    result = run(
        plan(assign("x", "h2"), *(assign("y", f"h{i}") for i in range(4, 9))),
        fleet(
            host("h1", res("x")),
            host("h2", res("x"), state=HostState.PAUSED),
            host("h3", res("x", ResidencyState.DRAINING)),
            *(host(f"h{i}", cached=[("y", None)]) for i in range(4, 9)),
        ),
        PROFS,
        pending=[*others, drain, unload],
    )
    assert sorted(o.action_id for o in others)[0] < max(drain.action_id, unload.action_id)
    assert {(c.action_id, c.reason, c.delivered) for c in result.cancellations} == {
        (drain.action_id, CancelReason.WITHDRAWN_UNSAFE, True),
        (unload.action_id, CancelReason.WITHDRAWN_UNSAFE, False),
    }
