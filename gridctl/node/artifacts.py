"""The node's artifact cache: content-addressed weights, verified before every use.

Why its own module: a wrong or truncated file must never be served under a
model's name. Objects live under ``objects/<sha256>.gguf`` and are published
only by an atomic rename after the complete file was hashed in ``staging/``; a
copy that exceeds the size ceiling or has the wrong digest is discarded and the
prior cache entry stays untouched.

Remote transfers (``https``, loopback ``http``, ``hf://``; see
:mod:`gridctl.artifacts.sources`) stage under the artifact's own name,
``staging/<sha256>.partial``, held by a ``flock`` on ``locks/<sha256>.lock`` so two
nodes sharing one cache never write the same file; a transfer cut short resumes
from those bytes after a dropped connection or a restart. Fleet peers that hold
the exact artifact are tried before the origin. While a transfer runs, its bytes
done, total and rate are readable from :meth:`ArtifactCache.transfers` for the
heartbeat.
"""

from __future__ import annotations

import os
import shutil
import ssl
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlparse

import psutil

from gridctl.artifacts.fetching import DEFAULT_RETRY, RateMeter, RetryPolicy
from gridctl.artifacts.gguf import GgufError, read_gguf
from gridctl.artifacts.objects import ObjectDir, sha256_of
from gridctl.artifacts.sources import (
    ArtifactError,
    RemoteSource,
    is_remote,
    local_path,
    remote_source,
    require_safe_url,
)
from gridctl.node.records import CachedArtifact, Transfer
from gridctl.node.statestore import NodeStateStore

__all__ = ["Acquired", "ArtifactCache", "ArtifactError", "Transfer", "resolve_source", "sha256_of"]


@dataclass(frozen=True)
class Acquired:
    """A verified cache entry, and whether getting it invoked the fetch path."""

    entry: CachedArtifact
    fetched: bool


def header_of(path: Path) -> dict[str, object]:
    """The GGUF header summary of a verified file, or why it could not be read."""
    try:
        return read_gguf(path).as_json()
    except GgufError as exc:
        return {"unreadable": str(exc)[:200]}


def resolve_source(source: str) -> Path:
    """The local file a ``file://`` or ``pypi://`` source names."""
    return local_path(source)


class ArtifactCache:
    """Content-addressed GGUF files under ``root``, indexed by model id in the store."""

    def __init__(
        self,
        root: Path,
        store: NodeStateStore,
        *,
        shared: bool = False,
        retry: RetryPolicy = DEFAULT_RETRY,
        peer_ca_file: Path | None = None,
    ) -> None:
        self.dir = ObjectDir(root)
        self.root, self.objects, self.staging = self.dir.root, self.dir.objects, self.dir.staging
        self.store = store
        self.shared = shared  # several logical nodes on one machine share the objects
        self.retry = retry
        self.peer_ca_file = peer_ca_file  # verifies https peers (the fleet CA)
        self._transfers: dict[str, Transfer] = {}
        self.bytes_fetched = 0  # network bytes received by this process (a counter)
        self._transfers_lock = threading.Lock()
        self._clear_stale_staging()

    def _clear_stale_staging(self) -> None:
        # Copies named by a process id are never resumed; a live sharer keeps its own.
        # Artifact-named partials (<sha>.partial) are kept: they are what a restart resumes.
        for leftover in self.staging.iterdir():
            if ".partial-" not in leftover.name:
                continue
            owner = leftover.name.rsplit(".partial-", 1)[-1].split("-", 1)[0]
            if owner.isdigit() and int(owner) != os.getpid() and psutil.pid_exists(int(owner)):
                continue
            leftover.unlink(missing_ok=True)

    def object_path(self, sha256: str) -> Path:
        return self.dir.object_path(sha256)

    def disk(self) -> tuple[int, int]:
        """(free, total) bytes on the cache's file system, read now."""
        usage = shutil.disk_usage(self.root)
        return usage.free, usage.total

    def transfers(self) -> list[Transfer]:
        with self._transfers_lock:
            return sorted(self._transfers.values(), key=lambda t: (t.model_id, t.sha256))

    def verified(self, model_id: str, sha256: str | None) -> CachedArtifact | None:
        """The cached entry for ``model_id`` if its file hashes to the expected digest."""
        entry = self.store.cached_artifact(model_id)
        if entry is None or (sha256 is not None and entry.sha256 != sha256.lower()):
            return None
        path = Path(entry.path)
        if not path.is_file() or sha256_of(path) != entry.sha256:
            return None
        return entry

    def acquire(
        self,
        model_id: str,
        *,
        sha256: str | None,
        source: str | None,
        size_ceiling_mb: int | None,
        now: float,
        mirrors: Sequence[str] = (),
        provenance: str = "demand",
    ) -> Acquired:
        """Make ``model_id`` available and verified in the cache (the LOAD step).

        ``mirrors`` are fleet peers' base URLs that hold the exact digest; they are
        tried in order before ``source``. ``provenance`` is kept with a downloaded
        entry ("demand" or "predictive"); a file already present is "operator".
        """
        want = sha256.lower() if sha256 else None
        entry = self.verified(model_id, want)
        if entry is not None:
            return Acquired(entry, fetched=False)
        if want is not None:
            shared = self.object_path(want)
            if shared.is_file() and sha256_of(shared) == want:
                return Acquired(self._index(model_id, want, shared, now, "operator"), False)
        if source is None:
            raise ArtifactError("artifact_not_cached", f"{model_id} has no approved source")
        if want is None:
            raise ArtifactError("artifact_digest_required", f"{model_id}: source without sha256")
        ceiling = None if size_ceiling_mb is None else size_ceiling_mb * 1024 * 1024
        with self.dir.staging_lock(want):
            target = self.object_path(want)
            if self.dir.holds(want):  # a sharer finished it meanwhile
                return Acquired(self._index(model_id, want, target, now, provenance), False)
            if is_remote(source):
                origin = remote_source(source)
                peers = [mirror_source(m, want) for m in mirrors]
                published = self._fetch(model_id, want, [*peers, origin], ceiling)
            else:
                published = self.dir.copy(local_path(source), want, ceiling)
        return Acquired(self._index(model_id, want, published, now, provenance), fetched=True)

    def mark_used(self, model_id: str, now: float) -> None:
        """Record that ``model_id``'s artifact was launched (a used entry is never evicted)."""
        entry = self.store.cached_artifact(model_id)
        if entry is not None:
            self.store.put_cached_artifact(replace(entry, last_used_at=now))

    def _index(
        self, model_id: str, sha256: str, path: Path, now: float, provenance: str
    ) -> CachedArtifact:
        prior = self.store.cached_artifact(model_id)
        if prior is not None and prior.sha256 == sha256:
            provenance = prior.provenance  # a re-verification keeps how the entry came
        gguf = prior.gguf if prior is not None and prior.sha256 == sha256 else None
        entry = CachedArtifact(
            model_id,
            sha256,
            str(path),
            path.stat().st_size,
            now,
            provenance=provenance,
            gguf=gguf if gguf is not None else header_of(path),
        )
        self.store.put_cached_artifact(entry)
        return entry

    def _fetch(
        self, model_id: str, sha256: str, sources: list[RemoteSource], ceiling: int | None
    ) -> Path:
        meter = RateMeter()
        with self._transfers_lock:
            self._transfers[sha256] = Transfer(model_id, sha256, sources[-1].source)
        baseline = [-1]  # bytes staged at the last report; -1 = nothing received yet

        def progress(done: int, total: int | None) -> None:
            with self._transfers_lock:
                if 0 <= baseline[0] < done:
                    self.bytes_fetched += done - baseline[0]
                baseline[0] = done
                current = self._transfers.get(sha256)
                if current is not None:
                    self._transfers[sha256] = replace(
                        current,
                        bytes_done=done,
                        bytes_total=total,
                        rate_bytes_per_second=meter.rate(done),
                    )

        def on_source(source: str) -> None:
            with self._transfers_lock:
                current = self._transfers.get(sha256)
                if current is not None:
                    self._transfers[sha256] = replace(current, source=source)

        verify: ssl.SSLContext | bool = True
        if self.peer_ca_file is not None:  # the system roots (an origin) plus the fleet CA
            verify = ssl.create_default_context()
            verify.load_verify_locations(cafile=str(self.peer_ca_file))
        try:
            published, _ = self.dir.fetch(
                sha256,
                sources,
                ceiling=ceiling,
                progress=progress,
                on_source=on_source,
                retry=self.retry,
                verify=verify,
            )
            return published
        finally:
            with self._transfers_lock:
                self._transfers.pop(sha256, None)

    def evict(self, model_id: str, *, in_use: set[str]) -> bool:
        """Forget ``model_id``'s entry; delete the object unless something still uses it."""
        entry = self.store.cached_artifact(model_id)
        if entry is None:
            return False
        self.store.delete_cached_artifact(model_id)
        if self.shared:
            return True  # other nodes may use the object; only this node's entry goes
        still_indexed = {c.sha256 for c in self.store.cached_artifacts()}
        if entry.sha256 not in still_indexed and entry.sha256 not in in_use:
            Path(entry.path).unlink(missing_ok=True)
        return True


def mirror_source(base_url: str, sha256: str) -> RemoteSource:
    """A fleet peer's copy of the exact artifact (``{base}/sha256/{digest}``)."""
    parsed = urlparse(base_url)
    require_safe_url(base_url, parsed.scheme, parsed.hostname)
    url = f"{base_url.rstrip('/')}/sha256/{sha256}"
    return RemoteSource(f"peer {base_url.rstrip('/')}", url, peer=True)
