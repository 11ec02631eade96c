"""Store and reconciler together across a controller restart.

Commands persisted by one controller process come back ``restored`` in the
next; they keep their governor slots only for the membership-recovery grace,
destructive work waits for the fleet to re-register, and a withdrawn batch
survives the restart.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.domain import ActionKind, Mode, ReceiptStatus
from gridctl.reconcile import BlockedCode, CancelReason, RestartGrace, reconcile

from ..reconcile.builders import assign, fleet, host, plan, policy, profile, profiles, res
from .conftest import StoreOpener
from .storefixtures import T0, FakeClock

PROFS = profiles(profile("m"), profile("n"))
POLICY = policy(max_concurrent_mutations=2)


def test_restored_commands_get_the_grace_then_lose_their_slot(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    """On SQLite a restart; on PostgreSQL equally a follower taking over the same rows."""
    first = open_store()
    the_plan = plan(assign("n", "h2"))
    before = fleet(host("h1", res("m"), seen=T0), host("h2", cached=[("n", None)], seen=T0), now=T0)
    tick = reconcile(the_plan, before, PROFS, POLICY, Mode.AUTOMATIC, (), (), T0)
    assert {(a.kind, a.host_id) for a in tick.executable} == {
        (ActionKind.DRAIN, "h1"),
        (ActionKind.WARM, "h2"),
    }
    first.apply_tick(tick.enqueue, tick.cancellations, tick.memory)
    first.mark_delivered([p.action_id for p in tick.enqueue])
    first.close()

    clock.advance(30)  # the controller restarts
    restarted_at = clock.now
    second = open_store()
    pending = second.pending()
    assert all(p.restored and p.delivered for p in pending)
    memory = replace(second.memory(), grace=RestartGrace(restarted_at=restarted_at))
    # h2 re-registered, h1 has not; a new model shows up for an obsolete copy on h2
    after = fleet(
        host("h1", res("m"), seen=T0),
        host("h2", res("m"), cached=[("n", None)], seen=clock.now),
        now=clock.now,
    )
    during = reconcile(
        the_plan, after, PROFS, POLICY, Mode.AUTOMATIC, pending, (), clock.now, memory=memory
    )
    assert during.cancellations == ()  # restored commands keep their place
    drain_h2 = next(a for a in during.actions if a.kind is ActionKind.DRAIN and a.host_id == "h2")
    assert drain_h2.blocked == BlockedCode.MEMBERSHIP_RECOVERY
    second.apply_tick(during.enqueue, during.cancellations, during.memory)

    clock.advance(61)  # the grace is over and h1 never came back
    later = fleet(
        host("h1", res("m"), seen=T0),
        host("h2", res("m"), cached=[("n", None)], seen=clock.now),
        now=clock.now,
    )
    over = reconcile(
        the_plan,
        later,
        PROFS,
        POLICY,
        Mode.AUTOMATIC,
        second.pending(),
        second.history(),
        clock.now,
        memory=during.memory,
    )
    expired = {c.action_id: c.reason for c in over.cancellations}
    drain_h1 = next(p for p in pending if p.action.host_id == "h1")
    assert expired == {drain_h1.action_id: CancelReason.MEMBERSHIP_RECOVERY_EXPIRED}
    second.apply_tick(over.enqueue, over.cancellations, over.memory)
    assert [p.action.host_id for p in second.pending()] == ["h2"]
    (cancelled,) = [e for e in second.history() if e.status is ReceiptStatus.CANCELLED]
    assert cancelled.action_id == drain_h1.action_id and not cancelled.acknowledged
