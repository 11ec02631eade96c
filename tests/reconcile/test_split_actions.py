"""A planned split becomes one fenced ``split_claim`` per stage host."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gridctl.config.schemas import validator
from gridctl.domain import (
    Action,
    ActionKind,
    Artifact,
    DemandClass,
    HostSnapshot,
    ModelProfile,
    ObservedStage,
    Plan,
    ReceiptStatus,
    SplitPlacement,
    SplitPolicy,
    SplitStage,
)
from gridctl.reconcile import (
    ActionKey,
    BlockedCode,
    HistoryEntry,
    PendingAction,
    command_to_json,
    derive_action_id,
)
from gridctl.reconcile.splits import generation_digest, stage_claims
from tests.reconcile.builders import NOW, SHA_A, fleet, host, plan, run

GENERATION = "0" * 16 + ":" + "0" * 20 + ":" + "d" * 16
SPLIT_VERBS = ("load", "warm", "drain", "unload", "split_claim", "split_release")


def big() -> ModelProfile:
    return ModelProfile(
        name="big",
        memory_mb=30000,
        artifact=Artifact(sha256=SHA_A),
        min_replicas=1,
        split=SplitPolicy(max_stages=3, layers=30, native_context=8192),
    )


def split_plan(*stages: tuple[str, int, int], model: str = "big") -> Plan:
    placement = SplitPlacement(
        model_id=model,
        coordinator_host_id=stages[0][0],
        stages=tuple(SplitStage(h, s, e, 1000 * (e - s)) for h, s, e in stages),
        layer_count=30,
        context_length=8192,
        parallel_lanes=4,
        runtime="llama.cpp",
        reason="split: no host holds 30000 MB",
        demand_class=DemandClass.BASELINE,
        priority=50,
    )
    return replace(plan(), splits=(placement,))


THREE = (("a", 0, 10), ("b", 10, 20), ("c", 20, 30))


def stage_host(
    host_id: str,
    *,
    advertises: bool = True,
    seen: float = NOW,
    serving: Iterable[Action] = (),
) -> HostSnapshot:
    """A stage host; ``serving``: the claims whose stage it reports serving."""
    verbs = SPLIT_VERBS if advertises else SPLIT_VERBS[:4]
    stages = tuple(
        ObservedStage(
            model_id=c.model_id,
            coordinator_id=c.coordinator_id,
            coordinator_term=c.coordinator_term,
            stage_index=c.stage_index,
            stage_count=c.stage_count,
            layer_start=c.layer_start,
            layer_end=c.layer_end,
            endpoint=f"{host_id}.test:7000",
        )
        for a in serving
        if a.host_id == host_id and (c := a.split_claim) is not None
    )
    return replace(host(host_id, seen=seen), capabilities=verbs, split_stages=stages or None)


def claims_of(actions: tuple[Action, ...]) -> list[Action]:
    return sorted((a for a in actions if a.kind is ActionKind.SPLIT_CLAIM), key=lambda a: a.host_id)


def wire(action: Action) -> dict[str, object]:
    return command_to_json(
        action,
        plan_generation=GENERATION,
        controller_term=3,
        controller_id="ctl",
        controller_lease_expires_at=NOW + 30,
    )


def test_each_stage_host_is_sent_its_own_stage_of_one_claim() -> None:
    snapshot = fleet(stage_host("a"), stage_host("b"), stage_host("c"))
    result = run(split_plan(*THREE), snapshot, {"big": big()})
    claims = claims_of(result.actions)
    assert [(a.host_id, a.executable, a.blocked) for a in claims] == [
        ("a", True, None),
        ("b", True, None),
        ("c", True, None),
    ]
    assert {p.action.action_id for p in result.enqueue} == {a.action_id for a in claims}
    for action, (host_id, start, end) in zip(claims, THREE, strict=True):
        claim = action.split_claim
        assert claim is not None
        assert (claim.layer_start, claim.layer_end) == (start, end)
        assert claim.coordinator_id == "a" and claim.coordinator_term == 1
        assert claim.lease_until_unix_ms == int(NOW * 1000) + 4 * 3600 * 1000
        assert action.memory_mb == 1000 * (end - start)
        assert action.host_id == host_id


def test_every_serialised_split_command_passes_the_node_schema() -> None:
    snapshot = fleet(stage_host("a"), stage_host("b"), stage_host("c"))
    result = run(split_plan(*THREE), snapshot, {"big": big()})
    check = validator("wire/command.schema.json")
    for action in claims_of(result.actions):
        command = wire(action)
        assert command["kind"] == "split_claim"
        assert list(check.iter_errors(command)) == []
        stage = command["split_claim"]["stage"]  # type: ignore[index]
        assert stage["count"] == 3


def test_a_host_that_does_not_advertise_split_claim_is_held_back_by_name() -> None:
    snapshot = fleet(stage_host("a"), stage_host("b"), stage_host("c", advertises=False))
    result = run(split_plan(*THREE), snapshot, {"big": big()})
    held = {a.host_id: a.blocked for a in claims_of(result.actions)}
    assert held == {"a": None, "b": None, "c": BlockedCode.SPLIT_UNSUPPORTED}
    assert "c" not in {p.action.host_id for p in result.enqueue}


def test_a_pending_claim_is_carried_with_its_first_lease() -> None:
    snapshot = fleet(stage_host("a"), stage_host("b"))
    the_plan = split_plan(("a", 0, 15), ("b", 15, 30))
    first = run(the_plan, snapshot, {"big": big()})
    later = run(the_plan, snapshot, {"big": big()}, pending=first.enqueue, now=NOW + 60)
    assert later.enqueue == ()
    assert claims_of(later.actions) == claims_of(first.actions)


def _succeeded(action: Action, at: float) -> HistoryEntry:
    return HistoryEntry(
        action_id=action.action_id,
        kind=action.kind,
        host_id=action.host_id,
        model_id=action.model_id,
        artifact_sha256=action.artifact_sha256,
        attempt=action.attempt,
        status=ReceiptStatus.SUCCEEDED,
        finished_at=at,
        split_claim=action.split_claim,
    )


def test_a_claim_that_succeeded_is_not_sent_again_until_the_split_changes() -> None:
    two = split_plan(("a", 0, 15), ("b", 15, 30))
    first = run(two, fleet(*(stage_host(h) for h in "abc")), {"big": big()})
    hosts = [stage_host(h, seen=NOW + 59, serving=first.actions) for h in "abc"]
    snapshot = fleet(*hosts, now=NOW + 60)
    history = [_succeeded(a, NOW + 1) for a in claims_of(first.actions)]
    again = run(two, snapshot, {"big": big()}, history=history, now=NOW + 60)
    assert claims_of(again.actions) == []
    moved = run(split_plan(*THREE), snapshot, {"big": big()}, history=history, now=NOW + 60)
    assert [a.host_id for a in claims_of(moved.actions) if a.executable] == ["a", "b", "c"]


def test_an_accepted_claim_is_renewed_once_half_its_lease_has_passed() -> None:
    hosts = [stage_host(h, seen=NOW + 59) for h in "ab"]
    two = split_plan(("a", 0, 15), ("b", 15, 30))
    first = run(two, fleet(*hosts, now=NOW + 60), {"big": big()})
    history = [_succeeded(a, NOW + 1) for a in claims_of(first.actions)]
    half = 2 * 3600
    before = NOW + half - 1
    quiet = run(
        two,
        fleet(*(stage_host(h, seen=before, serving=first.actions) for h in "ab"), now=before),
        {"big": big()},
        history=history,
        now=before,
    )
    assert claims_of(quiet.actions) == []
    due = NOW + half
    renewed = run(
        two,
        fleet(*(stage_host(h, seen=due, serving=first.actions) for h in "ab"), now=due),
        {"big": big()},
        history=history,
        now=due,
    )
    claims = claims_of(renewed.actions)
    assert [(a.host_id, a.executable) for a in claims] == [("a", True), ("b", True)]
    for old, new in zip(claims_of(first.actions), claims, strict=True):
        assert new.split_claim is not None and old.split_claim is not None
        assert new.split_claim.lease_until_unix_ms == int(due * 1000) + 4 * 3600 * 1000
        # the same claim (term, topology, run) with a fresh lease: a refresh on the stage
        assert replace(new.split_claim, lease_until_unix_ms=0) == replace(
            old.split_claim, lease_until_unix_ms=0
        )
        assert new.action_id != old.action_id and new.attempt == old.attempt + 1
        assert new.reason.startswith("renew the lease of stage")


def test_a_stage_no_longer_served_on_a_living_host_is_claimed_under_the_next_term() -> None:
    two = split_plan(("a", 0, 15), ("b", 15, 30))
    first = run(two, fleet(*(stage_host(h) for h in "ab")), {"big": big()})
    history = [_succeeded(a, NOW + 1) for a in claims_of(first.actions)]
    # b's stage server died: b heartbeats (after the receipt) without its stage
    hosts = [stage_host("a", seen=NOW + 59, serving=first.actions), stage_host("b", seen=NOW + 59)]
    result = run(two, fleet(*hosts, now=NOW + 60), {"big": big()}, history=history, now=NOW + 60)
    terms = [
        (a.host_id, a.split_claim.coordinator_term)
        for a in claims_of(result.actions)
        if a.split_claim
    ]
    assert terms == [("a", 2), ("b", 2)]
    # no heartbeat since the receipt: nothing is judged yet
    early = [stage_host("a", seen=NOW + 1, serving=first.actions), stage_host("b", seen=NOW + 1)]
    result = run(two, fleet(*early, now=NOW + 2), {"big": big()}, history=history, now=NOW + 2)
    assert claims_of(result.actions) == []
    # a host not heard from lately is not judged here (the planner drops it when stale)
    stale_b = [stage_host("a", seen=NOW + 59, serving=first.actions), stage_host("b", seen=NOW)]
    result = run(two, fleet(*stale_b, now=NOW + 60), {"big": big()}, history=history, now=NOW + 60)
    assert claims_of(result.actions) == []  # a silent host is the planner's to drop


def test_a_re_formed_split_claims_every_stage_under_the_next_term() -> None:
    hosts = [stage_host(h, seen=NOW + 59) for h in "abc"]
    snapshot = fleet(*hosts, now=NOW + 60)
    first = run(split_plan(("a", 0, 15), ("b", 15, 30)), snapshot, {"big": big()})
    history = [_succeeded(a, NOW + 1) for a in claims_of(first.actions)]
    moved = run(split_plan(*THREE), snapshot, {"big": big()}, history=history, now=NOW + 60)
    claims = claims_of(moved.actions)
    terms = [(a.host_id, a.split_claim.coordinator_term) for a in claims if a.split_claim]
    assert terms == [("a", 2), ("b", 2), ("c", 2)]
    assert {a.action_id for a in claims}.isdisjoint(a.action_id for a in claims_of(first.actions))
    # the same split planned again keeps its term: nothing new for it
    after = [*history, *(_succeeded(a, NOW + 61) for a in claims)]
    again = run(split_plan(*THREE), snapshot, {"big": big()}, history=after, now=NOW + 120)
    assert claims_of(again.actions) == []


def releases_of(actions: tuple[Action, ...]) -> list[Action]:
    return sorted(
        (a for a in actions if a.kind is ActionKind.SPLIT_RELEASE), key=lambda a: a.host_id
    )


def test_a_host_the_split_left_is_sent_a_stop_of_its_accepted_claim() -> None:
    hosts = [stage_host(h, seen=NOW + 59) for h in "abc"]
    snapshot = fleet(*hosts, now=NOW + 60)
    first = run(split_plan(*THREE), snapshot, {"big": big()})
    history = [_succeeded(a, NOW + 1) for a in claims_of(first.actions)]
    shrunk = run(
        split_plan(("a", 0, 15), ("b", 15, 30)),
        snapshot,
        {"big": big()},
        history=history,
        now=NOW + 60,
    )
    (release,) = releases_of(shrunk.actions)
    assert (release.host_id, release.executable) == ("c", True)
    command = wire(release)
    assert list(validator("wire/command.schema.json").iter_errors(command)) == []
    assert command["split_stop"] == {
        "model_id": "big",
        "package_ref": SHA_A,
        "manifest_sha256": SHA_A,
        "coordinator_id": "a",
        "coordinator_term": 1,
    }
    assert "split_claim" not in command
    stopped = [*history, _succeeded(release, NOW + 61)]
    later = run(
        split_plan(("a", 0, 15), ("b", 15, 30)),
        snapshot,
        {"big": big()},
        history=stopped,
        now=NOW + 120,
    )
    assert releases_of(later.actions) == []


def test_a_split_that_left_the_plan_stops_every_accepted_stage() -> None:
    hosts = [stage_host(h, seen=NOW + 59) for h in "abc"]
    snapshot = fleet(*hosts, now=NOW + 60)
    first = run(split_plan(*THREE), snapshot, {"big": big()})
    history = [_succeeded(a, NOW + 1) for a in claims_of(first.actions)]
    history[2] = replace(history[2], status=ReceiptStatus.REJECTED)  # c never accepted
    gone = run(plan(), snapshot, {"big": big()}, history=history, now=NOW + 60)
    assert [(a.host_id, a.executable) for a in releases_of(gone.actions)] == [
        ("a", True),
        ("b", True),
    ]
    retired = run(plan(), snapshot, {}, history=history, now=NOW + 60)
    assert [a.host_id for a in releases_of(retired.actions)] == ["a", "b"]


def test_a_split_no_longer_planned_cancels_its_undelivered_claims() -> None:
    snapshot = fleet(stage_host("a"), stage_host("b"))
    first = run(split_plan(("a", 0, 15), ("b", 15, 30)), snapshot, {"big": big()})
    later = run(plan(), snapshot, {"big": big()}, pending=first.enqueue)
    assert {c.action_id for c in later.cancellations} == {p.action_id for p in first.enqueue}


def test_other_kinds_keep_their_ids_and_wire_shape() -> None:
    key = ActionKey(ActionKind.LOAD, "a", "m", SHA_A)
    assert derive_action_id(key, 0) == derive_action_id(
        ActionKey(ActionKind.LOAD, "a", "m", SHA_A), 0
    )
    load = Action(derive_action_id(key, 0), ActionKind.LOAD, "a", "m", artifact_sha256=SHA_A)
    assert "split_claim" not in wire(load) and "split_stop" not in wire(load)
    assert ActionKind.SPLIT_RELEASE.destructive and not ActionKind.SPLIT_CLAIM.destructive


@given(st.integers(1, 1000), st.floats(0, 4e9, allow_nan=False))
def test_the_action_key_is_the_generation(term: int, now: float) -> None:
    the_plan = split_plan(("a", 0, 15), ("b", 15, 30))
    placement = the_plan.splits[0]
    claims = stage_claims(placement, big(), term, now)
    digest = generation_digest(claims[0].topology_hash, claims[0].manifest_sha256, term)
    assert len(digest) == 64
    assert claims[0].run_id == f"run-{digest[:32]}"


def test_pending_split_claims_reach_no_other_host() -> None:
    snapshot = fleet(stage_host("a"), stage_host("b"))
    result = run(split_plan(("a", 0, 15), ("b", 15, 30)), snapshot, {"big": big()})
    assert all(isinstance(p, PendingAction) for p in result.enqueue)
    for held in result.enqueue:
        claim = held.action.split_claim
        assert claim is not None
        assert claim.stage_index == (0 if held.action.host_id == "a" else 1)
