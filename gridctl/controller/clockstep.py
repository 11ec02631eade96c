"""A wall clock that stepped back: recorded history moved to now, once, durably.

History recorded in the future means the clock stepped back (an NTP
correction, a restored VM). Those times move to ``now``, in the store and in the
registry's held reports (a residency's load time stays as the old clock made it
until the node's next full inventory, minutes later), so cooldowns and fences
are not stretched by the size of the step; smaller differences are ordinary
skew between writers and move nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from gridctl.controller.store import ControllerStore

CLOCK_STEP_TOLERANCE_SECONDS = 5.0


class ClockWatch:
    def __init__(
        self,
        store: ControllerStore,
        event: Callable[..., None],
        rebase: Callable[[float], int] | None = None,
    ) -> None:
        self.store = store
        self._event = event
        # the held reports' own times (``Registry.rebase_future``), moved with the store's
        self._rebase = rebase
        self._high: float | None = None  # the latest time seen or recorded (None: unread)

    def check(self, now: float) -> None:
        if self._high is None:
            self._high = self.store.latest_finish() or now
        if now + CLOCK_STEP_TOLERANCE_SECONDS < self._high:
            moved = self.store.rebase_future(now)
            if self._rebase is not None:
                moved += self._rebase(now)
            self._event(
                "clock_stepped_back",
                message=f"{self._high - now:.0f}s: {moved} recorded time(s) moved to now",
            )
            self._high = now
        self._high = max(self._high, now)
