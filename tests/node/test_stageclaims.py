"""A stage host's accepted split claims: the library's rules, persisted across restarts."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.errors import WireError
from gridctl.node.stageclaims import (
    HeldClaim,
    StageAssignment,
    StageClaim,
    StageClaimBook,
    stage_claim,
)
from gridctl.node.statestore import NodeStateStore
from gridctl.split import Claim, ClaimRegistry, StopRequest

NOW = 1_700_000_000_000
HOUR_MS = 3_600_000


def gemma_claim(term: int = 1, *, topology: str = "t1", lease_ms: int = 4 * HOUR_MS) -> StageClaim:
    claim = Claim(
        model_id="gemma",
        package_ref="pypi://gemma",
        manifest_sha256="ab" * 32,
        coordinator_id="coord-host",
        coordinator_term=term,
        topology_id=topology,
        run_id=f"run-{term}",
        participant_set_hash="p-" + topology,
        topology_hash="h-" + topology,
        lease_until_unix_ms=NOW + lease_ms,
    )
    return StageClaim(claim, StageAssignment(index=1, count=2, layer_start=9, layer_end=18))


def stop_of(claim: StageClaim, term: int | None = None) -> StopRequest:
    c = claim.claim
    return StopRequest(c.model_id, c.package_ref, c.manifest_sha256, c.coordinator_id,
                       c.coordinator_term if term is None else term)  # fmt: skip


def open_book(path: Path) -> tuple[NodeStateStore, StageClaimBook]:
    store = NodeStateStore(path / "node.db")
    return store, StageClaimBook(store)


def test_a_first_claim_is_accepted_persisted_and_started(tmp_path: Path) -> None:
    store, book = open_book(tmp_path)
    outcome = book.offer(gemma_claim(), NOW)
    assert outcome.decision.accepted and outcome.started == gemma_claim() and outcome.ended == ()
    store.close()
    _, again = open_book(tmp_path)
    assert again.held() == (HeldClaim(gemma_claim(), serving=True),)


def test_a_higher_term_supersedes_and_ends_the_older_stage(tmp_path: Path) -> None:
    _, book = open_book(tmp_path)
    book.offer(gemma_claim(1), NOW)
    outcome = book.offer(gemma_claim(2, topology="t2"), NOW + 1)
    assert outcome.decision.accepted and outcome.decision.supersedes_term == 1
    assert outcome.ended == (gemma_claim(1),) and outcome.started == gemma_claim(2, topology="t2")


def test_a_stale_term_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    store, book = open_book(tmp_path)
    book.offer(gemma_claim(3), NOW)
    before = store.split_claims()
    outcome = book.offer(gemma_claim(2), NOW + 1)
    assert not outcome.decision.accepted and outcome.decision.reason == "stale_term"
    assert outcome.started is None and outcome.ended == ()
    assert store.split_claims() == before


def test_a_refresh_of_the_running_epoch_starts_nothing_new(tmp_path: Path) -> None:
    _, book = open_book(tmp_path)
    book.offer(gemma_claim(), NOW)
    outcome = book.offer(gemma_claim(lease_ms=8 * HOUR_MS), NOW + 1)
    assert outcome.decision.refreshed and outcome.started is None and outcome.ended == ()
    held = book.current(gemma_claim().key)
    assert held is not None and held.stage_claim.claim.lease_until_unix_ms == NOW + 8 * HOUR_MS


def test_the_same_epoch_cannot_give_this_host_another_stage(tmp_path: Path) -> None:
    _, book = open_book(tmp_path)
    book.offer(gemma_claim(), NOW)
    other = replace(gemma_claim(), stage=StageAssignment(0, 2, 0, 9))
    outcome = book.offer(other, NOW + 1)
    assert not outcome.decision.accepted and outcome.decision.reason == "conflicting_same_term"
    assert book.serving() == (gemma_claim(),)


def test_release_and_expiry_end_the_serving_but_keep_the_fence(tmp_path: Path) -> None:
    _, book = open_book(tmp_path)
    book.offer(gemma_claim(2), NOW)
    stale, ended = book.release(stop_of(gemma_claim(2), term=1), NOW + 1)
    assert not stale.accepted and stale.reason == "stale_term" and ended is None
    decision, ended = book.release(stop_of(gemma_claim(2)), NOW + 1)
    assert decision.accepted and ended == gemma_claim(2) and book.serving() == ()
    assert book.offer(gemma_claim(1), NOW + 2).decision.reason == "stale_term"
    book.offer(gemma_claim(2), NOW + 3)  # the same epoch claimed again serves again
    assert book.expire(NOW + 4 * HOUR_MS) == ()
    assert book.expire(NOW + 4 * HOUR_MS + 1) == (gemma_claim(2),)
    assert book.serving() == ()


@pytest.mark.parametrize(
    ("patch", "pointer"),
    [
        ({"claim": None}, "/claim"),
        ({"claim": {"coordinator_term": "1"}}, "/claim/coordinator_term"),
        ({"claim": {"model_id": 7}}, "/claim/model_id"),
        ({"stage": {"index": 2}}, "/stage/index"),
        ({"stage": {"layer_end": 9}}, "/stage/layer_end"),
        ({"stage": {"count": 0}}, "/stage/count"),
        ({"stage": {"layer_start": True}}, "/stage/layer_start"),
    ],
)
def test_a_malformed_claim_names_the_field(patch: dict[str, object], pointer: str) -> None:
    data = gemma_claim().as_json()
    for part, fields_ in patch.items():
        if fields_ is None:
            data[part] = None
        else:
            assert isinstance(fields_, dict)
            data[part] = {**data[part], **fields_}  # type: ignore[dict-item]
    with pytest.raises(WireError) as caught:
        stage_claim(data)
    assert caught.value.pointer == pointer


def test_json_round_trip() -> None:
    assert stage_claim(gemma_claim(5).as_json()) == gemma_claim(5)


# --- property: the book agrees with the library and survives restarts ------------------

claims = st.builds(
    lambda term, topology, lease, model: replace(
        gemma_claim(term, topology=topology, lease_ms=lease),
        claim=replace(gemma_claim(term, topology=topology, lease_ms=lease).claim, model_id=model),
    ),
    term=st.integers(0, 4),
    topology=st.sampled_from(["t1", "t2"]),
    lease=st.integers(-HOUR_MS, 4 * HOUR_MS),
    model=st.sampled_from(["gemma", "qwen"]),
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("offer"), claims, st.integers(0, HOUR_MS)),
        st.tuples(st.just("stop"), claims, st.integers(0, HOUR_MS)),
        st.tuples(st.just("expire"), claims, st.integers(0, 5 * HOUR_MS)),
        st.tuples(st.just("restart"), claims, st.just(0)),
    ),
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(steps)
def test_decisions_agree_with_the_library_and_restarts_keep_the_state(
    sequence: list[tuple[str, StageClaim, int]],
) -> None:
    with tempfile.TemporaryDirectory() as scratch:
        store, book = open_book(Path(scratch))
        library = ClaimRegistry()
        serving: set[str] = set()
        for action, offered, offset in sequence:
            now = NOW + offset
            if action == "offer":
                outcome = book.offer(offered, now)
                expected = library.accept(offered.claim, now)
                assert (outcome.decision.accepted, outcome.decision.reason) == (
                    expected.accepted,
                    expected.reason,
                )
                if expected.accepted:
                    serving.add(offered.claim.model_id)
            elif action == "stop":
                decision, ended = book.release(stop_of(offered), now)
                expected_stop = library.check_stop(stop_of(offered), now)
                assert (decision.accepted, decision.reason) == (
                    expected_stop.accepted,
                    expected_stop.reason,
                )
                if ended is not None:
                    serving.discard(ended.claim.model_id)
            elif action == "expire":
                for ended_claim in book.expire(now):
                    assert ended_claim.claim.lease_until_unix_ms < now
                    serving.discard(ended_claim.claim.model_id)
            else:
                before = book.held()
                store.close()
                store, book = open_book(Path(scratch))
                assert book.held() == before
            assert {c.claim.model_id for c in book.serving()} == serving
            for held in book.held():  # the book holds exactly the library's accepted claims
                assert library.current(held.stage_claim.key) == held.stage_claim.claim
        store.close()
