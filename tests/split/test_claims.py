"""Claim values: the artifact key, lease-refresh identity and unfenced loads."""

from __future__ import annotations

import pytest

from gridctl.split import ClaimKey

from .builders import claim, load_for, unfenced_load


def test_claim_key_is_model_package_and_manifest() -> None:
    assert claim().key == ClaimKey(
        "qwen3-coder-480b", "hf://qwen/qwen3-coder-480b-gguf@q4_k_m", "a" * 64
    )


def test_same_epoch_ignores_only_the_lease() -> None:
    assert claim().same_epoch(claim(lease_until_unix_ms=1))


@pytest.mark.parametrize(
    "field, value",
    [
        ("coordinator_id", "node-b"),
        ("coordinator_term", 11),
        ("topology_id", "topo-2"),
        ("run_id", "run-2"),
        ("participant_set_hash", "participants-2"),
        ("topology_hash", "stages-2"),
        ("manifest_sha256", "b" * 64),
    ],
)
def test_same_epoch_notices_every_other_field(field: str, value: object) -> None:
    assert not claim().same_epoch(claim(**{field: value}))


def test_term_zero_without_coordinator_is_an_unfenced_load() -> None:
    assert unfenced_load().unfenced
    assert unfenced_load(coordinator_id="  ").unfenced


def test_a_load_with_a_coordinator_or_a_term_is_fenced() -> None:
    assert not load_for(claim()).unfenced
    assert not load_for(claim(), coordinator_term=0).unfenced
    assert not load_for(claim(), coordinator_id=None).unfenced
