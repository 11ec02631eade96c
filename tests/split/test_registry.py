"""A stage's claim registry: remembering claims, refreshing leases, fencing stale work."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.split import Claim, ClaimRegistry, StageWork, WorkKind

from .builders import LEASE_MS, NOW_MS, claim, load_for, stop_for, unfenced_load


def test_accepted_claim_is_remembered_per_artifact() -> None:
    registry = ClaimRegistry()
    first = claim()
    other_artifact = claim(manifest_sha256="b" * 64, coordinator_term=3)
    assert registry.accept(first, NOW_MS).accepted
    assert registry.accept(other_artifact, NOW_MS).accepted
    assert registry.current(first.key) == first
    assert registry.current(other_artifact.key) == other_artifact


def test_terms_are_independent_between_artifacts() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(coordinator_term=20), NOW_MS)
    low_term_other_package = claim(package_ref="hf://other@q8_0", coordinator_term=2)
    assert registry.accept(low_term_other_package, NOW_MS).accepted


def test_rejected_claim_leaves_the_accepted_one_in_place() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(), NOW_MS)
    registry.accept(claim(coordinator_id="node-b"), NOW_MS)
    registry.accept(claim(coordinator_term=9), NOW_MS)
    assert registry.current(claim().key) == claim()


def test_repeated_identical_claim_refreshes_the_lease() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(), NOW_MS)
    later = NOW_MS + LEASE_MS + 1
    refreshed = claim(lease_until_unix_ms=later + LEASE_MS)
    assert not registry.check_load(load_for(claim()), later).accepted

    decision = registry.accept(refreshed, later)

    assert decision.accepted and decision.refreshed and decision.supersedes_term is None
    assert registry.current(claim().key) == refreshed
    assert registry.check_load(load_for(refreshed), later).accepted


def test_superseding_reports_older_running_stages_and_preparations() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(coordinator_term=10), NOW_MS)
    old_stage = StageWork.for_load("stage-10", load_for(claim(coordinator_term=10)))
    old_prep = StageWork.for_load(
        "prep-9", load_for(claim(coordinator_term=9)), WorkKind.PREPARATION
    )
    local = StageWork.for_load("local", unfenced_load())
    other_model = StageWork.for_load("other", load_for(claim(model_id="gemma", coordinator_term=1)))
    for work in (old_stage, old_prep, local, other_model):
        registry.track(work)

    decision = registry.accept(claim(coordinator_term=11, coordinator_id="node-b"), NOW_MS)

    assert decision.supersedes_term == 10
    assert decision.fenced_work == (old_prep, old_stage)
    assert decision.stages_to_shut_down == (old_stage,)
    assert decision.preparations_to_cancel == (old_prep,)
    assert registry.tracked_work() == (local, other_model)


def test_work_of_the_accepted_term_is_not_fenced_by_a_refresh() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(), NOW_MS)
    current = StageWork.for_load("stage-10", load_for(claim()))
    registry.track(current)
    assert registry.accept(claim(), NOW_MS).fenced_work == ()
    assert registry.tracked_work() == (current,)


def test_rejected_claim_fences_nothing() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(coordinator_term=11), NOW_MS)
    registry.track(StageWork.for_load("stage-11", load_for(claim(coordinator_term=11))))
    decision = registry.accept(claim(coordinator_term=10), NOW_MS)
    assert decision.fenced_work == ()
    assert len(registry.tracked_work()) == 1


def test_released_work_is_forgotten() -> None:
    registry = ClaimRegistry()
    registry.track(StageWork.for_load("stage-10", load_for(claim())))
    registry.release("stage-10")
    registry.release("never-tracked")
    assert registry.tracked_work() == ()


def test_check_load_and_stop_use_the_claim_for_the_same_artifact() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(), NOW_MS)
    other = claim(model_id="gemma")
    assert registry.check_load(load_for(other), NOW_MS).reason == "missing_claim"
    assert registry.check_stop(stop_for(other, coordinator_term=1), NOW_MS).accepted


def test_stale_stop_stays_stale_after_the_lease_expires() -> None:
    registry = ClaimRegistry()
    registry.accept(claim(coordinator_term=11), NOW_MS)
    long_after = NOW_MS + 10 * LEASE_MS
    assert registry.check_stop(stop_for(claim()), long_after).reason == "stale_term"


claims_in_any_order = st.lists(
    st.builds(
        claim,
        coordinator_id=st.sampled_from(["node-a", "node-b", ""]),
        coordinator_term=st.integers(min_value=0, max_value=6),
        topology_id=st.sampled_from(["topo-1", "topo-2"]),
        lease_until_unix_ms=st.integers(min_value=NOW_MS - 10, max_value=NOW_MS + 10),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(claims_in_any_order)
def test_accepted_term_never_goes_backwards(claims: list[Claim]) -> None:
    registry = ClaimRegistry()
    held = 0
    for proposed in claims:
        decision = registry.accept(proposed, NOW_MS)
        current = registry.current(proposed.key)
        term = current.coordinator_term if current is not None else 0
        assert term >= held
        if decision.accepted:
            assert current == proposed
            assert decision.supersedes_term == (held if 0 < held < term else None)
        held = term
    if (current := registry.current(claim().key)) is not None:
        # Only the holder of the newest accepted claim can load.
        assert registry.check_load(load_for(current), NOW_MS).accepted
        stale = load_for(current, coordinator_term=current.coordinator_term - 1)
        assert not registry.check_load(stale, NOW_MS).accepted
