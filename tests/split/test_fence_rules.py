"""Every branch of the claim and load flowcharts, on the pure rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from gridctl.split import (
    Claim,
    FenceReason,
    claim_shape_problem,
    judge_claim,
    judge_load,
    judge_stop,
)

from .builders import NOW_MS, claim, load_for, stop_for, unfenced_load

# --- claim flowchart: Shape valid? -------------------------------------------------


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"model_id": ""}, "missing_model_id"),
        ({"package_ref": ""}, "missing_package_ref"),
        ({"manifest_sha256": ""}, "missing_manifest_sha256"),
        ({"topology_id": ""}, "missing_topology_run"),
        ({"run_id": " "}, "missing_topology_run"),
        ({"coordinator_id": ""}, "missing_coordinator_id"),
        ({"coordinator_term": 0}, "missing_term"),
        ({"coordinator_term": -3}, "missing_term"),
        ({"participant_set_hash": ""}, "missing_hashes"),
        ({"topology_hash": ""}, "missing_hashes"),
    ],
)
def test_shape_rejects_each_missing_field(changes: dict[str, object], reason: str) -> None:
    decision = judge_claim(None, claim(**changes), NOW_MS)
    assert not decision.accepted
    assert decision.reason == reason


def test_shape_reports_the_first_problem_in_documented_order() -> None:
    everything_missing = claim(
        model_id="",
        package_ref="",
        manifest_sha256="",
        topology_id="",
        run_id="",
        coordinator_id="",
        coordinator_term=0,
        participant_set_hash="",
        topology_hash="",
    )
    order = [
        ("model_id", "x", FenceReason.MISSING_MODEL_ID),
        ("package_ref", "x", FenceReason.MISSING_PACKAGE_REF),
        ("manifest_sha256", "x", FenceReason.MISSING_MANIFEST_SHA256),
        ("topology_id", "x", FenceReason.MISSING_TOPOLOGY_RUN),
        ("run_id", "x", FenceReason.MISSING_TOPOLOGY_RUN),
        ("coordinator_id", "x", FenceReason.MISSING_COORDINATOR_ID),
        ("coordinator_term", 1, FenceReason.MISSING_TERM),
        ("participant_set_hash", "x", FenceReason.MISSING_HASHES),
        ("topology_hash", "x", FenceReason.MISSING_HASHES),
    ]
    current: Claim = everything_missing
    for field, fix, expected in order:
        assert claim_shape_problem(current) is expected
        current = _with(current, field, fix)
    assert claim_shape_problem(current) is None


def test_shape_problems_are_reported_before_an_expired_lease() -> None:
    decision = judge_claim(None, claim(model_id="", lease_until_unix_ms=0), NOW_MS)
    assert decision.reason == "missing_model_id"


@pytest.mark.parametrize("lease", [NOW_MS, NOW_MS - 1])
def test_a_claim_whose_lease_ends_at_or_before_now_is_rejected(lease: int) -> None:
    decision = judge_claim(None, claim(lease_until_unix_ms=lease), NOW_MS)
    assert (decision.accepted, decision.reason) == (False, FenceReason.EXPIRED_LEASE)


# --- claim flowchart: Existing claim? ----------------------------------------------


def test_no_existing_claim_accepts() -> None:
    decision = judge_claim(None, claim(), NOW_MS)
    assert decision.accepted
    assert decision.reason is None
    assert decision.supersedes_term is None
    assert decision.current_term == 10


def test_stale_term_is_rejected() -> None:
    decision = judge_claim(claim(coordinator_term=11), claim(coordinator_term=10), NOW_MS)
    assert (decision.accepted, decision.reason) == (False, FenceReason.STALE_TERM)
    assert decision.current_term == 11


def test_same_term_same_epoch_accepts_as_a_refresh() -> None:
    decision = judge_claim(claim(), claim(lease_until_unix_ms=NOW_MS + 1), NOW_MS)
    assert decision.accepted and decision.refreshed
    assert decision.supersedes_term is None


@pytest.mark.parametrize(
    "field, value",
    [
        ("coordinator_id", "node-b"),
        ("topology_id", "topo-2"),
        ("run_id", "run-2"),
        ("participant_set_hash", "participants-2"),
        ("topology_hash", "stages-2"),
    ],
)
def test_same_term_different_epoch_is_rejected(field: str, value: str) -> None:
    decision = judge_claim(claim(), claim(**{field: value}), NOW_MS)
    assert (decision.accepted, decision.reason) == (False, FenceReason.CONFLICTING_SAME_TERM)


def test_newer_term_accepts_and_supersedes() -> None:
    decision = judge_claim(claim(), claim(coordinator_term=11, coordinator_id="node-b"), NOW_MS)
    assert decision.accepted
    assert decision.supersedes_term == 10
    assert decision.current_term == 11


# --- load flowchart ------------------------------------------------------------------


def test_unfenced_load_starts_without_any_claim() -> None:
    decision = judge_load(None, unfenced_load(), NOW_MS)
    assert decision.accepted and decision.unfenced


def test_unfenced_load_bypasses_even_an_expired_claim() -> None:
    expired = claim(lease_until_unix_ms=NOW_MS - 1)
    assert judge_load(expired, unfenced_load(), NOW_MS).accepted


def test_fenced_load_needs_a_term() -> None:
    decision = judge_load(claim(), load_for(claim(), coordinator_term=0), NOW_MS)
    assert decision.reason == "missing_term"


def test_fenced_load_needs_a_coordinator_id() -> None:
    decision = judge_load(claim(), load_for(claim(), coordinator_id=None), NOW_MS)
    assert decision.reason == "missing_coordinator_id"


def test_load_without_a_matching_claim_is_rejected() -> None:
    assert judge_load(None, load_for(claim()), NOW_MS).reason == "missing_claim"


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({"coordinator_term": 9}, "term_mismatch"),
        ({"coordinator_term": 11}, "term_mismatch"),
        ({"coordinator_id": "node-b"}, "coordinator_mismatch"),
        ({"topology_id": "topo-2"}, "topology_run_mismatch"),
        ({"run_id": "run-2"}, "topology_run_mismatch"),
    ],
)
def test_load_must_match_term_coordinator_topology_and_run(
    changes: dict[str, object], reason: str
) -> None:
    decision = judge_load(claim(), load_for(claim(), **changes), NOW_MS)
    assert (decision.accepted, decision.reason) == (False, reason)


def test_load_after_the_lease_is_rejected() -> None:
    held = claim(lease_until_unix_ms=NOW_MS - 1)
    assert judge_load(held, load_for(held), NOW_MS).reason == "expired_lease"


def test_load_exactly_at_the_lease_end_is_still_valid() -> None:
    held = claim(lease_until_unix_ms=NOW_MS)
    assert judge_load(held, load_for(held), NOW_MS).accepted


def test_matching_load_within_the_lease_starts() -> None:
    decision = judge_load(claim(), load_for(claim()), NOW_MS)
    assert decision.accepted and not decision.unfenced and decision.reason is None


# --- stop rules -----------------------------------------------------------------------


def test_stop_without_a_claim_is_allowed() -> None:
    assert judge_stop(None, stop_for(claim())).accepted


def test_stop_older_than_the_claim_is_stale() -> None:
    decision = judge_stop(claim(coordinator_term=11), stop_for(claim()))
    assert (decision.accepted, decision.reason) == (False, FenceReason.STALE_TERM)


def test_term_zero_stop_cannot_stop_a_claimed_stage() -> None:
    decision = judge_stop(claim(), stop_for(claim(), coordinator_term=0, coordinator_id=None))
    assert decision.reason == "stale_term"


def test_same_term_stop_from_another_coordinator_is_rejected() -> None:
    decision = judge_stop(claim(), stop_for(claim(), coordinator_id="node-b"))
    assert decision.reason == "coordinator_mismatch"


def test_stop_from_the_current_or_a_newer_term_is_allowed() -> None:
    assert judge_stop(claim(), stop_for(claim())).accepted
    assert judge_stop(claim(), stop_for(claim(), coordinator_term=12)).accepted


def _with(current: Claim, field: str, value: object) -> Claim:
    return replace(current, **{field: value})  # type: ignore[arg-type]
