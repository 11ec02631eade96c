"""The plan document: each model's hosts folded into groups alike, rows only where asked.

The planner folds a model's rows from its indexes without building them; the fold
must be exactly what folding the built rows gives (same groups, counts, examples,
chosen hosts), the counts must add up to the rows, each example must be a host of
its group, and the document must not depend on input order.
"""

from __future__ import annotations

import pickle
import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings

from gridctl.domain import (
    CandidateExplanation,
    ControllerPolicy,
    FleetSnapshot,
    ModelExplanation,
    ModelProfile,
)
from gridctl.domain.row_summaries import summarise_rows
from gridctl.jsontext import encode_json
from gridctl.planner import plan_document, plan_placement, plan_to_json

from .strategies import planning_inputs

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
PROPERTY = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check_adds_up(explanation: ModelExplanation) -> None:
    rows = list(explanation.candidates)
    summary = explanation.summary()
    assert summary.hosts == len(rows)
    assert list(summary.chosen) == sorted(r.host_id for r in rows if r.chosen)
    assert sum(g.hosts for g in summary.groups) + len(summary.chosen) == len(rows)
    for group in summary.groups:
        members = [
            r.host_id
            for r in rows
            if not r.chosen and (r.rejection, r.detail) == (group.rejection, group.detail)
        ]
        assert len(members) == group.hosts, group
        assert group.example_host == min(members), group


@PROPERTY
@given(planning_inputs())
def test_the_fold_without_rows_equals_the_fold_of_the_rows(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    folded = [e.summary() for e in plan_placement(profiles, snapshot, policy).explanations]
    built = plan_placement(profiles, snapshot, policy).explanations
    assert folded == [summarise_rows(e.candidates) for e in built]
    for explanation in built:
        _check_adds_up(explanation)


@PROPERTY
@given(planning_inputs())
def test_the_document_is_independent_of_input_order_and_byte_identical(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    first = encode_json(plan_document(plan_placement(profiles, snapshot, policy)), sort_keys=True)
    shuffler = random.Random(len(first))  # a local, seeded generator: no global randomness
    hosts = list(snapshot.hosts)
    shuffler.shuffle(hosts)
    shuffled_profiles = list(profiles)
    shuffler.shuffle(shuffled_profiles)
    shuffled = replace(snapshot, hosts=tuple(hosts))
    again = plan_document(plan_placement(shuffled_profiles, shuffled, policy))
    assert encode_json(again, sort_keys=True) == first


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs())
def test_rows_come_only_for_the_models_asked_for(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    full = plan_to_json(plan)
    models = sorted(e.model_id for e in plan.explanations)
    assert plan_document(plan)["explanations"] == {}
    assert plan_document(plan, explain_all=True)["explanations"] == full["explanations"]
    asked = models[::2]
    document = plan_document(plan, [*asked, "not-a-model"])
    assert document["explanations"] == {m: full["explanations"][m] for m in asked}
    assert sorted(document["models"]) == models
    decisions = {k: v for k, v in full.items() if k != "explanations"}
    assert {k: document[k] for k in decisions} == decisions


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planning_inputs())
def test_a_plan_sent_to_another_process_folds_alike(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    plan = plan_placement(profiles, snapshot, policy)
    back = pickle.loads(pickle.dumps(plan))
    assert [e.summary() for e in back.explanations] == [e.summary() for e in plan.explanations]


def test_groups_are_named_counted_and_ordered() -> None:
    rows = (
        CandidateExplanation("h3", rejection="data_tier", detail="not trusted"),
        CandidateExplanation("h1", rejection="data_tier", detail="not trusted"),
        CandidateExplanation("h2", rejection="runtime", detail="no vllm"),
        CandidateExplanation("h4", detail="not evaluated"),
        CandidateExplanation("h5", score=0.5, chosen=True),
        CandidateExplanation("h0", rejection="data_tier", detail="other words"),
    )
    explanation = ModelExplanation("m", 1, "min_replicas", None, rows)
    summary = explanation.summary()
    assert summary.chosen == ("h5",)
    assert [(g.rejection, g.detail, g.hosts, g.example_host) for g in summary.groups] == [
        ("data_tier", "not trusted", 2, "h1"),
        ("data_tier", "other words", 1, "h0"),
        ("runtime", "no vllm", 1, "h2"),
        (None, "not evaluated", 1, "h4"),
    ]
    _check_adds_up(explanation)
