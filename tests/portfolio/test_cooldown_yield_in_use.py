"""A model an admitted workload uses is never taken as a cooldown-held replica.

The planner lets an idle replica that only the scale-down cooldown keeps yield to
demand of its own priority (``preemption.held_idle``). A probe plan sees only the
demand it is given, so a model the router answers an admitted workload with looks
"held only by the cooldown" there. The portfolio must not take it that way: neither as
a preemption path nor in a judged plan; once no admitted workload uses it, it yields.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.demand import WorkloadDemand
from gridctl.planner.portfolio import plan_portfolio
from tests.portfolio.builders import NOW, box, inputs, model, resident, workload

CODER = model("coder", {"coding": 1.0})
EMBED = model("embed", {"embedding": 1.0})


def _decide(coding_requests: int) -> tuple[dict[str, str | None], list[tuple[str, str, str]]]:
    # one slot, the coder in it, used four minutes ago (inside its 600 s cooldown)
    recent = replace(resident("coder"), last_used_at=NOW - 240)
    host = box("b1", slots=1, residencies=(recent,))
    wanted: tuple[WorkloadDemand, ...] = (workload("embedding", 40, 3.0),)
    if coding_requests:
        wanted = (*wanted, workload("coding", coding_requests, 0.1))
    result = plan_portfolio(inputs((CODER, EMBED), (host,), wanted))
    taken = [(p.host_id, p.model_id, p.beneficiary) for p in result.plan.preemptions]
    return dict(result.mapping), taken


def test_a_model_an_admitted_workload_uses_is_not_taken() -> None:
    mapping, taken = _decide(coding_requests=5)
    assert taken == []
    assert mapping["coding"] == "coder"


def test_once_no_admitted_workload_uses_it_it_yields() -> None:
    mapping, taken = _decide(coding_requests=0)
    assert taken == [("b1", "coder", "embed")]
    assert mapping["embedding"] == "embed"
