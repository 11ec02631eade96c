"""Restart grace, backwards clocks, fresh registrations and retirement tombstones."""

from __future__ import annotations

from gridctl.domain import ActionKind, Ownership
from gridctl.reconcile import (
    BlockedCode,
    CancelReason,
    ControllerMemory,
    RestartGrace,
    Tombstone,
    grace_ends_at,
    newly_retired,
    retire_profiles,
)

from .builders import (
    NOW,
    assign,
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

PROFS = profiles(profile("m"), profile("n"))
RESTARTED = ControllerMemory(grace=RestartGrace(restarted_at=NOW - 1))


def test_the_grace_anchors_at_the_first_tick_and_holds_destructive_work() -> None:
    result = run(
        plan(assign("n", "h2")),
        fleet(host("h1", res("m")), host("h2", cached=[("n", None)])),
        PROFS,
        memory=RESTARTED,
    )
    assert result.memory.grace == RestartGrace(restarted_at=NOW - 1, anchor=NOW)
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked == BlockedCode.MEMBERSHIP_RECOVERY
    assert find(result, ActionKind.WARM, "h2", "n").executable


def test_after_the_grace_destruction_waits_for_a_fresh_registration() -> None:
    memory = ControllerMemory(grace=RestartGrace(restarted_at=NOW - 1, anchor=NOW))
    later = NOW + 61
    result = run(
        plan(),
        fleet(host("h1", res("m"), seen=NOW - 5), host("h2", res("n"), seen=later), now=later),
        PROFS,
        now=later,
        memory=memory,
    )
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked == BlockedCode.AWAITING_REGISTRATION
    assert find(result, ActionKind.DRAIN, "h2", "n").executable


def test_restored_commands_hold_budget_only_during_the_grace() -> None:
    restored = pending_of(ActionKind.LOAD, "gone", "m", delivered=True, restored=True)
    pol = policy(max_concurrent_mutations=1)
    snapshot = fleet(host("h2", cached=[("n", None)]))
    during = run(
        plan(assign("n", "h2")), snapshot, PROFS, pending=[restored], pol=pol, memory=RESTARTED
    )
    assert find(during, ActionKind.WARM, "h2", "n").blocked == BlockedCode.MUTATION_GOVERNOR
    assert during.cancellations == ()
    after = run(
        plan(assign("n", "h2")),
        fleet(host("h2", cached=[("n", None)], seen=NOW + 61), now=NOW + 61),
        PROFS,
        pending=[restored],
        pol=pol,
        now=NOW + 61,
        memory=during.memory,
    )
    assert [c.reason for c in after.cancellations] == [CancelReason.MEMBERSHIP_RECOVERY_EXPIRED]
    assert find(after, ActionKind.WARM, "h2", "n").executable


def test_a_backwards_clock_jump_rebases_the_grace_anchor() -> None:
    memory = ControllerMemory(grace=RestartGrace(restarted_at=NOW - 1, anchor=NOW))
    earlier = NOW - 3600
    result = run(plan(), fleet(now=earlier), PROFS, now=earlier, memory=memory)
    assert result.memory.grace is not None and result.memory.grace.anchor == earlier
    assert grace_ends_at(result.memory, policy()) == earlier + 60
    # the restored command stops holding budget one grace after the corrected time,
    # not when the clock reaches the old, future-dated end of the grace
    restored = pending_of(ActionKind.LOAD, "gone", "m", delivered=True, restored=True)
    then = earlier + 61
    after = run(plan(), fleet(now=then), PROFS, pending=[restored], now=then, memory=result.memory)
    assert [c.reason for c in after.cancellations] == [CancelReason.MEMBERSHIP_RECOVERY_EXPIRED]


def test_removing_a_profile_creates_a_tombstone_and_bringing_it_back_clears_it() -> None:
    before = profiles(profile("m", min_residency=120), profile("n"))
    after = profiles(profile("n"))
    tombstones = retire_profiles((), before, after, NOW)
    assert tombstones == (Tombstone("m", NOW, None, 120.0),)
    assert newly_retired((), tombstones) == ("m",)
    assert retire_profiles(tombstones, after, after, NOW + 5) == tombstones  # stays visible
    assert retire_profiles(tombstones, after, before, NOW + 9) == ()


def test_a_tombstone_cancels_availability_work_and_drains_managed_copies() -> None:
    memory = ControllerMemory(tombstones=(Tombstone("m", NOW - 100),))
    live = profiles(profile("n"))
    pending = [
        pending_of(ActionKind.WARM, "h1", "m", delivered=True),
        pending_of(ActionKind.DRAIN, "h2", "m", cls=None),
    ]
    result = run(
        plan(),
        fleet(
            host("h1", res("m")),
            host("h2", res("m")),
            host("h3", res("m", ownership=Ownership.EXTERNAL)),
        ),
        live,
        pending=pending,
        memory=memory,
    )
    assert [(c.action_id, c.reason) for c in result.cancellations] == [
        (pending[0].action_id, CancelReason.RETIRED)
    ]
    assert find(result, ActionKind.DRAIN, "h2", "m").executable  # the pending one, carried
    drain = find(result, ActionKind.DRAIN, "h1", "m")
    assert drain.reason.startswith("retired") and drain.executable
    assert all(a.host_id != "h3" for a in result.actions)


def test_a_returning_host_with_a_retired_model_gets_it_drained() -> None:
    memory = ControllerMemory(tombstones=(Tombstone("m", NOW - 30 * 86_400),))
    result = run(plan(), fleet(host("back", res("m"))), profiles(), memory=memory)
    assert find(result, ActionKind.DRAIN, "back", "m").executable
