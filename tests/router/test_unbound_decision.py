"""The unbound decision on its own: which model takes a workload, or the refusal, with no
router, controller or HTTP around it (tests/router/test_unbound_answers.py drives the same
decisions through the real controller)."""

from __future__ import annotations

import json

from gridctl.domain import Workload, WorkloadCatalog
from gridctl.router.features import request_features
from gridctl.router.telemetry import RequestObservation
from gridctl.router.unbound import (
    UnboundDirectory,
    body_for,
    refusal,
    unbound_observation,
    unbound_request,
)

CATALOG = WorkloadCatalog(
    workloads=(Workload("coding", keywords=("python", "bug")), Workload("general")),
)
CODING = {"model": "auto", "messages": [{"role": "user", "content": "fix this python bug"}]}
SCORES = {"coder": {"coding": 0.9}, "small": {"coding": 0.4, "general": 0.5}}


def directory(
    ready: set[str], scores: dict[str, dict[str, float]] | None = SCORES
) -> UnboundDirectory:
    return UnboundDirectory(
        portfolio=lambda: None,
        catalog=lambda: CATALOG,
        ready=lambda model: model in ready,
        scores=(lambda: scores) if scores is not None else None,
    )


def test_the_best_ready_scorer_takes_the_workload() -> None:
    decision = directory({"coder", "small"}).decide("chat", CODING, "text")
    assert (decision.workload, decision.model, decision.state) == ("coding", "coder", "ready")
    fallback = directory({"small"}).decide("chat", CODING, "text")
    assert fallback.model == "small"
    assert fallback.reason == "small is ready and scores coding 0.4"


def test_no_ready_scorer_is_a_retryable_refusal() -> None:
    decision = directory(set()).decide("chat", CODING, "text")
    assert decision.model is None and decision.retry
    refused = refusal(decision)
    assert refused.status == 503
    assert refused.headers == {"Retry-After": "5"}
    assert refused.body["error"]["code"] == "workload_not_ready"
    assert refused.body["error"]["admission_state"] == "awaiting-plan"


def test_a_workload_no_model_scores_is_refused_for_good() -> None:
    decision = directory({"coder"}, scores={"coder": {"coding": 0.9}}).decide(
        "chat", {"model": "auto", "prompt": "hello"}, "text"
    )
    assert (decision.workload, decision.model, decision.retry) == ("general", None, False)
    refused = refusal(decision)
    assert refused.headers == {}
    assert refused.body["error"]["code"] == "workload_infeasible"
    assert "workload_scores.general" in refused.body["error"]["message"]


def test_unknown_profiles_never_refuse_for_good() -> None:
    decision = directory({"coder"}, scores=None).decide("chat", CODING, "text")
    assert decision.model is None and decision.retry


def test_the_chosen_model_gets_the_same_body_naming_it() -> None:
    assert unbound_request(CODING) and unbound_request({"messages": []})
    assert not unbound_request({"model": "coder"})
    assert json.loads(body_for(CODING, "coder")) == {**CODING, "model": "coder"}


def test_the_observation_is_workload_demand_never_model_demand() -> None:
    decision = directory({"coder"}).decide("chat", CODING, "text")
    features = request_features("chat", CODING, 80)

    def observed(host: str | None) -> RequestObservation:
        return unbound_observation(
            decision,
            features,
            t=5.0,
            endpoint="chat",
            host=host,
            outcome="ok" if host else "rejected",
            status=200 if host else 503,
            service_seconds=0.1,
            units_out=3,
            session=None,
            artifact_sha256="abc",
            evaluation=False,
        )

    served = observed("h1")
    assert (served.model, served.served_model, served.workload) == (None, "coder", "coding")
    assert (served.host_id, served.artifact_sha256, served.output_units) == ("h1", "abc", 3)
    rejected = observed(None)
    assert (rejected.served_model, rejected.artifact_sha256) == (None, None)
