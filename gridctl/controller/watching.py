"""The watched directory: reload all-or-nothing on every change.

A valid revision replaces the desired state; an invalid one is recorded as
rejected with every error and the last good revision stays in force. The next
good commit is picked up as soon as it lands.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import watchfiles

from gridctl.config import check_directory
from gridctl.config.loading import YAML_SUFFIXES
from gridctl.domain import DesiredState
from gridctl.errors import ConfigIssue

log = logging.getLogger(__name__)
MAX_REJECTED = 16


@dataclass(frozen=True)
class RejectedRevision:
    revision: str
    at: float
    errors: tuple[ConfigIssue, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "revision": self.revision,
            "at": self.at,
            "errors": [e.as_json() for e in self.errors],
        }


@dataclass
class DesiredSource:
    """The current desired state of a watched directory and its revision history."""

    directory: Path
    clock: Callable[[], float]
    current: DesiredState | None = None
    last_good_at: float | None = None
    latest_revision: str | None = None
    warnings: tuple[ConfigIssue, ...] = ()
    rejected: deque[RejectedRevision] = field(default_factory=lambda: deque(maxlen=MAX_REJECTED))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def reload(self) -> bool:
        """Re-read the directory; True when the desired state changed."""
        report = check_directory(self.directory)
        now = self.clock()
        with self._lock:
            self.latest_revision = report.revision
            if report.state is None:
                already = self.rejected and self.rejected[-1].revision == report.revision
                if not already:
                    self.rejected.append(
                        RejectedRevision(report.revision, now, tuple(report.errors))
                    )
                    log.warning(
                        "rejected desired revision %s: %d error(s); keeping %s",
                        report.revision,
                        len(report.errors),
                        self.current.revision if self.current else "nothing",
                    )
                return False
            changed = self.current is None or self.current != report.state
            self.current = report.state
            self.warnings = tuple(report.warnings)
            if changed:
                self.last_good_at = now
                log.info(
                    "desired revision %s in force (%d profiles)",
                    report.state.revision,
                    len(report.state.profiles),
                )
            return changed

    @property
    def last_rejected(self) -> RejectedRevision | None:
        with self._lock:
            return self.rejected[-1] if self.rejected else None

    def status(self) -> dict[str, object]:
        with self._lock:
            current = self.current
            pending_rejection = (
                self.rejected[-1].revision
                if self.rejected and self.rejected[-1].revision == self.latest_revision
                else None
            )
            return {
                "source": "watch",
                "directory": str(self.directory),
                "revision": current.revision if current else None,
                "dirty": current.dirty if current else None,
                "last_good_revision": current.revision if current else None,
                "last_good_at": self.last_good_at,
                "latest_seen_revision": self.latest_revision,
                "rejected_revision": pending_rejection,
                "rejected": [r.as_json() for r in self.rejected],
                "warnings": [w.as_json() for w in self.warnings],
            }


def _is_yaml(change: watchfiles.Change, path: str) -> bool:
    return path.endswith(YAML_SUFFIXES) and "/.git/" not in path


async def watch_directory(
    source: DesiredSource, on_change: Callable[[], None], stop: asyncio.Event
) -> None:
    """Reload ``source`` on every YAML change under its directory until ``stop`` is set."""
    async for _changes in watchfiles.awatch(
        source.directory, watch_filter=_is_yaml, stop_event=stop, debounce=200, recursive=True
    ):
        source.reload()
        on_change()  # a new state and a rejection are both news for the tick loop
