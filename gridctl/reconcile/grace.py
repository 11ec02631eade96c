"""Membership-recovery grace after a controller restart.

Restored commands keep their governor slots for a bounded grace that begins
at the first reconciliation tick; destructive work waits, because a fleet view
rebuilt from re-registrations may still be incomplete. A backwards wall-clock
jump during the grace rebases the anchor to the corrected time, so a command
for a host that never returns cannot hold mutation budget until the old,
future-dated end of the grace.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.domain import ControllerPolicy
from gridctl.reconcile.records import ControllerMemory, RestartGrace


def advance_grace(memory: ControllerMemory, now: float) -> ControllerMemory:
    """Anchor the grace at the first tick; rebase it when the clock went backwards."""
    grace = memory.grace
    if grace is None:
        return memory
    if grace.anchor is None or now < grace.anchor:
        return replace(memory, grace=RestartGrace(grace.restarted_at, anchor=now))
    return memory


def grace_active(memory: ControllerMemory, policy: ControllerPolicy, now: float) -> bool:
    grace = memory.grace
    if grace is None or grace.anchor is None:
        return False
    return now < grace.anchor + policy.membership_recovery_grace_seconds


def grace_ends_at(memory: ControllerMemory, policy: ControllerPolicy) -> float | None:
    grace = memory.grace
    if grace is None or grace.anchor is None:
        return None
    return grace.anchor + policy.membership_recovery_grace_seconds
