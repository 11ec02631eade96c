"""EVICT on the node: only an unused predictive entry, and only its exact digest."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from gridctl.node.actuator import ActionFailure, LifecycleRequest
from tests.node.conftest import NodeParts, build_parts, free_port_range

NOW = 1_700_000_000.0


@pytest.fixture
def parts(tmp_path: Path) -> NodeParts:
    return build_parts(
        tmp_path / "node", tmp_path / "cache", Path(sys.executable), free_port_range()
    )


def weights(tmp_path: Path, name: str) -> tuple[str, str]:
    data = f"GGUF weights of {name}".encode() * 100
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(data)
    return path.as_uri(), hashlib.sha256(data).hexdigest()


def load(parts: NodeParts, model: str, uri: str, sha: str, *, prefetch: bool) -> None:
    parts.actuator.load(
        LifecycleRequest("load", model, artifact_sha256=sha, artifact_source=uri,
                         artifact_size_mb=1, prefetch=prefetch)
    )  # fmt: skip


def evict(parts: NodeParts, model: str, sha: str) -> str:
    return parts.actuator.evict(LifecycleRequest("evict", model, artifact_sha256=sha)).message


def test_a_predictive_download_is_kept_with_its_provenance_and_evicted(
    tmp_path: Path, parts: NodeParts
) -> None:
    uri, sha = weights(tmp_path, "video")
    load(parts, "video", uri, sha, prefetch=True)
    entry = parts.store.cached_artifact("video")
    assert entry is not None and entry.provenance == "predictive" and entry.last_used_at is None
    assert evict(parts, "video", sha) == "evicted"
    assert parts.store.cached_artifact("video") is None
    assert not parts.cache.object_path(sha).exists() and parts.store.residency("video") is None


def test_eviction_is_refused_for_demanded_used_or_other_revisions(
    tmp_path: Path, parts: NodeParts
) -> None:
    uri, sha = weights(tmp_path, "chat")
    load(parts, "chat", uri, sha, prefetch=False)
    with pytest.raises(ActionFailure) as demanded:
        evict(parts, "chat", sha)
    assert demanded.value.reason == "evict_refused" and "demand" in str(demanded.value)
    uri2, sha2 = weights(tmp_path, "video")
    load(parts, "video", uri2, sha2, prefetch=True)
    with pytest.raises(ActionFailure) as wrong:
        evict(parts, "video", "f" * 64)
    assert wrong.value.reason == "artifact_revision_changed"
    parts.cache.mark_used("video", NOW)  # a child was launched from it
    with pytest.raises(ActionFailure) as used:
        evict(parts, "video", sha2)
    assert used.value.reason == "evict_refused" and "used" in str(used.value)
    assert parts.cache.object_path(sha).exists() and parts.cache.object_path(sha2).exists()
