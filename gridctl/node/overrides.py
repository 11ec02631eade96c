"""Local operator overrides and the host lifecycle state they produce.

A local override outranks global desired state: ``gridctl node drain`` on a
laptop stops new work there whatever the controller wants. Overrides are
durable (they live in the node's state database, so a restart keeps them) and
may expire. The sensor-driven protection loop (``protection.py``) decides the
host's own state; an override combines with it and confirmed local safety can
only make the result stricter. These rules are pure.
"""

from __future__ import annotations

from gridctl.domain.states import HostState
from gridctl.node.protection import combine
from gridctl.node.records import Override

OVERRIDE_STATES: dict[str, HostState] = {
    "drain": HostState.DRAINING,
    "pause": HostState.PAUSED,
    "quarantine": HostState.QUARANTINED,
}
MAX_REASON_CHARS = 512


def make_override(kind: str, reason: str, *, now: float, for_seconds: float | None) -> Override:
    """A validated override set at ``now``; ``for_seconds`` makes it expire."""
    if kind not in OVERRIDE_STATES:
        raise ValueError(f"unknown override {kind!r}; expected one of {sorted(OVERRIDE_STATES)}")
    if for_seconds is not None and not for_seconds > 0:
        raise ValueError("--for-seconds must be positive")
    return Override(
        kind=kind,
        reason=reason.strip()[:MAX_REASON_CHARS],
        set_at=now,
        expires_at=None if for_seconds is None else now + for_seconds,
    )


def in_force(override: Override | None, now: float) -> Override | None:
    """The override if it still applies at ``now`` (an expired one is ignored)."""
    if override is None:
        return None
    if override.expires_at is not None and now >= override.expires_at:
        return None
    return override


def host_state(
    override: Override | None, now: float, protected: HostState = HostState.ACCEPTING
) -> HostState:
    """The host lifecycle state reported in heartbeats: override and protection combined."""
    active = in_force(override, now)
    return combine(OVERRIDE_STATES[active.kind] if active else None, protected)


def describe(override: Override | None, now: float) -> dict[str, object] | None:
    """A JSON-ready description for ``gridctl node status``."""
    active = in_force(override, now)
    if active is None:
        return None
    return {
        "kind": active.kind,
        "state": OVERRIDE_STATES[active.kind].value,
        "reason": active.reason,
        "set_at": active.set_at,
        "expires_at": active.expires_at,
        "expires_in_seconds": None
        if active.expires_at is None
        else round(active.expires_at - now, 1),
    }
