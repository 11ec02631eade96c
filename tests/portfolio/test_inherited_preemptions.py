"""The base plan's own preemptions (direct/baseline authority) do not void every portfolio."""

from __future__ import annotations

from gridctl.domain import ModelDemand
from gridctl.domain.plans import Assignment, DemandClass, Plan, Preemption
from gridctl.planner.portfolio_scan import gate
from gridctl.planner.portfolio_search import SearchState, judge
from gridctl.planner.portfolio_types import PortfolioInputs
from tests.portfolio.builders import box, inputs, model, resident, workload

REPACK = Preemption(
    "host-a", "base-7b", "direct-7b", "proactive repack: base-7b moves to host-b first"
)


def fleet() -> PortfolioInputs:
    return inputs(
        (
            model("base-7b", {"general": 0.9}, min_replicas=1),
            model("direct-7b", {}),
            model("coder-7b", {"coding": 0.95}),
        ),
        (box("host-a", residencies=(resident("base-7b"),)), box("host-b"), box("host-c")),
        (workload("coding"),),
        (ModelDemand("direct-7b", requests_per_minute=60.0, confidence=1.0),),
    )


def place(model_id: str, host_id: str, demand: DemandClass) -> Assignment:
    return Assignment(model_id, host_id, "llama.cpp", 8192, "test", demand, 0)


def plan(preemptions: tuple[Preemption, ...], *assignments: Assignment) -> Plan:
    return Plan("digest", 0.0, (), assignments, preemptions, (), ())


def state(base: Plan) -> SearchState:
    data = fleet()
    gates = {w.workload: gate(w, data, False) for w in data.workloads}
    demand = {w.workload: w for w in data.workloads}

    def planner(snapshot: object) -> Plan:
        raise AssertionError("judge must not plan")

    return SearchState(data, planner, base, gates, demand, {}, {})


def test_a_preemption_the_base_plan_already_stages_is_inherited() -> None:
    moved = place("base-7b", "host-b", DemandClass.BASELINE)
    base = plan((REPACK,), moved)
    candidate = plan((REPACK,), moved, place("coder-7b", "host-c", DemandClass.INFERRED))
    evaluation = judge(state(base), (("coding", "coder-7b"),), candidate)
    assert evaluation.valid, evaluation.reason
    assert evaluation.covered == ("coding",)


def test_a_new_preemption_of_a_protected_model_still_voids_the_portfolio() -> None:
    moved = place("base-7b", "host-b", DemandClass.BASELINE)
    base = plan((), moved)
    candidate = plan((REPACK,), moved, place("coder-7b", "host-c", DemandClass.INFERRED))
    evaluation = judge(state(base), (("coding", "coder-7b"),), candidate)
    assert not evaluation.valid
    assert evaluation.reason == "would preempt base-7b"


def test_the_same_victim_for_a_portfolio_beneficiary_is_not_inherited() -> None:
    moved = place("base-7b", "host-b", DemandClass.BASELINE)
    base = plan((REPACK,), moved)
    theirs = Preemption("host-a", "base-7b", "coder-7b", "speculative")
    candidate = plan((theirs,), moved, place("coder-7b", "host-a", DemandClass.INFERRED))
    evaluation = judge(state(base), (("coding", "coder-7b"),), candidate)
    assert not evaluation.valid
