"""Failure backoff, mutation cooldown and observation-time fencing."""

from __future__ import annotations

import pytest

from gridctl.domain import ActionKind, ReceiptStatus, ResidencyState
from gridctl.reconcile import BlockedCode, backoff_delay

from .builders import (
    NOW,
    SHA_A,
    assign,
    done,
    find,
    fleet,
    host,
    plan,
    policy,
    profile,
    profiles,
    res,
    run,
)

PROFS = profiles(profile("m", sha=SHA_A))
FAILED = ReceiptStatus.FAILED


def _failures(n: int, last_at: float) -> list:  # type: ignore[type-arg]
    return [
        done(ActionKind.LOAD, "h1", "m", FAILED, at=last_at - (n - 1 - i), sha=SHA_A, attempt=i)
        for i in range(n)
    ]


@pytest.mark.parametrize(
    ("failures", "delay"), [(1, 30), (2, 60), (3, 120), (5, 480), (6, 900), (40, 900)]
)
def test_failure_backoff_is_exponential_and_capped(failures: int, delay: float) -> None:
    assert backoff_delay(failures, policy()) == delay
    result = run(
        plan(assign("m", "h1")), fleet(host("h1")), PROFS, history=_failures(failures, NOW - 1)
    )
    load = find(result, ActionKind.LOAD, "h1", "m")
    assert load.blocked == BlockedCode.FAILURE_BACKOFF
    assert load.not_before == pytest.approx(NOW - 1 + delay)
    assert load.attempt == failures


def test_backoff_is_per_kind_host_and_model() -> None:
    history = _failures(3, NOW - 1)
    result = run(
        plan(assign("m", "h1"), assign("m", "h2")),
        fleet(host("h1"), host("h2")),
        PROFS,
        history=history,
    )
    assert find(result, ActionKind.LOAD, "h1", "m").blocked == BlockedCode.FAILURE_BACKOFF
    assert find(result, ActionKind.LOAD, "h2", "m").executable


def test_backoff_ends_and_a_success_resets_the_streak() -> None:
    history = _failures(2, NOW - 61)
    assert find(
        run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, history=history),
        ActionKind.LOAD,
        "h1",
        "m",
    ).executable
    history.append(done(ActionKind.LOAD, "h1", "m", at=NOW - 50, sha=SHA_A, attempt=9))
    history.append(done(ActionKind.LOAD, "h1", "m", FAILED, at=NOW - 2, sha=SHA_A, attempt=10))
    load = find(
        run(plan(assign("m", "h1")), fleet(host("h1")), PROFS, history=history),
        ActionKind.LOAD,
        "h1",
        "m",
    )
    assert load.blocked == BlockedCode.FAILURE_BACKOFF and load.not_before == NOW - 2 + 30


def test_mutation_cooldown_holds_a_reversal_of_direction() -> None:
    history = [done(ActionKind.WARM, "h1", "m", at=NOW - 10, sha=SHA_A)]
    result = run(plan(), fleet(host("h1", res("m", sha=SHA_A))), PROFS, history=history)
    drain = find(result, ActionKind.DRAIN, "h1", "m")
    assert drain.blocked == BlockedCode.MUTATION_COOLDOWN
    assert drain.not_before == NOW - 10 + 30


def test_cooldown_does_not_hold_the_next_step_of_the_same_direction() -> None:
    history = [done(ActionKind.LOAD, "h1", "m", at=NOW - 1, sha=SHA_A)]
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", cached=[("m", SHA_A)])),
        PROFS,
        history=history,
    )
    assert find(result, ActionKind.WARM, "h1", "m").executable


def test_a_snapshot_older_than_a_successful_drain_cannot_trigger_a_duplicate() -> None:
    history = [done(ActionKind.DRAIN, "h1", "m", at=NOW - 5, sha=SHA_A)]
    stale_view = fleet(host("h1", res("m", sha=SHA_A), seen=NOW - 10))
    result = run(plan(), stale_view, PROFS, history=history)
    assert find(result, ActionKind.DRAIN, "h1", "m").blocked == BlockedCode.AWAITING_OBSERVATION
    assert result.enqueue == ()


def test_a_newer_heartbeat_still_ready_starts_a_new_drain_lifecycle() -> None:
    history = [done(ActionKind.DRAIN, "h1", "m", at=NOW - 5, sha=SHA_A)]
    result = run(plan(), fleet(host("h1", res("m", sha=SHA_A))), PROFS, history=history)
    drain = find(result, ActionKind.DRAIN, "h1", "m")
    assert drain.executable and drain.attempt == 1


def test_a_newer_heartbeat_draining_again_allows_a_new_unload() -> None:
    history = [done(ActionKind.UNLOAD, "h1", "m", at=NOW - 5, sha=SHA_A)]
    result = run(
        plan(),
        fleet(host("h1", res("m", ResidencyState.DRAINING, sha=SHA_A))),
        PROFS,
        history=history,
    )
    assert find(result, ActionKind.UNLOAD, "h1", "m").executable


def test_an_authenticated_cached_residency_lets_a_fresh_warm_go_at_once() -> None:
    history = [
        done(ActionKind.WARM, "h1", "m", at=NOW - 200, sha=SHA_A),
        done(ActionKind.UNLOAD, "h1", "m", at=NOW - 100, sha=SHA_A),
        done(ActionKind.WARM, "h1", "m", at=NOW - 20, sha=SHA_A, attempt=1),
    ]
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", res("m", ResidencyState.CACHED, sha=SHA_A))),
        PROFS,
        history=history,
    )
    warm = find(result, ActionKind.WARM, "h1", "m")
    assert warm.executable and warm.attempt == 2


def test_without_cached_proof_a_new_warm_waits_the_observation_timeout() -> None:
    history = [done(ActionKind.WARM, "h1", "m", at=NOW - 20, sha=SHA_A)]
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", res("m", ResidencyState.FAILED, sha=SHA_A), cached=[("m", SHA_A)])),
        PROFS,
        history=history,
    )
    warm = find(result, ActionKind.WARM, "h1", "m")
    assert warm.blocked == BlockedCode.OBSERVATION_TIMEOUT
    assert warm.not_before == NOW - 20 + 120


def test_a_failed_warm_keeps_its_backoff_even_with_cached_proof() -> None:
    history = [done(ActionKind.WARM, "h1", "m", FAILED, at=NOW - 5, sha=SHA_A)]
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", res("m", ResidencyState.CACHED, sha=SHA_A))),
        PROFS,
        history=history,
    )
    assert find(result, ActionKind.WARM, "h1", "m").blocked == BlockedCode.FAILURE_BACKOFF
