"""Who may issue, and in which mode: the authority lease as the controller holds it, and the
mode in force (git's mode, the operator's override, automatic refused without authority).

Renewal is serialised; reads of "do I hold authority right now" consult the
lease's own clock at that instant, never the last tick's answer. A takeover from
another controller is reported to ``on_takeover`` so the controller can continue
from what the other one left in the store.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gridctl.controller.authority import Grant
from gridctl.controller.store import ControllerStore
from gridctl.controller.stores import Lease
from gridctl.domain import Mode

REFUSED_NO_AUTHORITY = "automatic refused: another controller holds authority"


@dataclass
class ModeOverride:
    mode: Mode
    reason: str
    set_at: float
    source: str = "operator"


@dataclass
class Authority:
    """Who may issue executable commands: kept current from the authority lease."""

    controller_id: str
    term: int = 0
    holds: bool = False
    lease_expires_at: float | None = None


class Steering:
    def __init__(
        self,
        store: ControllerStore,
        lease: Lease | None,
        controller_id: str,
        event: Callable[..., None],
        on_takeover: Callable[[], None],
    ) -> None:
        self.store = store
        self.lease = lease
        self.authority = Authority(controller_id=controller_id)
        self._event = event
        self._on_takeover = on_takeover
        self._renew_lock = threading.Lock()
        self._mode: tuple[Mode, str | None] | None = None  # effective mode, refreshed by ticks

    def renew(self) -> None:
        """Renew or take the single-writer lease (without a state dir there is none)."""
        if self.lease is None:
            return
        with self._renew_lock:
            grant = self.lease.acquire()
            if grant is None:
                if self.authority.holds:
                    self._event("authority_lost", message=self.lost_reason())
                self.authority.holds = False
                self.authority.lease_expires_at = None
                return
            if not self.authority.holds or grant.term != self.authority.term:
                self._event("authority_acquired", message=f"term {grant.term}")
                if self._took_over(grant):
                    self._on_takeover()
            self.authority.holds = True
            self.authority.term = grant.term
            self.authority.lease_expires_at = grant.expires_at
        self.store.note_term(grant.term)

    def _took_over(self, grant: Grant) -> bool:
        previous = grant.previous
        return previous is not None and previous.controller_id not in (
            "",
            self.authority.controller_id,
        )

    def lost_reason(self) -> str:
        failed = self.lease.last_error if self.lease is not None else None
        return f"lease renewal failed: {failed}" if failed else "another controller holds the lease"

    def holds_authority(self) -> bool:
        """Authority right now: the last renewal succeeded and the grant has not run out
        (by the lease's own clocks, read at this instant, not at the last tick)."""
        if not self.authority.holds:
            return False
        return self.lease is None or self.lease.current() is not None

    def is_follower(self) -> bool:
        """A lease exists and another controller (or nobody reachable) holds it: this
        process plans for status but never enqueues, delivers or persists decisions."""
        return self.lease is not None and not self.holds_authority()

    def leader_url(self) -> str | None:
        """Where the controller holding authority serves, when this one does not."""
        if self.lease is None or self.holds_authority():
            return None
        return self.lease.leader_address()

    def warnings(self) -> list[str]:
        return list(self.lease.warnings) if self.lease is not None else []

    def override(self) -> ModeOverride | None:
        mode = self.store.mode_override()
        if mode is None:
            return None
        info = self.store.overrides()
        detail: Any = info.get("mode") or {}
        reason: Any = info.get("mode_reason") or {}
        return ModeOverride(
            mode=mode,
            reason=str(reason.get("reason", "")) if isinstance(reason, dict) else "",
            set_at=float(reason.get("set_at", 0.0)) if isinstance(reason, dict) else 0.0,
            source=str(detail.get("source", "operator")) if isinstance(detail, dict) else "",
        )

    def cached_mode(self, policy_mode: Mode) -> tuple[Mode, str | None]:
        """``effective_mode()`` as of the last tick or mode change, with authority read now:
        what a heartbeat answer says, without a store read on the event loop."""
        cached = self._mode
        if cached is None:
            return self.effective_mode(policy_mode, remember=True)
        mode, refused = cached
        if mode is Mode.AUTOMATIC and not self.holds_authority():
            return Mode.RECOMMEND, REFUSED_NO_AUTHORITY
        return mode, refused

    def set_override(self, mode: Mode | None, reason: str, policy_mode: Mode, at: float) -> None:
        """Set (or clear, with None) the operator's mode; raises PermanentError when the
        store cannot honour automatic."""
        before, _ = self.effective_mode(policy_mode, remember=True)
        self.store.set_mode_override(mode)
        if mode is None:
            self._event("mode_override_cleared", message=reason)
        else:
            self.store.set_override("mode_reason", {"reason": reason, "set_at": at})
            self._event("mode_override_set", message=f"{mode.value}: {reason}".strip(": "))
        after, _ = self.effective_mode(policy_mode, remember=True)
        if before is Mode.AUTOMATIC and after is not Mode.AUTOMATIC:
            self._event("automatic_left", message="pending commands are cancelled")

    def effective_mode(self, policy_mode: Mode, *, remember: bool) -> tuple[Mode, str | None]:
        """The mode in force for git's ``policy_mode`` and, when automatic was asked for
        but refused, why. ``remember`` refreshes what heartbeat answers carry."""
        mode, refused = self.store.effective_mode(policy_mode)
        if remember:
            self._mode = (mode, refused)
        if mode is Mode.AUTOMATIC and not self.holds_authority():
            if self.lease is not None and self.lease.last_error:
                return Mode.RECOMMEND, f"automatic refused: {self.lost_reason()}"
            return Mode.RECOMMEND, REFUSED_NO_AUTHORITY
        return mode, refused
