"""A plan crossing a process boundary (the controller's planning worker) arrives equal,
byte for byte in its canonical form, with its candidate rows still unbuilt."""

from __future__ import annotations

import pickle

from hypothesis import HealthCheck, given, settings

from gridctl.domain import CandidateRows, ControllerPolicy, FleetSnapshot, ModelProfile
from gridctl.planner import plan_bytes, plan_placement

from .strategies import planning_inputs

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs())
def test_a_pickled_plan_is_the_same_plan(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    back = pickle.loads(pickle.dumps(plan, protocol=pickle.HIGHEST_PROTOCOL))
    for explanation in back.explanations:
        rows = explanation.candidates
        assert isinstance(rows, CandidateRows)
        assert rows._build is not None  # columns arrived; no row object built yet
    assert back == plan
    assert plan_bytes(back) == plan_bytes(plan)
    for theirs, ours in zip(back.explanations, plan.explanations, strict=True):
        assert tuple(theirs.candidates) == tuple(ours.candidates)
        assert hash(theirs.candidates) == hash(ours.candidates)
