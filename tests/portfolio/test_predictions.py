"""Predictions without a serving slot: disk-only demand rows the predictive cache reads.

An admitted workload the joint search finds no slot for keeps its prediction as a
correlation-only row for its best eligible model, weighted by the workload's evidence
or the learned transition's confidence; the plan never places it, and the cache
lifecycle may stage a cache-only copy of it.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.demand import WorkloadDemand
from gridctl.domain import Artifact, HostSnapshot, ModelDemand
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_search import prediction_confidence
from gridctl.reconcile.caching import cache_lifecycle
from tests.portfolio.builders import POLICY, box, inputs, model, resident, workload

SHA = "f" * 64
WRITER = model(
    "writer-7b",
    {"marketing": 1.0},
    priority=90,
    artifact=Artifact(sha256=SHA, source="hf://acme/writer/model.gguf", size_mb=4000),
)
BASE = model("base-7b", {"coding": 1.0}, min_replicas=1)


def anticipated(confidence: float) -> WorkloadDemand:
    return workload(
        "marketing",
        requests=0,
        concurrency=0.0,
        anticipated_requests_per_minute=3.0,
        anticipated_from=("coding",),
        anticipated_confidence=confidence,
    )


def full_box() -> HostSnapshot:
    return box(
        "b1", capacity_mb=10240, residencies=(resident("base-7b"),), capabilities=("load", "evict")
    )


def test_an_anticipated_workload_without_a_slot_is_a_disk_only_prediction() -> None:
    marketing = anticipated(0.5)
    result = plan_portfolio(inputs((BASE, WRITER), (full_box(),), (workload("coding"), marketing)))
    assert dict(result.mapping)["marketing"] is None
    assert all(a.model_id != "writer-7b" for a in result.plan.assignments)
    (row,) = [d for d in result.demand if d.model_id == "writer-7b"]
    assert row.correlation_only and row.correlated_requests_per_minute == 3.0
    assert row.confidence == 0.5
    snapshot = replace(inputs((BASE, WRITER), (full_box(),), ()).snapshot, demand=result.demand)
    profiles = {p.name: p for p in (BASE, WRITER)}
    policy = replace(POLICY, predictive_disk_reserve_mb=0)
    advice = cache_lifecycle(result.plan, snapshot, profiles, policy)
    assert [(a.kind, a.model_id, a.sha256, a.host_id) for a in advice] == [
        ("prefetch", "writer-7b", SHA, "b1")
    ]


def test_a_prediction_with_a_slot_is_placed_and_not_repeated() -> None:
    roomy = box("b1", slots=2, capacity_mb=20480, residencies=(resident("base-7b"),))
    result = plan_portfolio(
        inputs((BASE, WRITER), (roomy,), (workload("coding"), anticipated(0.5)))
    )
    assert dict(result.mapping)["marketing"] == "writer-7b"
    assert any(a.model_id == "writer-7b" for a in result.plan.assignments)
    rows = [d for d in result.demand if d.model_id == "writer-7b"]
    assert len(rows) == 1 and rows[0].confidence == 0.5


def test_no_eligible_model_no_prediction() -> None:
    denied = box("b1", residencies=(resident("base-7b"),))
    denied = replace(denied, resources=replace(denied.resources, denied_models=("writer-7b",)))
    result = plan_portfolio(
        inputs((BASE, WRITER), (denied,), (workload("coding"), anticipated(0.5)))
    )
    assert not [d for d in result.demand if d.model_id == "writer-7b"]


def test_prediction_confidence_is_the_evidence_or_the_edge() -> None:
    assert prediction_confidence(workload("marketing", requests=10)) == 0.5  # 10 of 20
    assert prediction_confidence(workload("marketing", requests=40)) == 1.0
    edge = anticipated(0.8)
    assert prediction_confidence(edge) == 0.8
    faded = replace(edge, anticipated_requests_per_minute=0.0)
    assert prediction_confidence(faded) == 0.0
    assert ModelDemand("x", correlated_requests_per_minute=1.0).correlation_only
