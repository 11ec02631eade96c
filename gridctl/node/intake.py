"""Command intake: schema check, the shared authority fence, and a durable receipt.

Every command a control heartbeat returns passes through here before anything
happens. The fence itself is the reconciler's pure ``admit_command``; this
module supplies the node's durable fence memory, measures the request on the
local monotonic clock, persists the advanced fence *before* the command may run,
and records a receipt (``accepted`` or ``rejected`` with the rule's code).
A command id seen before is not run twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gridctl.config.schemas import validator
from gridctl.errors import WireError
from gridctl.logs import command_fields
from gridctl.node.records import FenceMemory, Receipt
from gridctl.node.statestore import NodeStateStore
from gridctl.reconcile.fencing import FencedCommand, NodeFenceState, admit_command
from gridctl.reconcile.generations import PlanGeneration

COMMAND_SCHEMA = "wire/command.schema.json"
log = logging.getLogger("gridctl.node.intake")


@dataclass(frozen=True)
class Admitted:
    """A command accepted for execution, with the local deadline of its authority."""

    command: dict[str, Any]
    deadline: float | None  # local monotonic instant; None = no TTL given (legacy)


def fence_state(host_id: str, memory: FenceMemory) -> NodeFenceState:
    generation = None
    if memory.latest_plan_generation:
        try:
            generation = PlanGeneration.parse(memory.latest_plan_generation)
        except WireError:
            generation = None
    return NodeFenceState(
        host_id=host_id,
        highest_term=memory.highest_term,
        controller_id=memory.controller_id,
        generation=generation,
    )


def fence_memory(state: NodeFenceState) -> FenceMemory:
    return FenceMemory(
        highest_term=state.highest_term,
        controller_id=state.controller_id,
        fenced_seen=state.fenced,
        latest_plan_generation=None if state.generation is None else str(state.generation),
    )


def first_schema_error(command: object) -> str | None:
    for error in validator(COMMAND_SCHEMA).iter_errors(command):
        pointer = "/" + "/".join(str(p) for p in error.absolute_path)
        return f"{pointer}: {error.message[:200]}"
    return None


class CommandIntake:
    """Admits commands for one host against its durable fence memory."""

    def __init__(
        self,
        store: NodeStateStore,
        host_id: str,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store, self.host_id = store, host_id
        self.monotonic, self.clock = monotonic, clock

    def admit(
        self,
        command: Mapping[str, Any],
        *,
        remaining_ttl: float | None,
        request_duration: float,
    ) -> Admitted | None:
        """Return the command if it may run; otherwise record why not and return None."""
        action_id = command.get("action_id")
        if not isinstance(action_id, str) or not action_id or len(action_id) > 128:
            return None  # nothing to acknowledge against
        if self.store.receipt(action_id) is not None:
            self.store.mark_unacked(action_id)  # a redelivery: acknowledge the first receipt again
            return None
        problem = first_schema_error(command)
        if problem is not None:
            self._receipt(command, "rejected", "malformed_command", problem)
            return None
        state = fence_state(self.host_id, self.store.fence_memory())
        admission = admit_command(
            state,
            FencedCommand.from_wire(command),
            remaining_ttl,
            request_duration=request_duration,
            now_monotonic=self.monotonic(),
        )
        if not admission.accepted:
            reason = admission.reason.value if admission.reason else "rejected"
            self._receipt(command, "rejected", reason, f"fence: {reason}")
            return None
        self.store.save_fence_memory(fence_memory(admission.state))
        self._receipt(command, "accepted", "", "accepted")
        return Admitted(dict(command), admission.deadline)

    def _receipt(self, command: Mapping[str, Any], status: str, reason: str, message: str) -> None:
        log.info(
            "delivered action %s %s %s: %s",
            command["action_id"],
            str(command.get("kind", "?"))[:32],
            str(command.get("model_id", "?"))[:128],
            message,
            extra=command_fields(command, "delivered"),
        )
        self.store.put_receipt(
            Receipt(
                action_id=str(command["action_id"]),
                kind=str(command.get("kind", "?"))[:32],
                model_id=str(command.get("model_id", "?"))[:128],
                status=status,
                message=message,
                reason=reason,
                command=dict(command),
                received_at=self.clock(),
                finished_at=self.clock() if status == "rejected" else None,
            )
        )
