"""Free space on the volumes a node writes: its artifact cache and its state store.

Weights fill the artifact volume; receipts, fences and the engine logs go to the
state volume, and a node that cannot write its receipts cannot prove what it did.
Both are read every protection sample (``shutil.disk_usage``); a volume that cannot
be read is unknown, never "empty" nor "full". When both paths live on one
filesystem the two readings are the same number.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MIB = 1024 * 1024


@dataclass(frozen=True)
class DiskReading:
    artifact_free_mb: int | None
    state_free_mb: int | None


def free_mb(path: Path, usage: Callable[[Path], Any] = shutil.disk_usage) -> int | None:
    """Free MiB on the filesystem holding ``path`` (its nearest existing parent)."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return int(usage(probe).free // MIB)
    except (OSError, AttributeError, TypeError, ValueError):
        return None


def read_disks(
    artifact_root: Path,
    state_dir: Path | None,
    usage: Callable[[Path], Any] = shutil.disk_usage,
) -> DiskReading:
    return DiskReading(
        artifact_free_mb=free_mb(artifact_root, usage),
        state_free_mb=free_mb(state_dir, usage) if state_dir is not None else None,
    )
