"""The controller's causal revision counter: which inputs a tick has covered.

Every input (a heartbeat, a registration, a commit, a router observation)
advances the ``dirty`` revision. A tick records the revision it started from;
when it ends that revision is ``processed`` (and ``success`` when it planned).
A poll waits until the revision of its own heartbeat is covered by a successful
tick, so a node is never answered from a plan older than what it reported. An
input that changes nothing a tick reads is covered at once by the tick that
covered the last one that did (``semantic``), so a fleet of unchanged
heartbeats neither runs ticks back to back nor waits for one. The ``safety``
revision moves with what destructive delivery depends on; a drain waits until
the last successful tick planned from the current one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

KEYS = ("dirty", "processed", "success", "safety", "success_safety")


class Revisions:
    """Thread-safe. Read a value with ``revisions["dirty"]``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done = threading.Condition(self._lock)
        self._values = {"dirty": 0, "processed": 0, "success": 0, "safety": 0}
        self._values["success_safety"] = -1  # the safety revision the last success planned
        self.semantic = 0  # the latest revision that changed something a tick reads
        self.retry = False  # the last tick failed: every input asks for another one
        self.wake = threading.Event()  # set when a tick should run
        # called (from any thread) whenever the processed revision advances
        self.listeners: list[Callable[[], None]] = []

    def announce(self) -> None:
        """Tell every listener that the processed revision may have advanced."""
        for listener in list(self.listeners):
            try:
                listener()
            except Exception:  # a listener must never break intake or the tick
                log.exception("revision listener failed")

    def __getitem__(self, key: str) -> int:
        return self._values[key]

    def note_input(self, *, semantic: bool, safety: bool = False) -> tuple[int, bool]:
        """Advance the revision for one input; returns it and whether it asks for a tick.

        After a failed tick every input asks for another one (an unchanged input while a
        tick is pending is covered when that tick ends: it must not ask for one more, or a
        busy fleet would keep ticks running back to back)."""
        with self._lock:
            self._values["dirty"] += 1
            if safety:
                self._values["safety"] += 1
            revision = self._values["dirty"]
            semantic = semantic or safety or self.retry
            if semantic:
                self.semantic = revision
            else:
                self._cover_unchanged()
        return revision, semantic

    def note_demand(self) -> int:
        """A router observation: demand the next tick plans, which holds back no poll."""
        with self._lock:
            self._values["dirty"] += 1
            revision = self._values["dirty"]
            self._cover_unchanged()
        return revision

    def _cover_unchanged(self) -> None:
        """Under the lock: revisions after the last semantic one are as processed (and as
        successful) as it is."""
        latest = self._values["dirty"]
        if self.semantic <= self._values["processed"]:
            self._values["processed"] = latest
        if self.semantic <= self._values["success"]:
            self._values["success"] = latest
        self._done.notify_all()

    def started(self) -> tuple[int, int]:
        """The dirty and safety revisions a tick starting now covers."""
        with self._lock:
            return self._values["dirty"], self._values["safety"]

    def finished(self, dirty: int, safety: int, ok: bool) -> None:
        """A tick that started at ``dirty``/``safety`` ended (planned when ``ok``)."""
        with self._lock:
            self._values["processed"] = max(self._values["processed"], dirty)
            self.retry = not ok
            if ok:
                self._values["success"] = max(self._values["success"], dirty)
                self._values["success_safety"] = safety
            self._cover_unchanged()

    def covered(self, revision: int) -> bool | None:
        """Without waiting: None while no tick has processed ``revision``, else whether a
        successful one covered it."""
        with self._lock:
            if self._values["processed"] < revision:
                return None
            return self._values["success"] >= revision

    def progress(self) -> tuple[int, int]:
        """The processed and the successful revision, read together: ``covered(r)`` is
        None for ``r`` past the first, else whether ``r`` is within the second."""
        with self._lock:
            return self._values["processed"], self._values["success"]

    def wait(self, revision: int, timeout: float) -> bool:
        """Block until a tick has processed ``revision`` (or ``timeout`` passes); True only
        when a *successful* tick covered it (a failed tick plans nothing new)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._values["processed"] < revision:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._done.wait(left)
            return self._values["success"] >= revision

    def safety_current(self) -> bool:
        """Whether the last successful tick planned from the current safety revision."""
        with self._lock:
            return self._values["success_safety"] == self._values["safety"]

    def snapshot(self) -> dict[str, int]:
        """Every revision, read together (status)."""
        with self._lock:
            return dict(self._values)
