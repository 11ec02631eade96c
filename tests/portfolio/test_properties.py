"""Properties: counterfactual and correlation-only demand never evict protected work."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain import FleetSnapshot, ModelDemand
from gridctl.planner import plan_placement
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_scan import protected_models
from tests.portfolio.builders import NOW, POLICY, box, inputs, model, resident, workload

NAMES = ("m0", "m1", "m2", "m3")
WORKLOADS = ("coding", "research", "general")

profile_st = st.tuples(
    st.integers(0, 1),  # min_replicas
    st.sampled_from((10, 50, 90)),  # priority
    st.dictionaries(st.sampled_from(WORKLOADS), st.sampled_from((0.5, 0.8, 1.0)), max_size=3),
)
host_st = st.tuples(st.integers(1, 2), st.lists(st.sampled_from(NAMES), max_size=2, unique=True))


def build(data: tuple) -> tuple:  # type: ignore[type-arg]
    profiles_raw, hosts_raw, direct, correlated, work = data
    profiles = tuple(
        model(name, scores, min_replicas=minimum, priority=priority)
        for name, (minimum, priority, scores) in zip(NAMES, profiles_raw, strict=True)
    )
    hosts = tuple(
        box(
            f"h{i}",
            slots=slots,
            capacity_mb=20_000,
            residencies=tuple(resident(m) for m in live[:slots]),
        )  # within the ceiling
        for i, (slots, live) in enumerate(hosts_raw)
    )
    demand = tuple(
        ModelDemand(m, requests_per_minute=10.0, sample_count=20) for m in direct
    ) + tuple(
        ModelDemand(m, correlated_requests_per_minute=30.0) for m in correlated if m not in direct
    )
    workloads = tuple(workload(w, n) for w, n in work)
    return profiles, hosts, demand, workloads


scenarios = st.tuples(
    st.lists(profile_st, min_size=4, max_size=4),
    st.lists(host_st, min_size=1, max_size=3),
    st.lists(st.sampled_from(NAMES), max_size=2, unique=True),
    st.lists(st.sampled_from(NAMES), max_size=3, unique=True),
    st.lists(
        st.tuples(st.sampled_from(WORKLOADS), st.integers(0, 12)),
        max_size=3,
        unique_by=lambda t: t[0],
    ),
)


@settings(max_examples=200, deadline=None)
@given(scenarios)
def test_counterfactual_demand_never_evicts_baseline_or_direct_work(data: tuple) -> None:  # type: ignore[type-arg]
    profiles, hosts, demand, workloads = build(data)
    portfolio_inputs = inputs(profiles, hosts, workloads, demand)
    result = plan_portfolio(portfolio_inputs)
    base = plan_placement(profiles, portfolio_inputs.snapshot, POLICY)
    protected = protected_models(portfolio_inputs)
    base_preemptions = {(p.host_id, p.model_id) for p in base.preemptions}
    for p in result.plan.preemptions:
        if (p.host_id, p.model_id) in base_preemptions:
            continue  # staged by direct/baseline demand itself, not by the portfolio
        assert p.model_id not in protected
        authorised = p.beneficiary in protected or p.beneficiary == result.preemption_model
        assert authorised, p
    for model_id in protected:
        assert len(result.plan.assignments_for(model_id)) >= len(base.assignments_for(model_id))


@settings(max_examples=200, deadline=None)
@given(scenarios)
def test_correlation_only_demand_never_preempts(data: tuple) -> None:  # type: ignore[type-arg]
    """Every staged preemption is authorised by a pin or a baseline (correlation alone never
    is)."""
    profiles, hosts, _, _ = build(data)
    correlated = tuple(ModelDemand(m, correlated_requests_per_minute=60.0) for m in NAMES)
    plan = plan_placement(profiles, FleetSnapshot(NOW, hosts, correlated), POLICY)
    by_name = {p.name: p for p in profiles}
    for p in plan.preemptions:
        beneficiary = by_name[p.beneficiary]
        assert beneficiary.min_replicas > 0 or beneficiary.pins
