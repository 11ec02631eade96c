"""The delivery gate, rule by rule, on both sides of each boundary (hypothesis properties).

Each property draws the facts of one poll at random, then sets up one rule's
boundary and checks that the gate withholds on one side, for that rule's named
reason, and lets the action through on the other (all else equal).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gridctl.domain import (
    Action,
    ActionKind,
    CachedArtifact,
    HostResources,
    HostSnapshot,
    Mode,
    Plan,
    Preemption,
)
from gridctl.reconcile import PendingAction
from gridctl.tick import DeliveryFacts, RouteLease, Withheld, delivery_gate, routes_from_hosts

NOW = 1_800_000_000.0
MARGIN = 30.0
HOSTS = ("h1", "h2", "h3", "h4")
DESTRUCTIVE = (ActionKind.DRAIN, ActionKind.UNLOAD)


def plan(model: str, target: int, preempted: tuple[str, ...] = ()) -> Plan:
    return Plan(
        input_digest="d",
        now=NOW,
        targets=((model, target),),
        assignments=(),
        preemptions=tuple(Preemption(h, model, "other", "priority") for h in preempted),
        unsatisfied=(),
        explanations=(),
    )


def facts(**kw: object) -> DeliveryFacts:
    base = DeliveryFacts(
        now=NOW,
        mode=Mode.AUTOMATIC,
        issuing=True,
        plan=plan("m", 1),
        min_route_lease_seconds=MARGIN,
    )
    return replace(base, **kw)  # type: ignore[arg-type]


def cache_host(sha: str = "s") -> HostSnapshot:
    """A managed host with an evict actuator and an unused predictive download of ``m``."""
    entry = CachedArtifact("m", sha, provenance="predictive", cached_at=NOW - 3600)
    return HostSnapshot(
        "h1", HostResources(capacity_mb=8000), cached=(entry,), capabilities=("evict",)
    )


def held(kind: ActionKind, host: str = "h1", **kw: object) -> PendingAction:
    action = Action("a1", kind, host, "m", executable=True, artifact_sha256="s")
    return PendingAction(replace(action, **kw))  # type: ignore[arg-type]


kinds = st.sampled_from(tuple(ActionKind))
leases = st.floats(min_value=0.0, max_value=120.0, allow_nan=False)


@given(kinds, st.booleans())
def test_nothing_leaves_without_authority(kind: ActionKind, delivered: bool) -> None:
    pending = replace(held(kind), delivered=delivered)
    assert delivery_gate(pending, facts(issuing=False)).withheld is Withheld.NO_AUTHORITY
    assert delivery_gate(pending, facts(issuing=True)).withheld is not Withheld.NO_AUTHORITY


@given(kinds, st.text(min_size=1, max_size=20))
def test_a_recommendation_never_leaves(kind: ActionKind, why: str) -> None:
    blocked = held(kind, executable=False, blocked=why)
    assert delivery_gate(blocked, facts()).withheld is Withheld.NOT_EXECUTABLE
    assert delivery_gate(held(kind), facts()).withheld is not Withheld.NOT_EXECUTABLE


@given(kinds, st.sampled_from((Mode.OBSERVE, Mode.RECOMMEND)))
def test_outside_automatic_only_an_applied_plan_runs(kind: ActionKind, mode: Mode) -> None:
    pending = held(kind)
    refused = delivery_gate(pending, facts(mode=mode))
    assert refused.withheld is Withheld.NOT_APPROVED
    approved = delivery_gate(pending, facts(mode=mode, approved=frozenset({"a1"})))
    assert approved.withheld is not Withheld.NOT_APPROVED
    assert delivery_gate(pending, facts(mode=Mode.AUTOMATIC)).withheld is not Withheld.NOT_APPROVED


@given(kinds, st.floats(min_value=0.001, max_value=3600.0))
def test_not_before_holds_until_it_passes(kind: ActionKind, wait: float) -> None:
    later = held(kind, not_before=NOW + wait)
    assert delivery_gate(later, facts()).withheld is Withheld.NOT_BEFORE
    assert delivery_gate(later, facts(now=NOW + wait)).withheld is not Withheld.NOT_BEFORE


@given(
    st.sampled_from(DESTRUCTIVE),
    st.integers(min_value=1, max_value=3),
    st.lists(leases, min_size=0, max_size=3),
)
def test_a_serving_replica_leaves_only_with_enough_live_replacements(
    kind: ActionKind, target: int, others: list[float]
) -> None:
    routes = {
        "m": (
            RouteLease("h1", 60.0),
            *(RouteLease(h, left) for h, left in zip(HOSTS[1:], others, strict=False)),
        )
    }
    live = sum(1 for left in others if left > MARGIN)
    verdict = delivery_gate(held(kind), facts(plan=plan("m", target), routes=routes))
    if live >= target:
        assert verdict.deliver, verdict
    else:
        assert verdict.withheld is Withheld.LAST_REPLICA
        assert f"{live} replacement route(s)" in verdict.reason
    # the plan's explicit preemption victim drains first, whatever the replacements
    staged = facts(plan=plan("m", target, preempted=("h1",)), routes=routes)
    assert delivery_gate(held(kind), staged).deliver
    # a replica that is not routable takes no capacity away
    elsewhere = {"m": tuple(r for r in routes["m"] if r.host_id != "h1")}
    assert delivery_gate(held(kind), facts(plan=plan("m", target), routes=elsewhere)).deliver
    # once delivered, the command is re-sent as it is
    sent = replace(held(kind), delivered=True)
    assert delivery_gate(sent, facts(plan=plan("m", target), routes=routes)).deliver


@given(leases)
def test_the_lease_margin_is_strict(left: float) -> None:
    routes = {"m": (RouteLease("h1", 60.0), RouteLease("h2", left))}
    verdict = delivery_gate(held(ActionKind.DRAIN), facts(routes=routes))
    assert verdict.deliver is (left > MARGIN)


@given(st.sampled_from((*DESTRUCTIVE, ActionKind.EVICT)), st.booleans())
def test_destructive_work_waits_for_the_current_safety_revision(
    kind: ActionKind, delivered: bool
) -> None:
    cached = cache_host()
    pending = replace(held(kind), delivered=delivered)
    behind = facts(safety_current=False, hosts={"h1": cached})
    verdict = delivery_gate(pending, behind)
    if delivered:
        assert verdict.deliver  # already with its node
    else:
        assert verdict.withheld is Withheld.SAFETY_REVISION
    assert delivery_gate(pending, replace(behind, safety_current=True)).deliver
    for constructive in (ActionKind.LOAD, ActionKind.WARM):
        assert delivery_gate(held(constructive), behind).deliver


@given(st.booleans(), st.booleans())
def test_an_eviction_is_revalidated_on_the_latest_report(reported: bool, known: bool) -> None:
    host = cache_host("s" if reported else "other")
    verdict = delivery_gate(held(ActionKind.EVICT), facts(hosts={"h1": host} if known else {}))
    if reported and known:
        assert verdict.deliver, verdict
    else:
        assert verdict.withheld is Withheld.EVICTION_INVALID


@given(st.lists(st.tuples(st.sampled_from(HOSTS), st.floats(0.0, 200.0)), max_size=4))
def test_routes_from_heartbeats_follow_the_lease(seen: list[tuple[str, float]]) -> None:
    from gridctl.domain import Residency, ResidencyState

    hosts = [
        HostSnapshot(
            h,
            HostResources(capacity_mb=8000),
            last_heartbeat=NOW - age,
            residencies=(Residency("m", 100, ResidencyState.READY),),
        )
        for h, age in dict(seen).items()
    ]
    routes = routes_from_hosts(hosts, NOW, 60.0)
    expected = sorted(h.host_id for h in hosts if NOW - (h.last_heartbeat or 0) <= 60.0)
    assert [r.host_id for r in routes.get("m", ())] == expected
    for r in routes.get("m", ()):
        assert 0.0 <= r.lease_left <= 60.0
