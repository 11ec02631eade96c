"""Learned timings and per-model speed in placement.

A host with a learned fast cold fetch wins a placement it loses on priors; the
learned path also shortens lookahead and portfolio startup, and orders
preemption victims by warm-back cost. Speed measured for one model on a host
never changes another model's score there.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    HostSnapshot,
    LearnedOnHost,
    ModelProfile,
)
from gridctl.planner import plan_placement
from gridctl.planner.planning import fleet_facts, set_targets
from gridctl.planner.workspace import Workspace

from .builders import baseline, mini_32g, policy
from .strategies import planning_inputs

NOW = 1_800_000_000.0


def _fleet(*hosts: HostSnapshot) -> FleetSnapshot:
    return FleetSnapshot(now=NOW, hosts=tuple(replace(h, last_heartbeat=NOW - 1) for h in hosts))


def _slow_fetch_profile() -> ModelProfile:
    return baseline("m", 4096, load_seconds=300.0, warm_seconds=20.0)


def test_on_priors_the_faster_hardware_wins() -> None:
    hosts = _fleet(mini_32g("a", memory_bandwidth_gbps=800.0), mini_32g("b"))
    plan = plan_placement([_slow_fetch_profile()], hosts, policy())
    assert [a.host_id for a in plan.assignments] == ["a"]


def test_a_learned_fast_cold_fetch_wins_the_placement_it_loses_on_priors() -> None:
    fast = LearnedOnHost("m", load_seconds=8.0, warm_seconds=4.0)
    hosts = _fleet(
        mini_32g("a", memory_bandwidth_gbps=800.0), replace(mini_32g("b"), learned=(fast,))
    )
    plan = plan_placement([_slow_fetch_profile()], hosts, policy())
    assert [a.host_id for a in plan.assignments] == ["b"]
    rows = {c.host_id: c for e in plan.explanations for c in e.candidates}
    cold = {h: dict((s.name, s.value) for s in rows[h].components)["cold_start"] for h in "ab"}
    assert cold == {"a": -15.0, "b": -0.6}  # 320 s on priors (capped), 12 s learned


def test_another_models_learned_timing_is_not_borrowed() -> None:
    other = LearnedOnHost("other", load_seconds=1.0, warm_seconds=1.0)
    hosts = _fleet(
        mini_32g("a", memory_bandwidth_gbps=800.0), replace(mini_32g("b"), learned=(other,))
    )
    plan = plan_placement([_slow_fetch_profile()], hosts, policy())
    assert [a.host_id for a in plan.assignments] == ["a"]


def test_lookahead_uses_the_fastest_learned_start_path() -> None:
    fast = LearnedOnHost("m", load_seconds=8.0, warm_seconds=4.0)
    hosts = _fleet(mini_32g("a"), replace(mini_32g("b"), learned=(fast,)))
    ws = Workspace([_slow_fetch_profile()], hosts, policy())
    assert fleet_facts(ws, "m").startup_seconds == 12.0
    ws = Workspace([_slow_fetch_profile()], _fleet(mini_32g("a"), mini_32g("b")), policy())
    assert fleet_facts(ws, "m").startup_seconds == 320.0


SPEED = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SPEED
@given(planning_inputs(), st.integers(0, 2**32 - 1))
def test_a_fast_models_measurements_never_change_another_models_score(
    inputs: tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy], seed: int
) -> None:
    profiles, snapshot, pol = inputs
    if len(profiles) < 2:
        return
    rng = random.Random(seed)
    fast, other = rng.sample([p.name for p in profiles], 2)
    host = rng.choice(snapshot.hosts)
    kept = tuple(r for r in host.learned if r.model_id != fast)
    measured = LearnedOnHost(fast, tokens_per_second=10_000.0, speed_confidence=1.0, latency_ms=1)
    boosted = replace(host, learned=(*kept, measured))
    changed = replace(
        snapshot, hosts=tuple(boosted if h.host_id == host.host_id else h for h in snapshot.hosts)
    )

    def scores(s: FleetSnapshot) -> dict[str, object]:
        ws = Workspace(profiles, s, pol)
        set_targets(ws)
        ws.build_scarcity()
        return {h: ws.static_score(other, h) for h in ws.eligible[other]}

    assert scores(snapshot) == scores(changed)
