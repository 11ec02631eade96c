"""A planned split as coordinator claims: deterministic, fenced by the stages' hashes."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gridctl.domain import (
    Artifact,
    DemandClass,
    ModelProfile,
    SplitPlacement,
    SplitPolicy,
    SplitStage,
)
from gridctl.reconcile.splits import (
    SPLIT_LEASE_MS,
    claim_to_json,
    manifest_sha256,
    package_ref,
    participant_set_hash,
    stage_claims,
    topology_hash,
)

NOW = 1_800_000_000.0
SHA = "e" * 64


def big_profile(*, sha: str | None = SHA, source: str | None = None) -> ModelProfile:
    return ModelProfile(
        name="big",
        memory_mb=30000,
        artifact=Artifact(sha256=sha, source=source),
        split=SplitPolicy(max_stages=3, layers=30, native_context=8192),
    )


def split_over(*stages: tuple[str, int, int]) -> SplitPlacement:
    return SplitPlacement(
        model_id="big",
        coordinator_host_id=stages[0][0],
        stages=tuple(SplitStage(h, start, end, 1000 * (end - start)) for h, start, end in stages),
        layer_count=30,
        context_length=8192,
        parallel_lanes=4,
        runtime="llama.cpp",
        reason="split",
        demand_class=DemandClass.BASELINE,
        priority=50,
    )


THREE = split_over(("a", 0, 10), ("b", 10, 20), ("c", 20, 30))


def test_one_claim_per_stage_with_its_layers_and_the_shared_claim() -> None:
    claims = stage_claims(THREE, big_profile(), 1, NOW)
    assert [(c.stage_index, c.stage_count, c.layer_start, c.layer_end) for c in claims] == [
        (0, 3, 0, 10),
        (1, 3, 10, 20),
        (2, 3, 20, 30),
    ]
    shared = {
        (c.model_id, c.coordinator_id, c.coordinator_term, c.topology_hash, c.run_id)
        for c in claims
    }
    assert len(shared) == 1
    first = claims[0]
    assert first.coordinator_id == "a"
    assert first.manifest_sha256 == SHA
    assert first.package_ref == SHA
    assert (
        first.lease_until_unix_ms
        == int(NOW * 1000) + SPLIT_LEASE_MS
        == int(NOW * 1000) + 14_400_000
    )


def test_claims_are_byte_identical_for_the_same_inputs() -> None:
    one = [claim_to_json(c) for c in stage_claims(THREE, big_profile(), 2, NOW)]
    two = [claim_to_json(c) for c in stage_claims(THREE, big_profile(), 2, NOW)]
    assert repr(one) == repr(two)


def test_a_new_term_is_a_new_run_of_the_same_topology() -> None:
    old = stage_claims(THREE, big_profile(), 1, NOW)[0]
    new = stage_claims(THREE, big_profile(), 2, NOW)[0]
    assert new.topology_hash == old.topology_hash
    assert new.run_id != old.run_id
    assert new.coordinator_term == 2


def test_term_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="coordinator_term"):
        stage_claims(THREE, big_profile(), 0, NOW)


def test_package_and_manifest_without_an_artifact_digest() -> None:
    sourced = big_profile(sha=None, source="https://models.example/big.gguf")
    assert package_ref(sourced) == "https://models.example/big.gguf"
    bare = big_profile(sha=None)
    assert package_ref(bare) == "profile:big"
    digest = manifest_sha256(bare)
    assert len(digest) == 64 and digest == manifest_sha256(big_profile(sha=None))
    assert digest != manifest_sha256(replace(bare, memory_mb=31000))


@st.composite
def stage_lists(draw: st.DrawFn) -> tuple[SplitStage, ...]:
    hosts = draw(st.lists(st.sampled_from("abcdef"), min_size=2, max_size=4, unique=True))
    cuts = sorted(
        draw(st.sets(st.integers(1, 39), min_size=len(hosts) - 1, max_size=len(hosts) - 1))
    )
    bounds = [0, *cuts, 40]
    return tuple(SplitStage(h, bounds[i], bounds[i + 1], 100) for i, h in enumerate(hosts))


@given(stage_lists(), stage_lists())
def test_topology_hash_changes_iff_the_stages_change(
    one: tuple[SplitStage, ...], two: tuple[SplitStage, ...]
) -> None:
    layout = [(s.host_id, s.layer_start, s.layer_end) for s in one]
    other = [(s.host_id, s.layer_start, s.layer_end) for s in two]
    assert (topology_hash(one) == topology_hash(two)) == (layout == other)
    same_hosts = {s.host_id for s in one} == {s.host_id for s in two}
    assert (participant_set_hash(one) == participant_set_hash(two)) == same_hosts


@given(stage_lists())
def test_memory_does_not_enter_the_hashes(stages: tuple[SplitStage, ...]) -> None:
    heavier = tuple(replace(s, memory_mb=s.memory_mb + 1) for s in stages)
    assert topology_hash(stages) == topology_hash(heavier)
