"""The mutation governor: limits, fanout, service order and lower-class withdrawal."""

from __future__ import annotations

from gridctl.domain import ActionKind, DemandClass, Preemption, ResidencyState
from gridctl.reconcile import BlockedCode, CancelReason, delivery_order

from .builders import (
    NOW,
    SHA_A,
    SHA_B,
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
    summary,
)

INFERRED = DemandClass.INFERRED
DIRECT = DemandClass.DIRECT


def _warm_only(*models: str, hosts: int = 4) -> list:  # type: ignore[type-arg]
    return [host(f"h{i}", cached=[(m, None) for m in models]) for i in range(1, hosts + 1)]


def test_global_limit() -> None:
    profs = profiles(profile("a"), profile("b"), profile("c"))
    result = run(
        plan(assign("a", "h1"), assign("b", "h2"), assign("c", "h3")),
        fleet(*_warm_only("a", "b", "c")),
        profs,
        pol=policy(max_concurrent_mutations=2),
    )
    assert [a.executable for a in result.actions].count(True) == 2
    assert find(result, ActionKind.WARM, "h3", "c").blocked == BlockedCode.MUTATION_GOVERNOR


def test_per_host_limit_and_pending_work_holds_slots() -> None:
    profs = profiles(profile("a"), profile("b"))
    result = run(plan(assign("a", "h1"), assign("b", "h1")), fleet(*_warm_only("a", "b")), profs)
    assert summary(result) == [
        ("warm", "a", "h1", True, None),
        ("warm", "b", "h1", False, "host_governor"),
    ]
    busy = pending_of(ActionKind.DRAIN, "h2", "zz", delivered=True, cls=None)
    result = run(
        plan(assign("a", "h2")),
        fleet(*_warm_only("a", "b")),
        profs,
        pending=[busy],
    )
    assert find(result, ActionKind.WARM, "h2", "a").blocked == BlockedCode.HOST_GOVERNOR


def test_exact_artifact_fanout_counts_pending_and_running_loads() -> None:
    profs = profiles(profile("m", sha=SHA_A), profile("other", sha=SHA_B))
    # h0 holds a verified copy of m (so loads fan out from it) and of other's artifact
    holder = host("h0", cached=[("m", SHA_A), ("other", SHA_B)])
    hosts = [holder, *(host(f"h{i}") for i in range(1, 6))]
    the_plan = plan(*(assign("m", f"h{i}") for i in range(1, 5)), assign("other", "h5"))
    result = run(the_plan, fleet(*hosts), profs)
    loads = [a for a in result.actions if a.kind is ActionKind.LOAD and a.model_id == "m"]
    assert [a.executable for a in loads] == [True, True, False, False]
    assert {a.blocked for a in loads[2:]} == {BlockedCode.ARTIFACT_FANOUT}
    # the held-back load defers its warm rather than letting it start out of order
    assert find(result, ActionKind.WARM, "h3", "m").blocked == BlockedCode.DEPENDENCY_DEFERRED
    # a different artifact uses the remaining global budget
    assert find(result, ActionKind.LOAD, "h5", "other").executable

    pending = [pending_of(ActionKind.LOAD, "h1", "m", sha=SHA_A, delivered=True)]
    running = host("h9", res("m", ResidencyState.LOADING, sha=SHA_A))
    result = run(the_plan, fleet(*hosts, running), profs, pending=pending)
    new_loads = [p.action for p in result.enqueue if p.action.kind is ActionKind.LOAD]
    assert [a.model_id for a in new_loads] == ["other"]


def test_baseline_and_direct_demand_go_before_inferred_prewarming() -> None:
    profs = profiles(profile("guess"), profile("real"))
    result = run(
        plan(assign("guess", "h1", cls=INFERRED), assign("real", "h2", cls=DIRECT)),
        fleet(*_warm_only("guess", "real")),
        profs,
        pol=policy(max_concurrent_mutations=1),
    )
    assert find(result, ActionKind.WARM, "h2", "real").executable
    assert find(result, ActionKind.WARM, "h1", "guess").blocked == BlockedCode.MUTATION_GOVERNOR


def test_slots_fill_one_replica_round_per_model() -> None:
    profs = profiles(profile("a"), profile("b"))
    result = run(
        plan(assign("a", "h1"), assign("a", "h2"), assign("b", "h3")),
        fleet(*_warm_only("a", "b")),
        profs,
        pol=policy(max_concurrent_mutations=2),
    )
    assert find(result, ActionKind.WARM, "h3", "b").executable
    assert [find(result, ActionKind.WARM, h, "a").executable for h in ("h1", "h2")] == [True, False]


def test_cached_model_goes_before_a_download_at_equal_urgency() -> None:
    profs = profiles(profile("cold", sha=SHA_A), profile("warmish", sha=SHA_B))
    result = run(
        plan(assign("cold", "h1"), assign("warmish", "h2")),
        fleet(host("h1"), host("h2", cached=[("warmish", SHA_B)])),
        profs,
        pol=policy(max_concurrent_mutations=1),
    )
    assert result.actions[0].model_id == "warmish" and result.actions[0].executable
    assert find(result, ActionKind.LOAD, "h1", "cold").blocked == BlockedCode.MUTATION_GOVERNOR


def test_preemption_drain_inherits_the_beneficiary_priority_and_cleanup_waits() -> None:
    profs = profiles(
        profile("low", priority=10), profile("mid", priority=50), profile("vip", priority=90)
    )
    the_plan = plan(
        assign("mid", "h2", priority=50),
        preemptions=[Preemption("h1", "low", "vip", "capacity for vip")],
        targets={"vip": 1, "mid": 1, "low": 0},
    )
    snapshot = fleet(
        host("h1", res("low")), host("h2", cached=[("mid", None)]), host("h3", res("mid"))
    )
    result = run(the_plan, snapshot, profs, pol=policy(max_concurrent_mutations=1))
    drain = find(result, ActionKind.DRAIN, "h1", "low")
    assert drain.executable and drain.priority == 90
    assert find(result, ActionKind.WARM, "h2", "mid").blocked == BlockedCode.MUTATION_GOVERNOR
    # routine cleanup (mid on h3 is not in the plan) stays behind availability work
    kinds = [(a.kind.value, a.host_id) for a in result.actions]
    assert kinds.index(("warm", "h2")) < kinds.index(("drain", "h3"))


def test_a_preemption_wave_releases_drained_then_idle_then_busy_victims() -> None:
    profs = profiles(
        profile("v1", priority=1),
        profile("v2", priority=1),
        profile("v3", priority=1),
        profile("vip", priority=90),
    )
    the_plan = plan(
        preemptions=[
            Preemption("h1", "v1", "vip", "x"),
            Preemption("h2", "v2", "vip", "x"),
            Preemption("h3", "v3", "vip", "x"),
        ],
        targets={"vip": 3},
    )
    snapshot = fleet(
        host("h1", res("v1", active=3)),
        host("h2", res("v2", ResidencyState.DRAINING)),
        host("h3", res("v3")),
    )
    result = run(the_plan, snapshot, profs)
    assert [(a.kind.value, a.model_id) for a in result.actions] == [
        ("unload", "v2"),
        ("drain", "v3"),
        ("drain", "v1"),
    ]


def test_a_higher_class_withdraws_an_undelivered_lower_class_command() -> None:
    profs = profiles(profile("guess"), profile("real"))
    low = pending_of(ActionKind.WARM, "h1", "guess", cls=INFERRED)
    result = run(
        plan(assign("guess", "h1", cls=INFERRED), assign("real", "h1", cls=DIRECT)),
        fleet(*_warm_only("guess", "real")),
        profs,
        pending=[low],
    )
    assert [(c.action_id, c.reason) for c in result.cancellations] == [
        (low.action_id, CancelReason.WITHDRAWN_FOR_HIGHER_CLASS)
    ]
    assert find(result, ActionKind.WARM, "h1", "real").executable


def test_a_delivered_lower_class_command_keeps_its_slot() -> None:
    profs = profiles(profile("guess"), profile("real"))
    low = pending_of(ActionKind.WARM, "h1", "guess", cls=INFERRED, delivered=True)
    result = run(
        plan(assign("guess", "h1", cls=INFERRED), assign("real", "h1", cls=DIRECT)),
        fleet(*_warm_only("guess", "real")),
        profs,
        pending=[low],
    )
    assert result.cancellations == ()
    assert find(result, ActionKind.WARM, "h1", "real").blocked == BlockedCode.HOST_GOVERNOR


def test_equal_class_work_is_not_churned() -> None:
    profs = profiles(profile("a"), profile("b"))
    queued = pending_of(ActionKind.WARM, "h1", "b", cls=DIRECT)
    result = run(
        plan(assign("a", "h1", cls=DIRECT), assign("b", "h1", cls=DIRECT)),
        fleet(*_warm_only("a", "b")),
        profs,
        pending=[queued],
    )
    assert result.cancellations == ()
    assert find(result, ActionKind.WARM, "h1", "a").blocked == BlockedCode.HOST_GOVERNOR


def test_a_leaf_is_withdrawn_before_its_prerequisite() -> None:
    profs = profiles(profile("guess", sha=SHA_A), profile("real"))
    load = pending_of(ActionKind.LOAD, "h1", "guess", sha=SHA_A, cls=INFERRED)
    warm = pending_of(
        ActionKind.WARM, "h1", "guess", sha=SHA_A, cls=INFERRED, depends_on=(load.action_id,)
    )
    result = run(
        plan(assign("guess", "h1", cls=INFERRED), assign("real", "h2", cls=DIRECT)),
        fleet(host("h1"), host("h2", cached=[("real", None)])),
        profs,
        pending=[load, warm],
        pol=policy(max_concurrent_mutations=2, max_concurrent_mutations_per_host=2),
    )
    assert [c.action_id for c in result.cancellations] == [warm.action_id]
    assert find(result, ActionKind.WARM, "h2", "real").executable


def test_delivery_preserves_service_order_with_fifo_inside_a_class() -> None:
    old_low = pending_of(ActionKind.WARM, "h1", "a", cls=INFERRED, queued=1)
    new_high = pending_of(ActionKind.WARM, "h1", "b", cls=DIRECT, queued=5)
    older_high = pending_of(ActionKind.WARM, "h1", "c", cls=DIRECT, queued=3)
    order = delivery_order([old_low, new_high, older_high])
    assert [p.action.model_id for p in order] == ["c", "b", "a"]


def test_fanout_counts_replicas_not_hosts() -> None:
    # two models share one artifact; one is already loading on the host the other wants
    profs = profiles(profile("m", sha=SHA_A), profile("twin", sha=SHA_A))
    result = run(
        plan(assign("m", "h1")),
        fleet(host("h1", res("twin", ResidencyState.LOADING, sha=SHA_A))),
        profs,
        pol=policy(artifact_fanout=1),
    )
    assert find(result, ActionKind.LOAD, "h1", "m").blocked == BlockedCode.ARTIFACT_FANOUT


def test_loads_without_a_declared_digest_are_not_fanout_limited() -> None:
    profs = profiles(profile("plain"))
    result = run(
        plan(*(assign("plain", f"h{i}") for i in range(1, 4))),
        fleet(*(host(f"h{i}") for i in range(1, 4))),
        profs,
        pol=policy(artifact_fanout=1),
    )
    loads = [a for a in result.actions if a.kind is ActionKind.LOAD]
    assert len(loads) == 3 and all(a.executable for a in loads)


def test_a_carried_action_ranks_by_the_work_it_serves_now() -> None:
    # The warm of a replica was queued while the replica was inferred demand; the replica
    # is pinned now. Its load must not withdraw that warm as lower-class work (and the
    # rerun tick then re-enqueue the warm): the inferred load of another model goes.
    profs = profiles(profile("a", sha=SHA_A), profile("b", sha=SHA_B))
    warm = pending_of(ActionKind.WARM, "h1", "a", sha=SHA_A, cls=INFERRED)
    other = pending_of(ActionKind.LOAD, "h2", "b", sha=SHA_B, cls=INFERRED, queued=1)
    the_plan = plan(assign("a", "h1", cls=DemandClass.PINNED), assign("b", "h2", cls=INFERRED))
    snapshot = fleet(host("h1"), host("h2"))
    pol = policy(max_concurrent_mutations=2, max_concurrent_mutations_per_host=2)
    first = run(the_plan, snapshot, profs, pending=[warm, other], pol=pol)
    assert [c.action_id for c in first.cancellations] == [other.action_id]
    assert find(first, ActionKind.LOAD, "h1", "a").executable
    assert find(first, ActionKind.WARM, "h1", "a").action_id == warm.action_id
    queue = [warm, *first.enqueue]
    second = run(the_plan, snapshot, profs, pending=queue, pol=pol, now=NOW + 1)
    assert second.enqueue == () and second.cancellations == ()
