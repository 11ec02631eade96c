"""A selected model may give up a replica that only the cooldown keeps, never its last.

The portfolio judge voids a counterfactual plan that preempts a model the portfolio
selected. The one exception is the planner's cooldown yield (``held_idle``): an idle
replica beyond what any demand asks for, as long as the model keeps a placed replica.
"""

from __future__ import annotations

from gridctl.domain.plans import Assignment, DemandClass, Plan, Preemption
from gridctl.planner.portfolio_search import judge
from gridctl.planner.preemption import COOLDOWN_YIELD, yields_cooldown_hold
from tests.portfolio.test_inherited_preemptions import state

YIELD = Preemption(
    "host-a", "coder-7b", "direct-7b", f"priority 50 = 50, {COOLDOWN_YIELD}: release 8192 MB"
)
ORDINARY = Preemption("host-a", "coder-7b", "direct-7b", "priority 10 < 50: release 8192 MB")
KEPT = Assignment("coder-7b", "host-b", "llama.cpp", 8192, "kept", DemandClass.INFERRED, 0)
BASE = Assignment("base-7b", "host-c", "llama.cpp", 8192, "base", DemandClass.BASELINE, 0)


def plan(preemptions: tuple[Preemption, ...], *assignments: Assignment) -> Plan:
    return Plan("digest", 0.0, (), assignments, preemptions, (), ())


def test_the_mark_names_only_the_cooldown_yield() -> None:
    assert yields_cooldown_hold(YIELD)
    assert not yields_cooldown_hold(ORDINARY)


def test_a_selected_model_that_keeps_a_replica_may_yield_its_cooldown_held_one() -> None:
    evaluation = judge(state(plan((), BASE)), (("coding", "coder-7b"),), plan((YIELD,), BASE, KEPT))
    assert evaluation.valid, evaluation.reason
    assert evaluation.covered == ("coding",)


def test_its_last_replica_is_never_yielded() -> None:
    evaluation = judge(state(plan((), BASE)), (("coding", "coder-7b"),), plan((YIELD,), BASE))
    assert not evaluation.valid
    assert evaluation.reason == "would preempt coder-7b"


def test_an_ordinary_preemption_of_a_selected_model_still_voids_the_portfolio() -> None:
    evaluation = judge(
        state(plan((), BASE)), (("coding", "coder-7b"),), plan((ORDINARY,), BASE, KEPT)
    )
    assert not evaluation.valid
    assert evaluation.reason == "would preempt coder-7b"
