"""Streaming an artifact into its staging file: Range resume, size ceiling, SHA-256, retries.

Why its own module: this is where untrusted bytes enter the node. The staging
file is named by the artifact (``<sha256>.partial``), so a transfer cut by a
dropped connection or a killed node resumes with a ``Range`` request instead of
starting over; the bytes already on disk are hashed again before the rest is
appended, so the final digest covers the whole file whatever its history. The
size ceiling is enforced twice: against the length the server declares before a
byte is read, and against the bytes actually received while streaming.

Retry behaviour is carried by the exception: a dropped connection, a timeout or
a 5xx is a :class:`TransferInterrupted` and is retried with tenacity's backoff;
401/403/404, a digest mismatch and an oversized stream are
:class:`~gridctl.artifacts.sources.ArtifactError` and are not.
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
from tenacity import Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from gridctl.artifacts.sources import ArtifactError, RemoteSource

CHUNK_BYTES = 1024 * 1024
READ_TIMEOUT_SECONDS = 30.0
_CONTENT_RANGE = re.compile(r"^bytes (\d+)-(\d+)/(\d+|\*)\Z")

ProgressFn = Callable[[int, int | None], None]  # (bytes done, bytes total or None)


class TransferInterrupted(Exception):
    """A transfer stopped for a reason worth retrying; the partial file is kept."""


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    first_wait_seconds: float = 0.5
    max_wait_seconds: float = 8.0


DEFAULT_RETRY = RetryPolicy()
PEER_RETRY = RetryPolicy(attempts=2, first_wait_seconds=0.2)  # a peer costs little before origin


@dataclass(frozen=True)
class FetchResult:
    source: str  # the source that completed the file
    bytes_total: int
    resumed_from: int  # bytes that were already staged when the last request was sent


def hash_prefix(path: Path) -> tuple[hashlib._Hash, int]:
    """The running digest of what is already staged, and its length."""
    digest, length = hashlib.sha256(), 0
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                digest.update(chunk)
                length += len(chunk)
    except FileNotFoundError:
        pass
    return digest, length


def _declared_total(response: httpx.Response, offset: int) -> int | None:
    content_range = response.headers.get("content-range")
    if response.status_code == 206 and content_range:
        match = _CONTENT_RANGE.match(content_range.strip())
        if match and match.group(3) != "*":
            return int(match.group(3))
    length = response.headers.get("content-length")
    if length is not None and length.isdigit():
        return int(length) + (offset if response.status_code == 206 else 0)
    return None


def _refusal(response: httpx.Response, source: str) -> ArtifactError | None:
    status = response.status_code
    if status in (401, 403):
        return ArtifactError("artifact_unauthorized", f"{source}: HTTP {status} from the server")
    if status == 404:
        return ArtifactError("artifact_not_found", f"{source}: HTTP 404 from the server")
    if 400 <= status < 500 and status not in (408, 416, 429):
        return ArtifactError("artifact_fetch_refused", f"{source}: HTTP {status}")
    return None


class StagedTransfer:
    """One artifact's staging file and the request loop that completes it."""

    def __init__(
        self,
        staging: Path,
        *,
        sha256: str,
        ceiling_bytes: int | None,
        client: httpx.Client,
        progress: ProgressFn | None = None,
        on_source: Callable[[str], None] | None = None,
    ) -> None:
        self.staging, self.sha256, self.ceiling = staging, sha256.lower(), ceiling_bytes
        self.client, self.progress = client, progress or (lambda done, total: None)
        self.on_source = on_source or (lambda source: None)  # which source is streaming now

    def run(self, source: RemoteSource, retry: RetryPolicy = DEFAULT_RETRY) -> FetchResult:
        """Complete the staging file from ``source`` and prove its digest (or raise)."""
        self.on_source(source.source)
        retrying = Retrying(
            retry=retry_if_exception_type(TransferInterrupted),
            stop=stop_after_attempt(retry.attempts),
            wait=wait_exponential(multiplier=retry.first_wait_seconds, max=retry.max_wait_seconds),
            reraise=True,
        )
        try:
            for attempt in retrying:
                with attempt:
                    return self._once(source)
        except TransferInterrupted as exc:
            raise ArtifactError(
                "artifact_transfer_failed", f"{source.source}: {exc} after {retry.attempts} tries"
            ) from exc
        raise AssertionError("unreachable")  # pragma: no cover - tenacity reraises

    def _discard(self) -> None:
        self.staging.unlink(missing_ok=True)

    def _once(self, source: RemoteSource) -> FetchResult:
        digest, offset = hash_prefix(self.staging)
        if self.ceiling is not None and offset > self.ceiling:
            self._discard()  # a partial above the ceiling is not bounded: start over
            digest, offset = hashlib.sha256(), 0
        headers = dict(source.headers)
        if offset:
            headers["Range"] = f"bytes={offset}-"
        try:
            with self.client.stream("GET", source.url, headers=headers) as response:
                return self._receive(source, response, digest, offset)
        except httpx.TransportError as exc:
            raise TransferInterrupted(f"{type(exc).__name__}: {exc}") from exc

    def _receive(
        self, source: RemoteSource, response: httpx.Response, digest: hashlib._Hash, offset: int
    ) -> FetchResult:
        refusal = _refusal(response, source.source)
        if refusal is not None:
            raise refusal
        if response.status_code == 416 and offset:
            self._discard()  # the server's copy is shorter than ours: not the same file
            raise TransferInterrupted("HTTP 416 for the staged length; restarting")
        if response.status_code >= 500 or response.status_code in (408, 429):
            raise TransferInterrupted(f"HTTP {response.status_code}")
        if response.status_code == 200 and offset:
            digest, offset = hashlib.sha256(), 0  # Range ignored: the body is the whole file
            self._discard()
        elif response.status_code == 206:
            match = _CONTENT_RANGE.match(response.headers.get("content-range", "").strip())
            if match is None or int(match.group(1)) != offset:
                self._discard()
                raise TransferInterrupted("Content-Range does not continue the staged bytes")
        elif response.status_code != 200:
            raise ArtifactError(
                "artifact_fetch_refused", f"{source.source}: HTTP {response.status_code}"
            )
        total = _declared_total(response, offset)
        if self.ceiling is not None and total is not None and total > self.ceiling:
            raise ArtifactError(
                "artifact_too_large",
                f"{source.source}: declares {total} bytes, above the ceiling of {self.ceiling}",
            )
        done = offset
        self.progress(done, total)
        with open(self.staging, "ab") as out:
            for chunk in response.iter_bytes(CHUNK_BYTES):
                done += len(chunk)
                if self.ceiling is not None and done > self.ceiling:
                    out.close()
                    self._discard()
                    raise ArtifactError(
                        "artifact_too_large",
                        f"{source.source}: stream passed the ceiling of {self.ceiling} bytes",
                    )
                digest.update(chunk)
                out.write(chunk)
                self.progress(done, total)
            out.flush()
            os.fsync(out.fileno())
        if total is not None and done != total:
            raise TransferInterrupted(f"stream ended at {done} of {total} bytes")
        if digest.hexdigest() != self.sha256:
            self._discard()
            raise ArtifactError(
                "artifact_digest_mismatch",
                f"{source.source}: expected sha256 {self.sha256}, got {digest.hexdigest()}",
            )
        return FetchResult(source.source, done, offset)


def fetch_first(
    transfer: StagedTransfer,
    sources: Sequence[RemoteSource],
    *,
    retry: RetryPolicy = DEFAULT_RETRY,
    peer_retry: RetryPolicy = PEER_RETRY,
) -> FetchResult:
    """Try fleet peers first, then the origin; a failing peer only costs its attempts.

    Bytes staged from a peer stay: every source serves the same digest, so the
    next one resumes where the last stopped, and the final hash decides.
    """
    failures: list[str] = []
    for index, source in enumerate(sources):
        last = index == len(sources) - 1
        try:
            return transfer.run(source, peer_retry if source.peer and not last else retry)
        except ArtifactError as exc:
            if last and failures:
                tried = "; ".join(failures)
                raise ArtifactError(
                    exc.reason, f"{exc.detail} (peers tried first: {tried})"
                ) from exc
            if last:
                raise
            failures.append(str(exc))
    raise ArtifactError("artifact_not_cached", "no source to fetch from")


class RateMeter:
    """Bytes per second over the transfer so far (resumed bytes excluded)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.started = clock()
        self.first: int | None = None

    def rate(self, done: int) -> float:
        if self.first is None:
            self.first = done
            return 0.0
        elapsed = self.clock() - self.started
        return 0.0 if elapsed <= 0 else round((done - self.first) / elapsed, 1)
