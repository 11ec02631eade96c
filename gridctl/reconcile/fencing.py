"""Command admission on a node: the authority fence, as a pure function.

``admit_command`` is shared by the node daemon. The node keeps a durable
``NodeFenceState``; for every command it calls ``admit_command`` with the
remaining authority TTL the controller computed in its own clock and the
request's complete duration measured on the node's monotonic clock, persists
the returned state when accepted, and only then acts. Rules, in order:

1. ``wrong_host`` — the command names another host.
2. ``not_executable`` — a recommendation is never executed.
3. ``malformed_generation`` — the plan generation does not parse.
4. Term fence: a fenced command (term > 0) must name its controller
   (``missing_controller_id``); a lower term than the highest seen is
   ``stale_term`` forever; a second controller identity in the same term is
   ``conflicting_controller``; once any fenced command was seen, a term-zero
   (legacy) command is ``legacy_after_fenced``.
5. TTL: a fenced command without a remaining TTL is ``missing_ttl``; the TTL
   minus the request's duration must be positive, else ``expired_ttl``. The
   admission returns the local monotonic deadline of that authority.
6. Generation: within one epoch an older sequence is ``stale_generation``; a
   different epoch is accepted only with a strictly higher term
   (``generation_epoch_changed`` otherwise).

A rejection never changes the state; an acceptance may raise the term, adopt
the controller identity and advance the generation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from gridctl.errors import FenceError, WireError
from gridctl.reconcile.generations import PlanGeneration


class AdmissionReason(StrEnum):
    WRONG_HOST = "wrong_host"
    NOT_EXECUTABLE = "not_executable"
    MALFORMED_GENERATION = "malformed_generation"
    MISSING_CONTROLLER_ID = "missing_controller_id"
    STALE_TERM = "stale_term"
    CONFLICTING_CONTROLLER = "conflicting_controller"
    LEGACY_AFTER_FENCED = "legacy_after_fenced"
    MISSING_TTL = "missing_ttl"
    EXPIRED_TTL = "expired_ttl"
    STALE_GENERATION = "stale_generation"
    GENERATION_EPOCH_CHANGED = "generation_epoch_changed"


@dataclass(frozen=True)
class NodeFenceState:
    """What a node durably remembers about command authority."""

    host_id: str
    highest_term: int = 0
    controller_id: str | None = None
    generation: PlanGeneration | None = None

    @property
    def fenced(self) -> bool:
        """Once a fenced command was accepted, term zero is closed for good."""
        return self.highest_term > 0


@dataclass(frozen=True)
class FencedCommand:
    """The authority-relevant fields of a wire command."""

    action_id: str
    node_id: str
    plan_generation: str
    executable: bool
    controller_term: int = 0
    controller_id: str | None = None
    controller_lease_expires_at: float | None = None

    @classmethod
    def from_wire(cls, data: Mapping[str, object]) -> FencedCommand:
        term = data.get("controller_term", 0)
        expires = data.get("controller_lease_expires_at")
        controller = data.get("controller_id")
        return cls(
            action_id=str(data["action_id"]),
            node_id=str(data["node_id"]),
            plan_generation=str(data["plan_generation"]),
            executable=data.get("executable") is True,
            controller_term=term if isinstance(term, int) else 0,
            controller_id=controller if isinstance(controller, str) else None,
            controller_lease_expires_at=float(expires)
            if isinstance(expires, int | float)
            else None,
        )


@dataclass(frozen=True)
class Admission:
    accepted: bool
    state: NodeFenceState
    reason: AdmissionReason | None = None
    deadline: float | None = None  # local monotonic instant the authority ends

    def raise_if_rejected(self) -> None:
        if not self.accepted and self.reason is not None:
            raise FenceError(self.reason.value)


def _reject(state: NodeFenceState, reason: AdmissionReason) -> Admission:
    return Admission(accepted=False, state=state, reason=reason)


def admit_command(
    state: NodeFenceState,
    command: FencedCommand,
    remaining_ttl: float | None,
    *,
    request_duration: float = 0.0,
    now_monotonic: float = 0.0,
) -> Admission:
    """Accept or reject ``command``; see the module docstring for the rules."""
    if command.node_id != state.host_id:
        return _reject(state, AdmissionReason.WRONG_HOST)
    if not command.executable:
        return _reject(state, AdmissionReason.NOT_EXECUTABLE)
    try:
        generation = PlanGeneration.parse(command.plan_generation)
    except WireError:
        return _reject(state, AdmissionReason.MALFORMED_GENERATION)
    term = command.controller_term
    if term > 0:
        if not command.controller_id:
            return _reject(state, AdmissionReason.MISSING_CONTROLLER_ID)
        if term < state.highest_term:
            return _reject(state, AdmissionReason.STALE_TERM)
        if term == state.highest_term and command.controller_id != state.controller_id:
            return _reject(state, AdmissionReason.CONFLICTING_CONTROLLER)
    elif state.fenced:
        return _reject(state, AdmissionReason.LEGACY_AFTER_FENCED)
    deadline: float | None = None
    if remaining_ttl is None:
        if term > 0:
            return _reject(state, AdmissionReason.MISSING_TTL)
    else:
        left = remaining_ttl - max(request_duration, 0.0)
        if not left > 0:
            return _reject(state, AdmissionReason.EXPIRED_TTL)
        deadline = now_monotonic + left
    known = state.generation
    if known is not None:
        if not generation.comparable(known):
            if term <= state.highest_term:
                return _reject(state, AdmissionReason.GENERATION_EPOCH_CHANGED)
        elif generation.older_than(known):
            return _reject(state, AdmissionReason.STALE_GENERATION)
    accepted = replace(
        state,
        highest_term=max(term, state.highest_term),
        controller_id=command.controller_id if term > 0 else state.controller_id,
        generation=generation,  # never older than the known one, by the checks above
    )
    return Admission(accepted=True, state=accepted, deadline=deadline)
