"""Safety properties over random fleets, profiles and demand (>= 500 examples each)."""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelProfile
from gridctl.planner import plan_bytes, plan_placement

from .rules import (
    accounting_violations,
    domain_violations,
    hard_rule_violations,
    pin_violations,
    preemption_violations,
    repack_violations,
)
from .strategies import planning_inputs

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
PROPERTY = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@PROPERTY
@given(planning_inputs())
def test_never_overcommits_or_breaks_a_hard_rule(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    assert hard_rule_violations(profiles, snapshot, policy, plan) == []


@PROPERTY
@given(planning_inputs())
def test_pins_are_honoured_or_reported(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    assert pin_violations(profiles, plan_placement(profiles, snapshot, policy)) == []


@PROPERTY
@given(planning_inputs())
def test_failure_domain_minimum_met_or_reported(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    assert domain_violations(profiles, snapshot, plan_placement(profiles, snapshot, policy)) == []


@PROPERTY
@given(planning_inputs())
def test_preemption_respects_ownership_demand_and_the_limit(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    assert preemption_violations(profiles, snapshot, policy, plan) == []


@PROPERTY
@given(planning_inputs())
def test_proactive_repacks_move_only_movable_work(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    assert repack_violations(profiles, snapshot, plan) == []


@PROPERTY
@given(planning_inputs())
def test_every_missing_replica_is_reported(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    assert accounting_violations(plan_placement(profiles, snapshot, policy)) == []


@PROPERTY
@given(planning_inputs())
def test_output_is_independent_of_input_order_and_byte_identical(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    first = plan_bytes(plan_placement(profiles, snapshot, policy))
    assert plan_bytes(plan_placement(profiles, snapshot, policy)) == first
    shuffler = random.Random(len(first))  # a local, seeded generator: no global randomness
    hosts = [
        replace(h, residencies=tuple(shuffler.sample(h.residencies, len(h.residencies))))
        for h in snapshot.hosts
    ]
    shuffler.shuffle(hosts)
    demand = list(snapshot.demand)
    shuffler.shuffle(demand)
    shuffled_profiles = list(profiles)
    shuffler.shuffle(shuffled_profiles)
    shuffled = replace(snapshot, hosts=tuple(hosts), demand=tuple(demand))
    assert plan_bytes(plan_placement(shuffled_profiles, shuffled, policy)) == first


@PROPERTY
@given(planning_inputs(max_hosts=6))
def test_canonical_text_matches_sorted_json(inputs: Inputs) -> None:
    from gridctl.planner.canonical import canonical, canonical_text, dumps

    profiles, snapshot, policy = inputs
    for value in (snapshot, policy, list(profiles)):
        assert canonical_text(value) == dumps(canonical(value))
