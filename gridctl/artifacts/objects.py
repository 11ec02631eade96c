"""A directory of content-addressed artifacts: ``objects/<sha256>.gguf`` and ``staging/``.

Why its own module: the node's cache and ``gridctl artifacts fetch --into DIR``
publish the same way, so a pre-seeded directory is a cache a node can adopt.
Nothing appears under ``objects/`` except by an atomic rename of a staged file
whose complete bytes hashed to its name. One ``flock`` per digest
(``locks/<sha256>.lock``) keeps two processes sharing the directory from
writing the same staging file.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import ssl
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

from gridctl.artifacts.fetching import (
    DEFAULT_RETRY,
    READ_TIMEOUT_SECONDS,
    FetchResult,
    ProgressFn,
    RetryPolicy,
    StagedTransfer,
    fetch_first,
)
from gridctl.artifacts.sources import ArtifactError, RemoteSource
from gridctl.errors import TransientError

CHUNK_BYTES = 4 * 1024 * 1024
DISK_MARGIN_BYTES = 64 * 1024 * 1024


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


class ObjectDir:
    """``root/objects`` and ``root/staging``; every method is safe across processes."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.objects = self.root / "objects"
        self.staging = self.root / "staging"
        self.locks = self.root / "locks"  # lock files stay: unlinking a flock file races
        for path in (self.root, self.objects, self.staging, self.locks):
            path.mkdir(parents=True, exist_ok=True)

    def object_path(self, sha256: str) -> Path:
        return self.objects / f"{sha256.lower()}.gguf"

    def partial_path(self, sha256: str) -> Path:
        return self.staging / f"{sha256.lower()}.partial"

    def holds(self, sha256: str) -> bool:
        """True if the published object exists and hashes to its name (reads the file)."""
        target = self.object_path(sha256)
        return target.is_file() and sha256_of(target) == sha256.lower()

    @contextmanager
    def staging_lock(self, sha256: str) -> Iterator[None]:
        fd = os.open(self.locks / f"{sha256.lower()}.lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def publish(self, staged: Path, sha256: str) -> Path:
        target = self.object_path(sha256)
        os.replace(staged, target)
        dir_fd = os.open(self.objects, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        return target

    def fetch(
        self,
        sha256: str,
        sources: Sequence[RemoteSource],
        *,
        ceiling: int | None,
        progress: ProgressFn | None = None,
        on_source: Callable[[str], None] | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
        verify: ssl.SSLContext | bool = True,
    ) -> tuple[Path, FetchResult]:
        """Stream, verify and publish (call inside :meth:`staging_lock`)."""
        timeout = httpx.Timeout(READ_TIMEOUT_SECONDS, connect=10.0)
        with httpx.Client(timeout=timeout, verify=verify, follow_redirects=True) as client:
            transfer = StagedTransfer(
                self.partial_path(sha256),
                sha256=sha256,
                ceiling_bytes=ceiling,
                client=client,
                progress=progress,
                on_source=on_source,
            )
            result = fetch_first(transfer, sources, retry=retry)
        return self.publish(self.partial_path(sha256), sha256), result

    def copy(self, origin: Path, sha256: str, ceiling: int | None) -> Path:
        """Copy a local file in, verified (call inside :meth:`staging_lock`)."""
        try:
            size = origin.stat().st_size
        except OSError as exc:
            raise ArtifactError("artifact_source_missing", f"{origin}: {exc.strerror}") from exc
        if ceiling is not None and size > ceiling:
            raise ArtifactError("artifact_too_large", f"{size} bytes > ceiling {ceiling}")
        free = shutil.disk_usage(self.root).free
        if free < size + DISK_MARGIN_BYTES:
            raise TransientError(f"insufficient_disk: {free} bytes free, {size} needed", 60.0)
        staged = self.partial_path(sha256)
        digest, copied = hashlib.sha256(), 0
        try:
            with open(origin, "rb") as src, open(staged, "wb") as dst:
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
                    "artifact_digest_mismatch", f"expected {sha256}, got {digest.hexdigest()}"
                )
            return self.publish(staged, sha256)
        finally:
            staged.unlink(missing_ok=True)
