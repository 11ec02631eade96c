"""The node's cache of GGUFs converted for vLLM: one directory per artifact digest.

vLLM's CPU build cannot run GGUF weights, so the vLLM adapter serves a Hugging
Face directory dequantized from the verified GGUF (``vllm_convert.py``, run by
the vLLM interpreter in a subprocess, offline). A conversion takes about a
minute and the result only depends on the artifact's bytes, so it is done once
per sha256 and reused by every later warm, qualification and restart.

A directory is published atomically: the converter writes into a staging
directory beside the cache, a marker naming the digest is written last, and the
staging directory is renamed into place. A crash mid-conversion leaves only a
staging directory (cleared on the next conversion), never a half directory
under the digest's name; a directory without its marker is never served. A
file lock keeps a qualification and a daemon on the same cache from converting
the same digest twice at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

from gridctl.node.runtimes.adapter import RuntimeFailure

MARKER = "gridctl-vllm.json"
FORMAT = 1  # bump when the conversion changes what it writes: old directories are rebuilt
CONVERTER = Path(__file__).with_name("vllm_convert.py")
_HEX = frozenset("0123456789abcdef")

Converter = Callable[[Path, Path], None]  # (gguf, staging directory to create)


def is_sha256(value: str) -> bool:
    return len(value) == 64 and set(value) <= _HEX


class ConvertedModels:
    """Converted model directories under ``root``, keyed by the GGUF's sha256."""

    def __init__(self, root: Path, convert: Converter) -> None:
        self.root = Path(root)
        self._convert = convert
        self._lock = threading.Lock()

    def directory(self, sha256: str) -> Path:
        if not is_sha256(sha256):
            raise ValueError(f"artifact sha256 {sha256!r} is not 64 lowercase hex digits")
        return self.root / sha256

    def published(self, sha256: str) -> Path | None:
        """The converted directory for ``sha256`` if it is complete, else None."""
        folder = self.directory(sha256)
        try:
            marker = json.loads((folder / MARKER).read_text("utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(marker, dict):
            return None
        if marker.get("artifact_sha256") != sha256 or marker.get("format") != FORMAT:
            return None
        return folder

    def prepare(self, gguf: Path, sha256: str) -> Path:
        """The converted directory for the GGUF ``gguf`` (digest ``sha256``), converting once.

        Raises ``RuntimeFailure("artifact_conversion_failed", ...)`` when the
        converter fails; nothing is published then.
        """
        self.directory(sha256)  # the digest is checked before anything is written
        with self._lock, self._file_lock(sha256):
            found = self.published(sha256)
            if found is not None:
                return found
            self._clear_staging(sha256)
            staging = self.root / f".staging-{sha256}-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                self._convert(Path(gguf), staging)
                if not staging.is_dir():
                    raise RuntimeFailure(
                        "artifact_conversion_failed", f"the converter wrote no {staging.name}"
                    )
                marker = {"artifact_sha256": sha256, "format": FORMAT, "source": Path(gguf).name}
                (staging / MARKER).write_text(json.dumps(marker) + "\n", "utf-8")
                final = self.directory(sha256)
                if final.exists():  # an unmarked leftover (an older format): replaced
                    shutil.rmtree(final)
                os.rename(staging, final)
            except BaseException:
                shutil.rmtree(staging, ignore_errors=True)
                raise
            return final

    @contextlib.contextmanager
    def _file_lock(self, sha256: str) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / f".lock-{sha256}", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock

    def _clear_staging(self, sha256: str) -> None:
        """Staging directories of this digest left by a conversion that died (we hold the
        digest's lock, so none of them is being written)."""
        for leftover in self.root.glob(f".staging-{sha256}-*"):
            shutil.rmtree(leftover, ignore_errors=True)


def lower_priority(pid: int, niceness: int) -> None:
    """Raise a child's nice value by ``niceness`` (its later children inherit it)."""
    if niceness <= 0:
        return
    with contextlib.suppress(OSError):
        current = os.getpriority(os.PRIO_PROCESS, pid)
        os.setpriority(os.PRIO_PROCESS, pid, min(19, current + niceness))


def subprocess_converter(
    python: Path,
    environment: Callable[[], Mapping[str, str]],
    *,
    timeout: float = 1800.0,
    niceness: int = 0,
    log: Callable[[], Path] | None = None,
) -> Converter:
    """A converter that runs ``vllm_convert.py`` under ``python`` (the vLLM interpreter)."""

    def convert(gguf: Path, staging: Path) -> None:
        argv = [str(python), str(CONVERTER), str(gguf), str(staging)]
        try:
            child = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=dict(environment()),
            )
        except OSError as exc:
            raise RuntimeFailure("artifact_conversion_failed", f"{python}: {exc}") from exc
        lower_priority(child.pid, niceness)
        try:
            printed, _ = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            child.kill()
            child.communicate()
            raise RuntimeFailure(
                "artifact_conversion_failed", f"converting {gguf.name} took over {timeout:.0f}s"
            ) from exc
        output = printed.decode("utf-8", "replace")
        if log is not None:
            with contextlib.suppress(OSError):
                log().write_text(output, "utf-8")
        if child.returncode != 0:
            tail = output.strip().replace("\n", " | ")[-600:]
            raise RuntimeFailure(
                "artifact_conversion_failed",
                f"converting {gguf.name} exited with {child.returncode}: {tail}",
            )

    return convert
