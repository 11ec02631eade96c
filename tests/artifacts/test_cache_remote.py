"""The node's cache against a real artifact server: receipts' reasons, peers before origin."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

from gridctl.artifacts.fetching import RetryPolicy
from gridctl.node.artifacts import ArtifactCache, ArtifactError
from gridctl.node.statestore import NodeStateStore
from tests.artifacts.conftest import OWNER, REPO, ServerProcess, Weights, make_weights

pytestmark = pytest.mark.e2e
MIB = 1024 * 1024
NOW = 1_700_000_000.0
Start = Callable[..., ServerProcess]
FAST = RetryPolicy(attempts=2, first_wait_seconds=0.05)


def cache_at(path: Path) -> ArtifactCache:
    return ArtifactCache(path, NodeStateStore(path.with_suffix(".sqlite3")), retry=FAST)


def test_a_wrong_digest_keeps_the_prior_entry(
    tmp_path: Path, artifact_server: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights = make_weights(tmp_path / "hub", MIB)
    server = artifact_server(weights.root)
    monkeypatch.setenv("GRIDCTL_HF_ENDPOINT", server.url)
    cache = cache_at(tmp_path / "cache")
    first = cache.acquire(
        "m", sha256=weights.sha256, source=weights.source, size_ceiling_mb=4, now=NOW
    )
    assert first.fetched and first.entry.provenance == "demand"
    wanted = hashlib.sha256(b"next release").hexdigest()
    with pytest.raises(ArtifactError) as info:
        cache.acquire("m", sha256=wanted, source=weights.source, size_ceiling_mb=4, now=NOW)
    assert info.value.reason == "artifact_digest_mismatch" and weights.source in str(info.value)
    prior = cache.verified("m", weights.sha256)
    assert prior is not None and Path(prior.path).read_bytes() == weights.data
    assert not cache.object_path(wanted).exists()
    assert list(cache.staging.iterdir()) == []


@pytest.mark.parametrize(
    ("status", "reason"), [(404, "artifact_not_found"), (401, "artifact_unauthorized")]
)
def test_refusals_name_the_source(
    tmp_path: Path,
    artifact_server: Start,
    monkeypatch: pytest.MonkeyPatch,
    status: int,
    reason: str,
) -> None:
    weights = make_weights(tmp_path / "hub", MIB)
    token = tmp_path / "t"
    token.write_text("tok\n")
    token.chmod(0o600)
    server = artifact_server(weights.root, *(["--token-file", str(token)] if status == 401 else []))
    monkeypatch.setenv("GRIDCTL_HF_ENDPOINT", server.url)
    source = weights.source if status == 401 else f"hf://{OWNER}/{REPO}/missing.gguf"
    cache = cache_at(tmp_path / "cache")
    with pytest.raises(ArtifactError) as info:
        cache.acquire("m", sha256=weights.sha256, source=source, size_ceiling_mb=4, now=NOW)
    assert (
        info.value.reason == reason
        and source in str(info.value)
        and f"HTTP {status}" in str(info.value)
    )
    assert cache.store.cached_artifact("m") is None and list(cache.objects.iterdir()) == []


def test_a_peer_that_holds_the_artifact_is_used_before_the_origin(
    tmp_path: Path, artifact_server: Start, monkeypatch: pytest.MonkeyPatch
) -> None:
    weights: Weights = make_weights(tmp_path / "hub", 2 * MIB)
    origin = artifact_server(weights.root)
    monkeypatch.setenv("GRIDCTL_HF_ENDPOINT", origin.url)
    first = cache_at(tmp_path / "first")
    first.acquire("m", sha256=weights.sha256, source=weights.source, size_ceiling_mb=4, now=NOW)
    assert len(origin.lines("tiny.Q4.gguf range=- status=200")) == 1
    peer = artifact_server(tmp_path / "empty-hub", "--objects", str(first.objects))
    dead_peer = "http://127.0.0.1:9"  # nothing listens on the discard port
    second = cache_at(tmp_path / "second")
    got = second.acquire(
        "m",
        sha256=weights.sha256,
        source=weights.source,
        size_ceiling_mb=4,
        now=NOW,
        mirrors=(dead_peer, peer.url),
    )
    assert got.fetched and Path(got.entry.path).read_bytes() == weights.data
    assert len(peer.lines(f"/sha256/{weights.sha256} range=- status=200")) == 1
    assert len(origin.lines("tiny.Q4.gguf range=- status=200")) == 1  # the origin saw one download
