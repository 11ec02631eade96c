"""The watched desired state: reload all-or-nothing whenever the source moves.

The source is a git ref by default (the tree of the commit it names, read by
``gridctl.controller.reading``), or the working tree with ``--worktree``. A
valid revision replaces the desired state; an invalid or unsigned one is
recorded as rejected with every error and the last good revision stays in
force. New commits are noticed from ref and ``.git`` events and, failing those
(a remote, a missed event), every poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import watchfiles

from gridctl.controller.reading import SourceReader, WorktreeReader
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
    """The current desired state of a watched source and its revision history."""

    directory: Path | None
    clock: Callable[[], float]
    reader: SourceReader | None = None
    current: DesiredState | None = None
    last_good_at: float | None = None
    latest_revision: str | None = None
    warnings: tuple[ConfigIssue, ...] = ()
    rejected: deque[RejectedRevision] = field(default_factory=lambda: deque(maxlen=MAX_REJECTED))
    details: dict[str, object] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.reader is None:
            if self.directory is None:
                raise ValueError("a desired source needs a directory or a reader")
            self.reader = WorktreeReader(self.directory)

    @property
    def interval(self) -> float:
        return self.source_reader.interval

    @property
    def source_reader(self) -> SourceReader:
        assert self.reader is not None
        return self.reader

    def reload(self) -> bool:
        """Re-read the source; True when the desired state changed."""
        reading = self.source_reader.read()
        now = self.clock()
        report = reading.report
        with self._lock:
            self.details = reading.details
            if report is None:
                return False  # the source could not be read (status names why)
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
            details = dict(self.details) or self.source_reader.describe()
            return {
                "source": self.source_reader.label,
                "directory": str(self.directory) if self.directory else None,
                **details,
                "revision": current.revision if current else None,
                "dirty": current.dirty if current else None,
                "last_good_revision": current.revision if current else None,
                "last_good_at": self.last_good_at,
                "latest_seen_revision": self.latest_revision,
                "rejected_revision": pending_rejection,
                "rejected": [r.as_json() for r in self.rejected],
                "warnings": [w.as_json() for w in self.warnings],
            }


async def watch_directory(
    source: DesiredSource, on_change: Callable[[], None], stop: asyncio.Event
) -> None:
    """Reload ``source`` on every relevant file or ref event, and at least every poll
    interval, until ``stop`` is set."""
    reader = source.source_reader
    paths = reader.watch_paths()
    if not paths:  # nothing local to watch: poll
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=source.interval)
            if not stop.is_set():
                await asyncio.to_thread(source.reload)
                on_change()
        return
    async for _changes in watchfiles.awatch(
        *paths,
        watch_filter=lambda _change, path: reader.wants(path),
        stop_event=stop,
        debounce=200,
        recursive=True,
        rust_timeout=int(source.interval * 1000),
        yield_on_timeout=True,
    ):
        await asyncio.to_thread(source.reload)
        on_change()  # a new state, a rejection and a dirty tree are all news for status
