"""Portfolio planning: gates, joint search, exploration and preemption budgets, rows."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gridctl.demand import OutcomeScore
from gridctl.domain import HostSnapshot, ModelDemand, ModelProfile, ResidencyState
from gridctl.planner.portfolio import plan_portfolio
from gridctl.planner.portfolio_types import AdmissionState
from tests.portfolio.builders import (
    POLICY,
    box,
    inputs,
    model,
    resident,
    specialists_and_generalist,
    workload,
)


def states(result: object) -> dict[str, str]:
    return {r.workload: r.state.value for r in result.admission}  # type: ignore[attr-defined]


def test_generalist_beats_two_specialists_on_one_slot() -> None:
    result = plan_portfolio(
        inputs(
            specialists_and_generalist(), (box("b1"),), (workload("coding"), workload("research"))
        )
    )
    assert dict(result.mapping) == {"coding": "general-7b", "research": "general-7b"}
    assert [a.model_id for a in result.plan.assignments] == ["general-7b"]
    assert states(result) == {"coding": "planned", "research": "planned"}


def test_roomy_fleet_keeps_both_specialists() -> None:
    result = plan_portfolio(
        inputs(
            specialists_and_generalist(),
            (box("b1"), box("b2")),
            (workload("coding"), workload("research")),
        )
    )
    assert dict(result.mapping) == {"coding": "coder-7b", "research": "research-7b"}


def test_gate_needs_three_observations() -> None:
    two = plan_portfolio(
        inputs(specialists_and_generalist(), (box("b1"),), (workload("coding", requests=2),))
    )
    three = plan_portfolio(
        inputs(specialists_and_generalist(), (box("b1"),), (workload("coding", requests=3),))
    )
    assert states(two) == {"coding": "awaiting-plan"} and two.plan.assignments == ()
    assert "2 of 3 observations" in two.admission[0].reason
    assert states(three) == {"coding": "planned"}


def test_gate_offered_concurrency_149_vs_150() -> None:
    below = plan_portfolio(
        inputs(
            specialists_and_generalist(),
            (box("b1"),),
            (workload("coding", requests=1, concurrency=1.49),),
        )
    )
    at = plan_portfolio(
        inputs(
            specialists_and_generalist(),
            (box("b1"),),
            (workload("coding", requests=1, concurrency=1.5),),
        )
    )
    assert states(below) == {"coding": "awaiting-plan"}
    assert states(at) == {"coding": "planned"}
    assert at.gates[0].canary_only and dict(at.plan.targets)["coder-7b"] == 1


def test_media_canary_needs_the_fleet_spare_capacity_proof() -> None:
    image = (model("image-gen", {"image": 1.0}),)
    roomy = tuple(box(f"b{i}", slots=2) for i in range(4))
    scarce = (box("b1"), box("b2"))
    for concurrency, hosts, expected in (
        (0.99, roomy, "awaiting-plan"),
        (1.0, roomy, "planned"),
        (1.0, scarce, "awaiting-plan"),
    ):
        result = plan_portfolio(inputs(image, hosts, (workload("image", 1, concurrency),)))
        assert states(result) == {"image": expected}, (concurrency, len(hosts))


def test_a_resident_catalog_model_is_not_counted_twice_by_the_spare_capacity_proof() -> None:
    """A live copy of a catalog model is its feasible copy: the proof asks for free slots
    beyond one copy of every enabled model, and a resident one already has its copy (its
    slot is not free). Counting it again made every fleet whose models were loaded look
    scarce, and a roomy fleet never earned a media canary."""
    catalog = (
        model("image-gen", {"image": 1.0}),
        model("writer", {"marketing": 1.0}),
        model("seller", {"sales": 1.0}),
        model("coder", {"coding": 1.0}),
    )
    busy = [
        box(f"b{i}", slots=2, residencies=(resident(name),))
        for i, name in enumerate(("writer", "seller", "coder"), start=1)
    ]
    loaded = (*busy, box("b4", slots=2))
    wanted = (workload("image", 1, 1.0),)
    assert states(plan_portfolio(inputs(catalog, loaded, wanted))) == {"image": "planned"}
    # b4 full (one slot, holding a model of no workload): the proof fails, as it must
    full = (*loaded[:3], box("b4", slots=1, residencies=(resident("other"),)))
    assert states(plan_portfolio(inputs(catalog, full, wanted))) == {"image": "awaiting-plan"}


def test_infeasible_and_deferred_rows_keep_demand_visible() -> None:
    profiles = (
        model("coder-7b", {"coding": 1.0}, required_tags=("gpu",)),
        model("writer", {"marketing": 1.0}),
        model("seller", {"sales": 1.0}),
    )
    result = plan_portfolio(
        inputs(
            profiles,
            (box("b1"),),
            (workload("coding"), workload("marketing", 20), workload("sales", 5)),
        )
    )
    rows = {r.workload: r for r in result.admission}
    assert rows["coding"].state is AdmissionState.INFEASIBLE
    assert "required_tag" in rows["coding"].reason
    assert rows["marketing"].state is AdmissionState.PLANNED
    assert rows["sales"].state is AdmissionState.DEFERRED
    assert rows["sales"].requests == 5 and rows["sales"].offered_concurrency > 0


def test_rows_follow_the_observed_lifecycle() -> None:
    profiles = specialists_and_generalist()
    work = (workload("coding"),)
    starting = plan_portfolio(
        inputs(
            profiles,
            (box("b1", residencies=(resident("coder-7b", ResidencyState.WARMING),)),),
            work,
        )
    )
    ready = plan_portfolio(
        inputs(profiles, (box("b1", residencies=(resident("coder-7b"),)),), work)
    )
    assert states(starting) == {"coding": "starting"}
    assert states(ready) == {"coding": "ready"}


def test_capacity_contended_when_direct_demand_holds_the_slot() -> None:
    profiles = specialists_and_generalist()
    hosts = (box("b1", residencies=(resident("research-7b"),)),)
    direct = (ModelDemand("research-7b", requests_per_minute=30.0, sample_count=50),)
    result = plan_portfolio(inputs(profiles, hosts, (workload("coding"),), direct))
    assert result.plan.preemptions == ()
    assert [a.model_id for a in result.plan.assignments] == ["research-7b"]
    assert states(result)["coding"] in ("capacity-contended", "deferred")


def test_at_most_one_model_uses_the_exploration_slot() -> None:
    # untried specialists edge out tried peers only by their bonus
    tried = OutcomeScore
    profiles = (
        model("a-new", {"coding": 0.9}),
        model("a-old", {"coding": 0.92}),
        model("b-new", {"research": 0.9}),
        model("b-old", {"research": 0.92}),
    )
    outcomes = tuple(
        tried(m, w, "", 20.0, 1.0, 1.0, 4.0, 0.0, None, 0.0, 0.0, None, 0.0)
        for m, w in (("a-old", "coding"), ("b-old", "research"))
    )
    base = inputs(
        profiles,
        tuple(box(f"b{i}", residencies=()) for i in range(4)),
        (workload("coding"), workload("research")),
    )
    result = plan_portfolio(replace(base, outcomes=outcomes))
    chosen = dict(result.mapping)
    explored = {m for m in chosen.values() if m and m.endswith("-new")}
    assert len(explored) <= 1
    assert result.exploration_model in (None, *explored)
    assert explored == ({result.exploration_model} - {None})


def test_search_is_bounded() -> None:
    names = ("coding", "research", "marketing", "sales", "design", "general")
    profiles = tuple(
        model(f"m{i:02d}", {w: 0.5 + ((i * 7 + j) % 10) / 20 for j, w in enumerate(names)})
        for i in range(12)
    )
    result = plan_portfolio(
        inputs(
            profiles, (box("b1"), box("b2")), tuple(workload(w, 5 + i) for i, w in enumerate(names))
        )
    )
    assert result.portfolios <= POLICY.portfolio_max_portfolios
    per_workload: dict[str, int] = {}
    assert len(result.candidates) == 12 * len(names)  # every scored row is reported
    for w in names:
        per_workload[w] = sum(1 for c in result.candidates if c.workload == w)
    assert len(result.selected) <= 2


def test_undersupplied_when_fewer_replicas_are_ready_than_desired() -> None:
    profiles = (
        ModelProfile(
            name="coder-7b", memory_mb=8192, workload_scores={"coding": 1.0}, max_replicas=3
        ),
    )
    hosts = (box("b1", residencies=(resident("coder-7b"),)), box("b2"), box("b3"))
    result = plan_portfolio(
        inputs(profiles, hosts, (workload("coding", requests=600, concurrency=3.0),))
    )
    row = result.admission[0]
    assert row.state is AdmissionState.UNDERSUPPLIED
    assert (row.model_id, row.ready, row.desired, row.planned, row.missing) == (
        "coder-7b",
        1,
        3,
        3,
        0,
    )
    assert row.reason == "coder-7b: 1 of 3 replicas ready, 3 planned, 0 starting"
    # one replica wanted, one ready: ready, not undersupplied
    single = plan_portfolio(inputs(profiles, hosts, (workload("coding"),)))
    assert states(single) == {"coding": "ready"}


@pytest.mark.parametrize(
    "lifecycle", [ResidencyState.DRAINING, ResidencyState.UNLOADING, ResidencyState.FAILED]
)
def test_blocked_by_residency_when_a_non_serving_copy_holds_the_host(
    lifecycle: ResidencyState,
) -> None:
    profiles = (model("coder-7b", {"coding": 1.0}),)
    hosts = (box("b1", slots=2, residencies=(resident("coder-7b", lifecycle),)),)
    result = plan_portfolio(inputs(profiles, hosts, (workload("coding"),)))
    row = result.admission[0]
    assert row.state is AdmissionState.BLOCKED_BY_RESIDENCY
    assert row.model_id == "coder-7b" and row.eligible_hosts == 1
    assert row.reason.startswith("coder-7b: no capacity (model_resident)")
    assert result.plan.assignments == () and result.plan.preemptions == ()
    # the same host without that copy has room: the workload is planned there
    free = plan_portfolio(inputs(profiles, (box("b1", slots=2),), (workload("coding"),)))
    assert states(free) == {"coding": "planned"}


def test_roomy_fleet_does_not_collapse_onto_a_shared_generalist() -> None:
    """Three workloads on three one-slot boxes: moving coding onto the generalist general
    already needs would save a slot nobody is short of, at a large suitability cost."""
    profiles = (
        model("coder-7b", {"coding": 0.95}),
        model("research-7b", {"research": 0.95}),
        model("general-7b", {"coding": 0.3, "research": 0.4, "general": 0.9}),
    )
    workloads = (workload("coding"), workload("research"), workload("general"))
    roomy = plan_portfolio(inputs(profiles, (box("b1"), box("b2"), box("b3")), workloads))
    assert dict(roomy.mapping) == {
        "coding": "coder-7b",
        "general": "general-7b",
        "research": "research-7b",
    }
    # two slots for three workloads: spare slots rank before utility (the scarce order)
    scarce = plan_portfolio(inputs(profiles, (box("b1"), box("b2")), workloads))
    assert set(dict(scarce.mapping).values()) == {"general-7b"}


def test_a_scarce_fleet_does_not_drain_live_specialists_for_slots_nobody_needs() -> None:
    """Three one-slot boxes, four workloads, the specialists already serving: the spare slots
    the scarce order keeps are the models a portfolio would newly start. Collapsing coding
    and research onto the generalist would only drain live specialists; no admitted
    workload waits for the slots, so each keeps its better model."""
    profiles = (
        model("coder-7b", {"coding": 0.95}),
        model("research-7b", {"research": 0.95}),
        model("general-7b", {"coding": 0.3, "research": 0.4, "general": 0.9, "sales": 0.8}),
    )
    workloads = (workload("coding"), workload("research"), workload("general"), workload("sales"))
    live = (
        box("b1", slots=1, residencies=(resident("coder-7b"),)),
        box("b2", slots=1, residencies=(resident("research-7b"),)),
        box("b3", slots=1, residencies=(resident("general-7b"),)),
    )
    kept = plan_portfolio(inputs(profiles, live, workloads))
    assert dict(kept.mapping) == {
        "coding": "coder-7b",
        "general": "general-7b",
        "research": "research-7b",
        "sales": "general-7b",
    }
    # the same fleet with nothing live: each specialist started costs a slot
    empty = tuple(replace(h, residencies=()) for h in live)
    fresh = plan_portfolio(inputs(profiles, empty, workloads))
    assert set(dict(fresh.mapping).values()) == {"general-7b"}


def test_an_external_endpoint_does_not_make_a_scarce_fleet_roomy() -> None:
    """An endpoint that can host no managed model adds no serving slot."""
    profiles = specialists_and_generalist()
    endpoint = box("vendor", slots=0, capacity_mb=0, kind="external-endpoint")
    result = plan_portfolio(
        inputs(profiles, (box("b1"), endpoint), (workload("coding"), workload("research")))
    )
    assert dict(result.mapping) == {"coding": "general-7b", "research": "general-7b"}


def test_a_shut_out_workload_makes_the_roomy_fleet_consolidate() -> None:
    """Five slots, specialists resident on the only three tagged boxes, and a new workload
    whose model needs the tag: consolidating onto the generalist frees a tagged slot."""

    def tagged(host_id: str, model_id: str) -> HostSnapshot:
        found = box(host_id, residencies=(resident(model_id),))
        return replace(found, resources=replace(found.resources, tags=("gpu",)))

    profiles = (
        model("coder-7b", {"coding": 0.95}),
        model("research-7b", {"research": 0.95}),
        model("general-7b", {"coding": 0.5, "research": 0.5, "general": 0.9}),
        replace(model("embed", {"embedding": 0.95}), required_tags=("gpu",)),
    )
    hosts = (
        tagged("g1", "coder-7b"),
        tagged("g2", "research-7b"),
        tagged("g3", "general-7b"),
        box("b4"),
        box("b5"),
    )
    three = (workload("coding"), workload("research"), workload("general"))
    before = plan_portfolio(inputs(profiles, hosts, three))
    assert dict(before.mapping) == {
        "coding": "coder-7b",
        "general": "general-7b",
        "research": "research-7b",
    }
    after = plan_portfolio(inputs(profiles, hosts, (*three, workload("embedding"))))
    assert dict(after.mapping) == {
        "coding": "general-7b",
        "embedding": None,  # placed once a later heartbeat shows the released slot
        "general": "general-7b",
        "research": "general-7b",
    }
    row = next(c for c in after.candidates if c.workload == "embedding")
    assert row.rejection is not None and row.rejection.startswith("no capacity")


def test_a_ready_row_counts_the_hosts_serving_it_as_eligible() -> None:
    """A workload served by a ready replica on the fleet's only host is not "0 eligible
    hosts": that host serves it (a new replica would need another one)."""
    profiles = (model("coder-7b", {"coding": 1.0}),)
    hosts = (box("b1", slots=2, residencies=(resident("coder-7b", ResidencyState.READY),)),)
    result = plan_portfolio(inputs(profiles, hosts, (workload("coding"),)))
    (row,) = result.admission
    assert row.state is AdmissionState.READY and row.ready == 1
    assert row.eligible_hosts >= 1
