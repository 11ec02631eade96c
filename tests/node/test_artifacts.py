"""The artifact cache: staging, size ceiling, digest checks, and a prior cache never replaced."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from gridctl.node.artifacts import ArtifactCache, ArtifactError, resolve_source
from gridctl.node.statestore import NodeStateStore

NOW = 1_700_000_000.0


def weights(tmp_path: Path, name: str, data: bytes) -> tuple[str, str]:
    path = tmp_path / name
    path.write_bytes(data)
    return path.as_uri(), hashlib.sha256(data).hexdigest()


@pytest.fixture
def cache(tmp_path: Path) -> ArtifactCache:
    return ArtifactCache(tmp_path / "cache", NodeStateStore(tmp_path / "node.sqlite3"))


def test_file_source_is_copied_verified_and_published(tmp_path: Path, cache: ArtifactCache) -> None:
    uri, sha = weights(tmp_path, "m.gguf", b"GGUF" + b"x" * 5000)
    got = cache.acquire("m", sha256=sha, source=uri, size_ceiling_mb=1, now=NOW)
    assert got.fetched
    assert Path(got.entry.path) == cache.object_path(sha)
    assert Path(got.entry.path).read_bytes().startswith(b"GGUF")
    assert list(cache.staging.iterdir()) == []
    again = cache.acquire("m", sha256=sha, source=uri, size_ceiling_mb=1, now=NOW)
    assert not again.fetched  # a cache hit is verification, not a fetch
    other = cache.acquire("m2", sha256=sha.upper(), source=None, size_ceiling_mb=None, now=NOW)
    assert not other.fetched and other.entry.path == got.entry.path


def test_size_ceiling_is_enforced(tmp_path: Path, cache: ArtifactCache) -> None:
    uri, sha = weights(tmp_path, "big.gguf", b"y" * (2 * 1024 * 1024 + 1))
    with pytest.raises(ArtifactError) as info:
        cache.acquire("big", sha256=sha, source=uri, size_ceiling_mb=2, now=NOW)
    assert info.value.reason == "artifact_too_large"
    assert not cache.object_path(sha).exists() and list(cache.staging.iterdir()) == []


def test_wrong_digest_never_replaces_the_prior_cache(tmp_path: Path, cache: ArtifactCache) -> None:
    good_uri, good_sha = weights(tmp_path, "good.gguf", b"good weights")
    cache.acquire("m", sha256=good_sha, source=good_uri, size_ceiling_mb=1, now=NOW)
    bad_uri, _ = weights(tmp_path, "bad.gguf", b"tampered weights")
    wanted = hashlib.sha256(b"the new release").hexdigest()
    with pytest.raises(ArtifactError) as info:
        cache.acquire("m", sha256=wanted, source=bad_uri, size_ceiling_mb=1, now=NOW)
    assert info.value.reason == "artifact_digest_mismatch"
    assert not cache.object_path(wanted).exists()
    assert list(cache.staging.iterdir()) == []
    prior = cache.verified("m", good_sha)
    assert prior is not None and Path(prior.path).read_bytes() == b"good weights"


def test_corrupted_cached_file_is_not_verified(tmp_path: Path, cache: ArtifactCache) -> None:
    uri, sha = weights(tmp_path, "m.gguf", b"abc" * 100)
    got = cache.acquire("m", sha256=sha, source=uri, size_ceiling_mb=1, now=NOW)
    os.chmod(got.entry.path, 0o644)
    Path(got.entry.path).write_bytes(b"flipped")
    assert cache.verified("m", sha) is None
    refetched = cache.acquire("m", sha256=sha, source=uri, size_ceiling_mb=1, now=NOW)
    assert refetched.fetched and cache.verified("m", sha) is not None


def test_no_source_and_no_cache_fails_safely(cache: ArtifactCache) -> None:
    with pytest.raises(ArtifactError) as info:
        cache.acquire("m", sha256="0" * 64, source=None, size_ceiling_mb=None, now=NOW)
    assert info.value.reason == "artifact_not_cached"


def test_fetch_without_a_digest_is_refused(tmp_path: Path, cache: ArtifactCache) -> None:
    uri, _ = weights(tmp_path, "m.gguf", b"abc")
    with pytest.raises(ArtifactError) as info:
        cache.acquire("m", sha256=None, source=uri, size_ceiling_mb=1, now=NOW)
    assert info.value.reason == "artifact_digest_required"


def test_stale_staging_files_are_cleared_on_open(tmp_path: Path) -> None:
    store = NodeStateStore(tmp_path / "node.sqlite3")
    first = ArtifactCache(tmp_path / "cache", store)
    (first.staging / "abc.partial-999999998-1").write_bytes(b"half")
    ArtifactCache(tmp_path / "cache", store)
    assert list(first.staging.iterdir()) == []


def test_unsupported_sources_are_rejected() -> None:
    for source in ("hf://owner/repo/x.gguf", "https://example.com/x", "pypi://bad name"):
        with pytest.raises(ArtifactError):
            resolve_source(source)
    with pytest.raises(ArtifactError) as info:
        resolve_source("pypi://surely-not-installed-package-xyz")
    assert info.value.reason == "artifact_source_missing"


def test_evict_keeps_objects_still_in_use(tmp_path: Path, cache: ArtifactCache) -> None:
    uri, sha = weights(tmp_path, "m.gguf", b"shared")
    cache.acquire("a", sha256=sha, source=uri, size_ceiling_mb=1, now=NOW)
    cache.acquire("b", sha256=sha, source=None, size_ceiling_mb=None, now=NOW)
    assert cache.evict("a", in_use=set())
    assert cache.object_path(sha).exists()  # still indexed under b
    assert cache.evict("b", in_use={sha})
    assert cache.object_path(sha).exists()  # a child still runs on it
    cache.acquire("b", sha256=sha, source=None, size_ceiling_mb=None, now=NOW)
    assert cache.evict("b", in_use=set())
    assert not cache.object_path(sha).exists()


def test_staging_of_a_live_sharing_node_is_kept(tmp_path: Path) -> None:
    import subprocess
    import sys

    store = NodeStateStore(tmp_path / "node.sqlite3")
    first = ArtifactCache(tmp_path / "cache", store, shared=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        busy = first.staging / f"abc.partial-{other.pid}-1"
        busy.write_bytes(b"copying")
        dead = first.staging / "abc.partial-999999999-1"
        dead.write_bytes(b"crashed")
        ArtifactCache(tmp_path / "cache", store, shared=True)
        assert busy.exists() and not dead.exists()
    finally:
        other.kill()
        other.wait()


def test_shared_cache_evict_only_forgets_the_entry(tmp_path: Path) -> None:
    uri, sha = weights(tmp_path, "m.gguf", b"shared between logical nodes")
    cache = ArtifactCache(tmp_path / "cache", NodeStateStore(tmp_path / "a.db"), shared=True)
    cache.acquire("m", sha256=sha, source=uri, size_ceiling_mb=1, now=NOW)
    assert cache.evict("m", in_use=set())
    assert cache.object_path(sha).exists() and cache.store.cached_artifact("m") is None
