"""A model a workload uses may yield its cooldown-held slot once the portfolio continues
that workload on another ready model.

allocator.md: "A safe preemption candidate may replace a sole speculative specialist when
it continues every active workload that justified the victim." On a scarce fleet a
shut-out workload needs a slot; consolidating the specialist's workload onto a generalist
that is already ready frees it without a gap in service. When the generalist is not ready
(or the mapping keeps the workload on the specialist) the specialist stays.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain import Plan, ResidencyState
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_admission import routable_models
from gridctl.planner.portfolio_scan import serving_workloads
from gridctl.planner.portfolio_search import SearchState, continues_served
from gridctl.planner.preemption import yields_cooldown_hold
from tests.portfolio.builders import NOW, box, inputs, model, resident, workload
from tests.portfolio.test_inherited_preemptions import state

CODER = model("coder", {"coding": 1.0})
GENERAL = model("general", {"coding": 0.6, "general": 1.0}, min_replicas=1)  # stays put
EMBED = model("embed", {"embedding": 1.0})


def _decide(
    general_state: ResidencyState,
) -> tuple[dict[str, str | None], list[tuple[str, str, str]]]:
    # two one-slot boxes: the coder used four minutes ago (inside its 600 s cooldown),
    # the generalist (a baseline, never a victim) in the other; embedding has no slot
    coder = replace(resident("coder"), last_used_at=NOW - 240)
    general = replace(resident("general", general_state), last_used_at=NOW - 30)
    hosts = (box("b1", residencies=(coder,)), box("b2", residencies=(general,)))
    wanted = (
        workload("embedding", 40, 3.0),
        workload("coding", 5, 0.1),
        workload("general", 10),
    )
    result = plan_portfolio(inputs((CODER, GENERAL, EMBED), hosts, wanted))
    taken = [(p.host_id, p.model_id, p.beneficiary) for p in result.plan.preemptions]
    return dict(result.mapping), taken


def test_the_specialist_yields_when_a_ready_generalist_continues_its_workload() -> None:
    mapping, taken = _decide(ResidencyState.READY)
    assert mapping["coding"] == "general"
    assert mapping["embedding"] == "embed"
    assert taken == [("b1", "coder", "embed")]


def test_it_stays_while_the_generalist_is_not_ready() -> None:
    mapping, taken = _decide(ResidencyState.LOADING)
    assert taken == []
    assert mapping["embedding"] is None


def _search(served: dict[str, str], routable: set[str]) -> SearchState:
    """A search state whose router answers ``served`` and can route ``routable`` now
    (both are cached facts of the snapshot; set directly here)."""
    found = state(Plan("digest", NOW, (), (), (), (), ()))
    found.__dict__["served"] = served
    found.__dict__["routable"] = frozenset(routable)
    return found


def test_continuation_needs_another_ready_model_for_every_workload_it_serves() -> None:
    served = {"coding": "coder", "research": "coder", "general": "general"}
    search = _search(served, {"coder", "general"})
    both = (("coding", "general"), ("research", "general"))
    assert continues_served(search, both, "coder")
    assert not continues_served(search, (("coding", "general"), ("research", "coder")), "coder")
    assert not continues_served(search, (("coding", "general"), ("research", None)), "coder")
    assert not continues_served(search, (("coding", "general"),), "coder")
    assert not continues_served(_search(served, {"coder"}), both, "coder")
    # a model no admitted workload is answered with is continued trivially
    assert continues_served(search, (), "embed")


@settings(max_examples=60, deadline=None)
@given(
    coding_requests=st.integers(0, 8),
    embedding_concurrency=st.sampled_from([0.0, 0.5, 3.0]),
    general_state=st.sampled_from([ResidencyState.READY, ResidencyState.LOADING]),
    general_min=st.integers(0, 1),
    coder_idle_seconds=st.sampled_from([30.0, 240.0, 3600.0]),
)
def test_a_yield_never_leaves_a_workload_the_victim_served_without_a_ready_model(
    coding_requests: int,
    embedding_concurrency: float,
    general_state: ResidencyState,
    general_min: int,
    coder_idle_seconds: float,
) -> None:
    general_profile = replace(GENERAL, min_replicas=general_min)
    coder = replace(resident("coder"), last_used_at=NOW - coder_idle_seconds)
    general = replace(resident("general", general_state), last_used_at=NOW - 30)
    hosts = (box("b1", residencies=(coder,)), box("b2", residencies=(general,)))
    wanted = [workload("embedding", 40, embedding_concurrency), workload("general", 10)]
    if coding_requests:
        wanted.append(workload("coding", coding_requests, 0.1))
    data = inputs((CODER, general_profile, EMBED), hosts, tuple(wanted))
    result = plan_portfolio(data)
    admitted = [g.workload for g in result.gates if g.admitted]
    served = serving_workloads(data, admitted)
    ready = routable_models(data.snapshot, data.profiles, data.policy)
    mapping = dict(result.mapping)
    for p in result.plan.preemptions:
        if not yields_cooldown_hold(p):
            continue
        for w, model_id in served.items():
            if model_id == p.model_id:
                assert mapping.get(w) not in (None, p.model_id)
                assert mapping[w] in ready
