"""Command delivery: the delivery gate applied to one host's poll, with its durable marker.

A poll is answered with the pending actions ``gridctl.tick.delivery_gate``
lets through, in service order, each fenced with the authority term and plan
generation. The delivery marker is written durably before the answer leaves;
then every newly delivered destructive action is put through the gate again on
facts read afresh (a replacement may have lost its route or its lease margin
while the marker was written). A destructive batch that no longer passes keeps
its actions pending: their markers are removed and they leave the answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any, Protocol

from gridctl.controller.desired import DesiredProvider
from gridctl.controller.registry import Registry
from gridctl.controller.revisions import Revisions
from gridctl.controller.steering import Steering
from gridctl.controller.store import ControllerStore
from gridctl.controller.tickview import TickView
from gridctl.domain import ActionKind, ControllerPolicy, DesiredState, Mode
from gridctl.reconcile import PendingAction, command_to_json, delivery_order
from gridctl.tick.delivery import (
    DeliveryFacts,
    RouteLease,
    Verdict,
    Withheld,
    delivery_gate,
    replica_problem,
)

log = logging.getLogger(__name__)


class Issuer(Protocol):
    """What delivery reads from the controller (``Controller`` is one)."""

    desired: DesiredProvider
    registry: Registry
    store: ControllerStore
    revisions: Revisions
    steering: Steering
    view: TickView
    clock: Callable[[], float]

    def event(self, event: str, **fields: Any) -> None: ...
    def effective_mode(self, policy_mode: Mode | None = None) -> tuple[Mode, str | None]: ...
    def approved_actions(self, desired: DesiredState, mode: Mode) -> frozenset[str]: ...
    def policy(self) -> ControllerPolicy: ...


class Delivery:
    """Answers command polls for one controller (thread-safe: one poll selects at a time)."""

    def __init__(self, ctl: Issuer) -> None:
        self.ctl = ctl
        self._selecting = threading.Lock()
        self.safety_error: str | None = None  # the last destructive-safety hold (status)
        # markers a suppressed poll could not remove: {action_id: why} (shown in status)
        self.uncertain_markers: dict[str, str] = {}

    def facts(self, host_id: str, mine: Iterable[PendingAction]) -> DeliveryFacts:
        """The gate's facts for ``host_id``'s poll, read now from the controller."""
        ctl = self.ctl
        now = ctl.clock()
        mode, _ = ctl.effective_mode()
        desired = ctl.desired.current
        approved = ctl.approved_actions(desired, mode) if desired else frozenset()
        view = ctl.view
        undelivered = [p.action for p in mine if not p.delivered]
        routes = {
            model: tuple(
                RouteLease(r.host_id, ctl.registry.route_lease_left(model, r.host_id, now))
                for r in ctl.registry.routable(model, now)
            )
            for model in sorted({a.model_id for a in undelivered if a.kind.destructive})
        }
        evicting = any(a.kind is ActionKind.EVICT for a in undelivered)
        host = ctl.registry.host_snapshot(host_id, now) if evicting else None
        return DeliveryFacts(
            now=now,
            mode=mode,
            issuing=view.generation is not None and not ctl.steering.is_follower(),
            plan=view.plan,
            min_route_lease_seconds=ctl.policy().destructive_min_route_lease_seconds,
            safety_current=ctl.revisions.safety_current(),
            approved=approved,
            routes=routes,
            hosts={host_id: host} if host is not None else {},
            profiles={p.name: p for p in desired.profiles} if desired else {},
        )

    def commands_for(self, host_id: str, *, ticked: bool = True) -> list[dict[str, Any]]:
        """Executable commands for ``host_id``, durably marked delivered before returning.

        ``ticked`` says whether a successful tick covered the poll's causal revision;
        without one nothing new is delivered.
        """
        if not ticked:
            return []
        ctl = self.ctl
        with self._selecting:
            mine = [p for p in ctl.store.pending() if p.action.host_id == host_id]
            facts = self.facts(host_id, mine)
            if not facts.issuing or (facts.mode is not Mode.AUTOMATIC and not facts.approved):
                return []
            chosen: list[PendingAction] = []
            for held in delivery_order(mine):
                verdict = delivery_gate(held, facts)
                if verdict.deliver:
                    chosen.append(held)
                else:
                    self._note_hold(held, verdict)
            newly = [p for p in chosen if not p.delivered]
            if newly:
                # the delivery marker is durable before the response leaves
                ctl.store.mark_delivered([p.action_id for p in newly], facts.now)
                withdrawn = self._revalidate(host_id, newly)
                chosen = [p for p in chosen if p.action_id not in withdrawn]
                for held in newly:
                    if held.action_id not in withdrawn:
                        ctl.event(
                            "delivered",
                            action_id=held.action_id,
                            host_id=host_id,
                            model_id=held.action.model_id,
                            message=held.action.kind.value,
                        )
            return [self._command(p) for p in chosen]

    def _note_hold(self, held: PendingAction, verdict: Verdict) -> None:
        if verdict.withheld is not None and verdict.withheld.safety:
            self.safety_error = verdict.reason
        elif verdict.withheld is Withheld.EVICTION_INVALID:
            self.ctl.event(
                "eviction_withheld",
                action_id=held.action_id,
                host_id=held.action.host_id,
                model_id=held.action.model_id,
                message=verdict.reason,
            )

    def _revalidate(self, host_id: str, newly: list[PendingAction]) -> set[str]:
        """The final proof, after the markers are durable: every newly delivered destructive
        action through the gate again on facts read now. Returns the withdrawn action ids."""
        batch = [p for p in newly if p.action.kind.destructive]
        if not batch:
            return set()
        fresh = self.facts(host_id, batch)
        # the gate's destructive proof again, on routes read now; the safety revision is
        # judged once for the batch, with its own words
        found = [
            problem
            for held in batch
            if (problem := replica_problem(held.action.model_id, host_id, fresh)) is not None
        ]
        if not fresh.safety_current:
            found.append("destructive safety changed while the delivery marker was written")
        if not found:
            return set()
        withdrawn = {p.action_id for p in batch}
        self.safety_error = found[0]
        try:
            self.ctl.store.clear_delivered(sorted(withdrawn))
        except Exception as exc:  # the marker stays: conservatively "maybe delivered"
            log.exception("could not remove delivery markers of a suppressed poll")
            for action_id in withdrawn:
                self.uncertain_markers[action_id] = (
                    f"delivery marker kept after a suppressed poll: {type(exc).__name__}: {exc}"
                )
        else:
            for action_id in withdrawn:
                self.uncertain_markers.pop(action_id, None)
        for held in batch:
            self.ctl.event(
                "delivery_withdrawn",
                action_id=held.action_id,
                host_id=host_id,
                model_id=held.action.model_id,
                message=self.safety_error,
            )
        return withdrawn

    def _command(self, held: PendingAction) -> dict[str, Any]:
        ctl = self.ctl
        authority = ctl.steering.authority
        command = command_to_json(
            held.action,
            plan_generation=str(ctl.view.generation),
            controller_term=authority.term,
            controller_id=authority.controller_id,
            controller_lease_expires_at=authority.lease_expires_at,
        )
        return self._with_artifact_source(command)

    def heartbeat_response(self, host_id: str, commands: list[dict[str, Any]]) -> dict[str, Any]:
        """A node's answer: the mode, how long the controller's authority still runs, the
        commands, and where the leader is when this controller is a follower."""
        ctl = self.ctl
        steering = ctl.steering
        mode, _ = steering.cached_mode(ctl.policy().mode)
        ttl = None
        if steering.holds_authority() and steering.authority.lease_expires_at is not None:
            ttl = max(0.0, steering.authority.lease_expires_at - ctl.clock())
        allocator: dict[str, Any] = {
            "mode": mode.value,
            "controller_lease_ttl_seconds": ttl,
            "commands": commands,
        }
        leader = steering.leader_url()
        if leader is not None:
            allocator["leader_url"] = leader  # a follower points the node at authority
        return {
            "ttl_seconds": ctl.policy().command_ttl_seconds,
            "model_last_used_at": ctl.registry.last_used_watermarks(),
            "allocator": allocator,
        }

    def _with_artifact_source(self, command: dict[str, Any]) -> dict[str, Any]:
        """Add the profile's operator-authorised source when the digest is the same."""
        ctl = self.ctl
        desired = ctl.desired.current
        profile = desired.profile(command["model_id"]) if desired else None
        if profile is not None and profile.chat_template and command.get("kind") == "warm":
            command["chat_template"] = profile.chat_template
        if profile is not None and command.get("kind") == "warm":
            command["endpoints"] = list(profile.endpoints)
        if profile is None or profile.artifact.source is None:
            return command
        if profile.artifact.sha256 != command.get("artifact_sha256"):
            return command
        command["artifact_source"] = profile.artifact.source
        command["artifact_size_mb"] = profile.artifact.size_mb
        if command.get("kind") == "load" and profile.artifact.sha256:
            mirrors = ctl.registry.artifact_mirrors(
                profile.artifact.sha256, exclude=command["node_id"], now=ctl.clock()
            )
            command["artifact_mirrors"] = mirrors[: ctl.policy().artifact_fanout]
        return command


__all__ = ["Delivery"]
