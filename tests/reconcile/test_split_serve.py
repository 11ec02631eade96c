"""A split's coordinator engine: warmed after the startup quorum with every stage
serving, stopped when the split is not whole or not planned any more."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from gridctl.config.schemas import validator
from gridctl.domain import (
    Action,
    ActionKind,
    HostSnapshot,
    ObservedStage,
    Plan,
    ResidencyState,
    SplitServe,
    SplitServeStage,
)
from gridctl.reconcile.splits import stage_claims
from gridctl.split import quorum
from tests.reconcile.builders import NOW, SHA_A, fleet, plan, res, run
from tests.reconcile.test_split_actions import (
    THREE,
    _succeeded,
    big,
    claims_of,
    split_plan,
    stage_host,
    wire,
)

LATER = NOW + 60


def serving(host_id: str, index: int, *, term: int = 1, stages=THREE) -> ObservedStage:  # type: ignore[no-untyped-def]
    _, start, end = stages[index]
    return ObservedStage(
        model_id="big",
        coordinator_id=stages[0][0],
        coordinator_term=term,
        stage_index=index,
        stage_count=len(stages),
        layer_start=start,
        layer_end=end,
        endpoint=f"10.0.0.{index + 1}:{7000 + index}",
    )


def staged(host_id: str, *stages: ObservedStage, residencies=()) -> HostSnapshot:  # type: ignore[no-untyped-def]
    return replace(
        stage_host(host_id, seen=LATER - 1),
        split_stages=tuple(stages) or None,
        residencies=tuple(residencies),
    )


def accepted_history(the_plan: Plan, hosts: str = "abc") -> list:  # type: ignore[type-arg]
    """Every stage host of ``hosts`` accepted the first generation's claim."""
    snapshot = fleet(*(stage_host(h) for h in "abc"))
    first = run(the_plan, snapshot, {"big": big()})  # at NOW
    return [_succeeded(a, NOW + 1) for a in claims_of(first.actions) if a.host_id in hosts]


def later(*args, **kwargs):  # type: ignore[no-untyped-def]
    return run(*args, now=LATER, **kwargs)


def coordinator_steps(actions: tuple[Action, ...]) -> list[Action]:
    return [
        a
        for a in actions
        if a.host_id == "a" and a.model_id == "big" and a.kind in (ActionKind.LOAD, ActionKind.WARM)
    ]


def whole_fleet(**residencies: object) -> tuple[HostSnapshot, ...]:
    return (
        staged("a", serving("a", 0), residencies=residencies.get("a", ())),
        staged("b", serving("b", 1)),
        staged("c", serving("c", 2)),
    )


def test_the_coordinator_warms_once_the_quorum_accepted_and_every_stage_serves() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    result = later(the_plan, fleet(*whole_fleet(), now=LATER), {"big": big()}, history=history)
    load, warm = coordinator_steps(result.actions)
    assert (load.kind, warm.kind) == (ActionKind.LOAD, ActionKind.WARM)
    assert warm.depends_on == (load.action_id,)
    assert load.memory_mb == warm.memory_mb == 0
    assert warm.split_serve == SplitServe(
        model_id="big",
        package_ref=SHA_A,
        manifest_sha256=SHA_A,
        coordinator_id="a",
        coordinator_term=1,
        topology_id=stage_claims(the_plan.splits[0], big(), 1, NOW)[0].topology_id,
        run_id=stage_claims(the_plan.splits[0], big(), 1, NOW)[0].run_id,
        stages=(
            SplitServeStage("a", "10.0.0.1:7000", 0, 10),
            SplitServeStage("b", "10.0.0.2:7001", 10, 20),
            SplitServeStage("c", "10.0.0.3:7002", 20, 30),
        ),
    )
    command = wire(warm)
    assert list(validator("wire/command.schema.json").iter_errors(command)) == []
    assert command["split_serve"]["stages"][1] == {  # type: ignore[index]
        "host_id": "b",
        "endpoint": "10.0.0.2:7001",
        "layer_start": 10,
        "layer_end": 20,
    }
    assert "split_serve" not in wire(load)


def test_no_warm_without_the_startup_quorum() -> None:
    the_plan = split_plan(*THREE)
    assert quorum(3) == 2
    one = accepted_history(the_plan, hosts="a")
    result = later(the_plan, fleet(*whole_fleet(), now=LATER), {"big": big()}, history=one)
    assert coordinator_steps(result.actions) == []
    two = accepted_history(the_plan, hosts="ab")
    result = later(the_plan, fleet(*whole_fleet(), now=LATER), {"big": big()}, history=two)
    assert [a.kind for a in coordinator_steps(result.actions)] == [ActionKind.LOAD, ActionKind.WARM]


def test_no_warm_while_a_stage_is_not_reported_serving_the_planned_term() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    missing = (staged("a", serving("a", 0)), staged("b", serving("b", 1)), staged("c"))
    result = later(the_plan, fleet(*missing, now=LATER), {"big": big()}, history=history)
    assert coordinator_steps(result.actions) == []
    old_term = (
        staged("a", serving("a", 0)),
        staged("b", serving("b", 1)),
        staged("c", serving("c", 2, term=7)),
    )
    result = later(the_plan, fleet(*old_term, now=LATER), {"big": big()}, history=history)
    assert coordinator_steps(result.actions) == []


def test_a_cached_artifact_needs_no_load_and_a_serving_coordinator_nothing() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    cached = res("big", ResidencyState.CACHED, sha=SHA_A)
    hosts = whole_fleet(a=(cached,))
    result = later(the_plan, fleet(*hosts, now=LATER), {"big": big()}, history=history)
    assert [a.kind for a in coordinator_steps(result.actions)] == [ActionKind.WARM]
    ready = replace(res("big", ResidencyState.READY, sha=SHA_A), split_term=1)
    hosts = whole_fleet(a=(ready,))
    result = later(the_plan, fleet(*hosts, now=LATER), {"big": big()}, history=history)
    assert [
        a
        for a in result.actions
        if a.model_id == "big" and a.host_id == "a" and a.kind is not ActionKind.SPLIT_CLAIM
    ] == []


def _stops(result_actions: tuple[Action, ...]) -> list[tuple[str, str]]:
    return [
        (a.kind.value, a.reason)
        for a in result_actions
        if a.host_id == "a" and a.kind in (ActionKind.DRAIN, ActionKind.UNLOAD)
    ]


def test_a_whole_planned_split_keeps_its_coordinator_engine() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    ready = replace(res("big", ResidencyState.READY, sha=SHA_A), split_term=1)
    result = later(
        the_plan, fleet(*whole_fleet(a=(ready,)), now=LATER), {"big": big()}, history=history
    )
    assert _stops(result.actions) == []


def test_a_lost_stage_stops_the_coordinator_engine() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    ready = replace(res("big", ResidencyState.READY, sha=SHA_A), split_term=1)
    silent_c = replace(staged("c"), last_heartbeat=NOW)  # not heard from for 60 s
    hosts = (
        staged("a", serving("a", 0), residencies=(ready,)),
        staged("b", serving("b", 1)),
        silent_c,
    )
    result = later(the_plan, fleet(*hosts, now=LATER), {"big": big()}, history=history)
    ((kind, reason),) = _stops(result.actions)
    assert kind == "drain" and "stage 3 of 3 on c is not serving term 1" in reason
    (drain,) = [a for a in result.actions if a.kind is ActionKind.DRAIN]
    assert drain.executable and drain.blocked is None
    draining = replace(ready, state=ResidencyState.DRAINING)
    hosts = (staged("a", serving("a", 0), residencies=(draining,)), *hosts[1:])
    result = later(the_plan, fleet(*hosts, now=LATER), {"big": big()}, history=history)
    assert [k for k, _ in _stops(result.actions)] == ["unload"]


def test_a_stage_server_gone_on_a_living_host_re_forms_the_split_under_the_next_term() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    ready = replace(res("big", ResidencyState.READY, sha=SHA_A), split_term=1)
    hosts = (
        staged("a", serving("a", 0), residencies=(ready,)),
        staged("b", serving("b", 1)),
        staged("c"),  # heartbeats, but its stage is gone
    )
    result = later(the_plan, fleet(*hosts, now=LATER), {"big": big()}, history=history)
    ((kind, reason),) = _stops(result.actions)
    assert kind == "drain" and "re-formed under term 2 (was 1)" in reason
    (drain,) = [a for a in result.actions if a.kind is ActionKind.DRAIN]
    # no availability guard holds it (it keeps nothing available); only one mutation per
    # host per tick, and the new claim on the same host went first
    assert drain.blocked == "host_governor"
    terms = {
        a.host_id: a.split_claim.coordinator_term
        for a in claims_of(result.actions)
        if a.split_claim
    }
    assert terms == {"a": 2, "b": 2, "c": 2}
    assert coordinator_steps(result.actions) == []  # term 2 has no quorum yet


def test_a_split_no_longer_planned_or_of_another_term_stops_its_engine() -> None:
    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    ready = replace(res("big", ResidencyState.READY, sha=SHA_A), split_term=1)
    gone = later(
        plan(), fleet(*whole_fleet(a=(ready,)), now=LATER), {"big": big()}, history=history
    )
    ((_, reason),) = _stops(gone.actions)
    assert "no longer planned" in reason
    stale = replace(ready, split_term=4)
    other = later(
        the_plan, fleet(*whole_fleet(a=(stale,)), now=LATER), {"big": big()}, history=history
    )
    ((_, reason),) = _stops(other.actions)
    assert "re-formed under term 1 (was 4)" in reason


def test_the_planner_does_not_count_a_coordinator_engine_as_a_replica() -> None:
    from gridctl.planner.splits import without_split_coordinators

    ready = replace(res("big", ResidencyState.READY, sha=SHA_A), split_term=1)
    other = res("small", ResidencyState.READY, sha=SHA_A)
    snapshot = fleet(*whole_fleet(a=(ready, other)), now=LATER)
    seen = without_split_coordinators(snapshot)
    assert [r.model_id for r in seen.hosts[0].residencies] == ["small"]
    plain = fleet(staged("b"), now=LATER)
    assert without_split_coordinators(plain) is plain
    # the weights the coordinator fetches before warming are the split's too
    loading = res("big", ResidencyState.LOADING, sha=SHA_A)
    snapshot = fleet(*whole_fleet(a=(loading, other)), now=LATER)
    assert [r.model_id for r in without_split_coordinators(snapshot).hosts[0].residencies] == [
        "small"
    ]
    # but not on a host that serves a stage of a split another host coordinates
    on_b = fleet(staged("b", serving("b", 1), residencies=(loading,)), now=LATER)
    assert without_split_coordinators(on_b) is on_b


def test_a_released_generation_is_re_formed_under_the_next_term() -> None:
    from tests.reconcile.test_split_actions import _succeeded

    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    # the split left the plan for a tick: b and c were released
    released = later(plan(), fleet(*whole_fleet(), now=LATER), {"big": big()}, history=history)
    stops = [a for a in released.actions if a.kind is ActionKind.SPLIT_RELEASE]
    assert {a.host_id for a in stops} == {"a", "b", "c"}
    after = [*history, *(_succeeded(a, LATER + 1) for a in stops)]
    hosts = tuple(replace(staged(h), last_heartbeat=LATER + 59) for h in "abc")
    back = run(
        the_plan, fleet(*hosts, now=LATER + 60), {"big": big()}, history=after, now=LATER + 60
    )
    terms = {
        a.host_id: a.split_claim.coordinator_term for a in claims_of(back.actions) if a.split_claim
    }
    assert terms == {"a": 2, "b": 2, "c": 2}


@given(st.sets(st.integers(0, 2)), st.sets(st.integers(0, 2)))
def test_warm_only_with_quorum_and_every_stage(accepted: set[int], reported: set[int]) -> None:
    the_plan = split_plan(*THREE)
    hosts_accepted = "".join("abc"[i] for i in sorted(accepted))
    history = accepted_history(the_plan, hosts=hosts_accepted)
    hosts = tuple(
        staged(h, *((serving(h, i),) if i in reported else ())) for i, h in enumerate("abc")
    )
    result = later(the_plan, fleet(*hosts, now=LATER), {"big": big()}, history=history)
    warms = [a for a in coordinator_steps(result.actions) if a.kind is ActionKind.WARM]
    expected = len(accepted) >= quorum(3) and reported == {0, 1, 2}
    assert bool(warms) == expected


def test_a_coordinator_warm_survives_the_controller_store() -> None:
    from gridctl.controller.store_rows import action_from_json, action_json

    the_plan = split_plan(*THREE)
    history = accepted_history(the_plan)
    result = later(the_plan, fleet(*whole_fleet(), now=LATER), {"big": big()}, history=history)
    load, warm = coordinator_steps(result.actions)
    assert action_from_json(action_json(warm)) == warm
    assert action_from_json(action_json(load)) == load
    assert "split_serve" not in action_json(load)
