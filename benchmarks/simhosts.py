"""Simulated hosts for the controller benchmark: a host's durable records, as the node
agent keeps them, and the registration and heartbeat bodies it sends, built with
``gridctl.node.reports`` as a real node builds them.

A heartbeat is serialised once per change of the host's state, with the fields that
change per beat (each reported age, which grows with the clock, and the receipts not
yet acknowledged) left as slots filled in per beat: the body sent is byte for byte
what ``reports.heartbeat`` gives at that moment, for a fraction of the CPU, so the
load generators leave the controller its share of the machine.

Like the node agent (``gridctl.node.inventory``), a host sends its full inventory
when it changed since the last one the controller took, every
``FULL_REFRESH_SECONDS``, and when the controller asks for it; every other heartbeat
is a lease renewal (``reports.lease``) naming that inventory's digest.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from gridctl.domain.states import HostState, ResidencyState
from gridctl.node import reports
from gridctl.node.inventory import FULL_REFRESH_SECONDS, inventory_digest
from gridctl.node.records import CachedArtifact, Receipt, ResidencyRecord

MEMORY_MB = 640
SHA = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"

# --- a heartbeat serialised once per state ----------------------------------------------

_SLOT = "@@gridctl-bench-slot-{}@@"
_SLOTS = re.compile(r'"@@gridctl-bench-slot-(\d+)@@"')


@dataclass(frozen=True)
class AgedBody:
    """A JSON body serialised once, with the fields that change per beat left as slots:
    each age is ``now - since`` rounded as ``reports`` rounds it, and one slot takes the
    acknowledgements. ``render`` gives what ``json.dumps`` gives for the body built at
    ``now`` with those acknowledgements."""

    parts: tuple[str, ...]
    slots: tuple[float | None, ...]  # per slot: the ``since`` of an age; None: the acks

    def render(self, now: float, acknowledgements: str) -> bytes:
        out = [self.parts[0]]
        for since, part in zip(self.slots, self.parts[1:], strict=True):
            if since is None:
                out.append(acknowledgements)
            else:
                out.append(repr(round(max(0.0, now - since), 3)))  # reports._age, as JSON
            out.append(part)
        return "".join(out).encode()


def aged_body(body: dict[str, Any], sinces: dict[tuple[str, int, str], float]) -> AgedBody:
    """``body`` (a heartbeat built by ``reports``) with the ages named in ``sinces``
    (``(list, row, field) -> since`` inside the allocator envelope) and the
    acknowledgements turned into slots."""
    envelope = body["allocator"]
    slots: list[float | None] = []
    for (rows, index, name), since in sinces.items():
        envelope[rows][index][name] = _SLOT.format(len(slots))
        slots.append(since)
    body["acknowledgements"] = _SLOT.format(len(slots))
    slots.append(None)
    pieces = _SLOTS.split(json.dumps(body))
    parts, order = pieces[0::2], [int(i) for i in pieces[1::2]]
    if sorted(order) != list(range(len(slots))):
        raise AssertionError(f"a slot is missing from the serialised body: {order}")
    return AgedBody(tuple(parts), tuple(slots[i] for i in order))


# --- a simulated host --------------------------------------------------------------------


@dataclass
class SimHost:
    """One host's durable records, as the node agent keeps them, and the bodies it sends."""

    host_id: str
    token: str
    health_url: str
    index: int
    clock: Callable[[], float] = time.time
    cached: dict[str, CachedArtifact] = field(default_factory=dict)
    residencies: dict[str, ResidencyRecord] = field(default_factory=dict)
    receipts: list[Receipt] = field(default_factory=list)  # not yet acknowledged
    executed: set[str] = field(default_factory=set)
    registered: bool = False
    refresh_seconds: float = FULL_REFRESH_SECONDS
    _bodies: dict[bool, AgedBody] = field(default_factory=dict)  # per request_commands
    _leases: dict[bool, tuple[str, str]] = field(default_factory=dict)  # around the acks
    _acks: str = "[]"
    _digest: str | None = None  # of the inventory as it is now (per state)
    _taken: str | None = None  # the digest of the full inventory the controller holds
    _taken_at: float = 0.0
    sent_full: bool = False  # whether the last heartbeat built carried the inventory

    @property
    def facts(self) -> reports.HostFacts:
        return reports.HostFacts(
            host_id=self.host_id,
            capacity_mb=4096,
            failure_domain=f"zone-{self.index % 16}",
            tags=("bench",),
            external_mb=0,
        )

    SAMPLE = reports.ResourceSample(
        total_mb=8192,
        available_mb=6144,
        managed_rss_mb=0,
        disk_free_mb=100_000,
        disk_total_mb=200_000,
    )

    def records(self) -> list[ResidencyRecord]:
        return [self.residencies[m] for m in sorted(self.residencies)]

    def artifacts(self) -> list[CachedArtifact]:
        return [self.cached[m] for m in sorted(self.cached)]

    def endpoint_of(self, record: ResidencyRecord) -> str:
        return f"{self.health_url}/{self.host_id}/{record.model_id}"

    def envelope(self, now: float) -> dict[str, object]:
        return reports.allocator_envelope(
            HostState.ACCEPTING,
            self.records(),
            self.artifacts(),
            now,
            endpoint_of=self.endpoint_of,
            engine_api_key=f"engine-key-{self.host_id}",
            max_concurrency=2,
        )

    def registration(self) -> bytes:
        envelope = self.envelope(self.clock())
        body = reports.registration(
            self.facts,
            self.SAMPLE,
            envelope,
            reports.ready_models(self.records()),
            inventory_digest=self.digest(),
        )
        self.sent_full = True
        return json.dumps(body).encode()

    def digest(self) -> str:
        """The label of the inventory as it is now (computed once per state change)."""
        if self._digest is None:
            resources = reports.resources(self.facts, self.SAMPLE)
            self._digest = inventory_digest(resources, self.envelope(self.clock()))
        return self._digest

    def answered(self, answer: dict[str, Any]) -> None:
        """The controller took the last body sent (2xx) and answered ``answer``."""
        if self.sent_full:
            self._taken, self._taken_at = self.digest(), self.clock()
        if answer.get("send_full_inventory") is True:
            self._taken = None

    def reference_heartbeat(self, now: float, *, request_commands: bool) -> dict[str, object]:
        """The heartbeat exactly as the node agent builds it at ``now``."""
        return reports.heartbeat(
            self.facts,
            self.SAMPLE,
            self.envelope(now),
            receipts=self.receipts,
            request_commands=request_commands,
            active_tasks=0,
            queue_depth=0,
            inventory_digest=self.digest(),
        )

    def heartbeat(self, *, request_commands: bool) -> bytes:
        """A lease renewal, or when the inventory is due the body of
        ``reference_heartbeat(now)``, each serialised once per state change."""
        now = self.clock()
        digest = self.digest()
        self.sent_full = self._taken != digest or now - self._taken_at >= self.refresh_seconds
        if not self.sent_full:
            lease = self._leases.get(request_commands)
            if lease is None:
                lease = self._leases[request_commands] = self._build_lease(request_commands)
            return (lease[0] + self._acks + lease[1]).encode()
        body = self._bodies.get(request_commands)
        if body is None:
            body = self._bodies[request_commands] = self._build(request_commands)
        return body.render(now, self._acks)

    def _build_lease(self, request_commands: bool) -> tuple[str, str]:
        built = reports.lease(
            self.host_id,
            self.digest(),
            receipts=(),
            request_commands=request_commands,
            active_tasks=0,
            queue_depth=0,
        )
        built["acknowledgements"] = _SLOT.format(0)
        before, _index, after = _SLOTS.split(json.dumps(built))
        return before, after

    def _build(self, request_commands: bool) -> AgedBody:
        built = reports.heartbeat(
            self.facts,
            self.SAMPLE,
            self.envelope(self.clock()),
            receipts=(),
            request_commands=request_commands,
            active_tasks=0,
            queue_depth=0,
            inventory_digest=self.digest(),
        )
        sinces: dict[tuple[str, int, str], float] = {}
        for index, record in enumerate(self.records()):
            for name, since in (
                ("loaded_age_seconds", record.loaded_at),
                ("last_used_age_seconds", record.last_used_at),
            ):
                if since is not None:
                    sinces[("residencies", index, name)] = since
        for index, artifact in enumerate(self.artifacts()):
            for name, since in (
                ("cached_age_seconds", artifact.cached_at),
                ("last_used_age_seconds", artifact.last_used_at),
            ):
                if since is not None:
                    sinces[("cached_models", index, name)] = since
        return aged_body(built, sinces)

    def acknowledged(self, sent: Sequence[Receipt]) -> None:
        """The controller took these receipts (the agent marks them acknowledged)."""
        if sent:
            done = {r.action_id for r in sent}
            self.receipts = [r for r in self.receipts if r.action_id not in done]
            self._acks = json.dumps([r.acknowledgement() for r in self.receipts])

    def execute(self, command: dict[str, Any]) -> bool:
        """Run one command at once; its receipt goes with the next heartbeat. False for a
        re-delivered command (harmless: it is not run again)."""
        action_id = str(command["action_id"])
        if action_id in self.executed:
            return False
        self.executed.add(action_id)
        now = self.clock()
        kind, model = str(command["kind"]), str(command["model_id"])
        sha = str(command.get("artifact_sha256") or SHA)
        status, reason = "succeeded", ""
        if kind == "load":
            self.cached[model] = CachedArtifact(
                model, sha, f"/cache/{sha}", 300_000_000, cached_at=now
            )
        elif kind == "warm":
            slot = len(self.residencies)
            self.residencies[model] = ResidencyRecord(
                model_id=model,
                state=ResidencyState.READY,
                memory_mb=MEMORY_MB,
                artifact_sha256=self.cached[model].sha256 if model in self.cached else sha,
                port=20000 + slot,
                pid=100_000 + slot,
                loaded_at=now,
            )
        elif kind == "drain" and model in self.residencies:
            self.residencies[model] = replace(
                self.residencies[model], state=ResidencyState.DRAINING
            )
        elif kind == "unload":
            self.residencies.pop(model, None)
        elif kind == "evict":
            self.cached.pop(model, None)
        elif kind != "drain":
            status, reason = "rejected", "unknown_command"
        self.receipts.append(
            Receipt(
                action_id=action_id,
                kind=kind,
                model_id=model,
                status=status,
                message=kind,
                reason=reason,
                duration_seconds=0.01,
                artifact_fetched=kind == "load",
                received_at=now,
                finished_at=now,
            )
        )
        self._acks = json.dumps([r.acknowledgement() for r in self.receipts])
        self._bodies.clear()
        self._leases.clear()
        self._digest = None  # the inventory changed: the next heartbeat carries it
        return True
