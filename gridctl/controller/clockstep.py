"""A wall clock that stepped back: recorded history moved to now, once, durably.

History recorded in the future means the clock stepped back (an NTP
correction, a restored VM). Those times move to ``now``, in the store and in the
registry's held reports (a residency's load time stays as the old clock made it
until the node's next full inventory, minutes later), so cooldowns and fences
are not stretched by the size of the step; a forward step (the wall clock ran
ahead of the monotonic clock) moves the heartbeats received before it forward by
the step, so no living host looks stale for its size; smaller differences are ordinary
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
        monotonic: Callable[[], float] | None = None,
        forward: Callable[[float, float], int] | None = None,
    ) -> None:
        self.store = store
        self._event = event
        # the held reports' own times (``Registry.rebase_future``), moved with the store's
        self._rebase = rebase
        # a forward step: told by ``monotonic``, the held heartbeats moved by ``forward``
        self._monotonic, self._forward = monotonic, forward
        self._last: tuple[float, float] | None = None  # (wall, monotonic) of the last check
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
        self._check_forward(now)

    def _check_forward(self, now: float) -> None:
        """A wall clock that ran ahead of elapsed time stepped forward: every host's last
        heartbeat would look the size of the step old until its next one, and a tick in
        that second would replace replicas on hosts that are alive. Heartbeats received
        before the step move forward by it (``Registry.forward_heartbeats``)."""
        if self._monotonic is None or self._forward is None:
            return
        elapsed_now = self._monotonic()
        last, self._last = self._last, (now, elapsed_now)
        if last is None:
            return
        step = (now - last[0]) - (elapsed_now - last[1])
        if step > CLOCK_STEP_TOLERANCE_SECONDS:
            # a heartbeat taken before the step reads at most the last check's time plus
            # what elapsed since (``now - step``); one taken after it, at least the last
            # check's time plus the step: the two never meet while the step exceeds the
            # tolerance and the ticks come seconds apart
            moved = self._forward(step, now - step)
            self._event(
                "clock_stepped_forward",
                message=f"{step:.0f}s: {moved} host heartbeat(s) moved forward with it",
            )
