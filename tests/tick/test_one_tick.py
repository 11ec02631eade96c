"""One scripted day through the real in-process controller and through the lab's controller.

The controller is the real one (its SQLite store, authority lease, registry and
demand book) fed by simulated nodes speaking the real wire payloads; the lab's
controller is fed the same heartbeats (as host snapshots), the same receipts
and the same router observations. Tick by tick both must produce the same
plan, enqueue and cancel the same actions, and deliver the same commands to
each host. The day has what a decision rule is most likely to differ on:
scale-up under demand, a commit that adds a higher-priority model the full
fleet can take only by preempting, a host drained by its operator, and a
commit that removes a profile (its retirement tombstone).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from gridctl.controller.authority import AuthorityLease
from gridctl.controller.control import Controller
from gridctl.controller.desired import ApiDesired
from gridctl.controller.registry import Registry
from gridctl.controller.store import ControllerStore
from gridctl.demand.intake import RequestObservation
from gridctl.domain import ControllerPolicy, HostSnapshot, Mode, Receipt, ReceiptStatus
from gridctl.lab.control import LabController
from gridctl.lab.strategies import Strategy
from gridctl.planner import plan_to_json
from gridctl.tick import TickInputs, TickOutcome, compute_tick
from tests.controller.simnodes import GEMMA_SHA, SimNode
from tests.controller.storefixtures import FakeClock

STEP = 5.0  # seconds between heartbeat rounds
POLICY = ControllerPolicy(
    mode=Mode.AUTOMATIC,
    mutation_cooldown_seconds=0.0,
    max_concurrent_mutations=4,
    max_concurrent_mutations_per_host=1,
    heartbeat_stale_seconds=45.0,
)


def profile(memory: int, *, priority: int = 50, low: int = 1, high: int = 1) -> dict[str, Any]:
    return {
        "spec": {
            "memory_mb": memory,
            "artifact": {"sha256": GEMMA_SHA},
            "priority": priority,
            "min_replicas": low,
            "max_replicas": high,
            "min_residency_seconds": 0,
            "scale_down_cooldown_seconds": 0,
        }
    }


class Day:
    """The two controllers side by side, and the simulated nodes they command."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = FakeClock(1_800_000_000.0)
        self.desired = ApiDesired(self.clock, policy=POLICY)
        self.desired.put("chat-a", profile(600, priority=40, high=3))
        self.desired.put("chat-b", profile(600, priority=30))
        self.ctl = Controller(
            desired=self.desired,
            registry=Registry(route_lease_seconds=POLICY.route_lease_seconds),
            store=ControllerStore(tmp_path / "store", clock=self.clock),
            clock=self.clock,
            lease=AuthorityLease(tmp_path / "lease", "ctl-1", clock=self.clock),
        )
        self.recorded: list[tuple[TickInputs, TickOutcome]] = []
        self.ctl.compute = self._record
        current = self.desired.current
        assert current is not None
        self.lab = LabController(current, Strategy.SMART, {}, epoch=self.ctl.store.epoch)
        self.nodes = {
            f"host-{i}": SimNode(
                host_id=f"host-{i}",
                client=None,  # type: ignore[arg-type]  (payloads only: no HTTP here)
                token="",
                clock=self.clock,
                capacity_mb=1600,
                failure_domain=f"zone-{i}",
            )
            for i in (1, 2, 3)
        }
        self.delivered: set[str] = set()
        self.held = 0  # polls answered with nothing while a destructive hold was in force
        self.silent: set[str] = set()  # hosts whose heartbeats are lost
        self.deaf: set[str] = set()  # hosts that report but do not poll for commands
        self.seen = {"preemption": 0, "drain": 0, "tombstone": 0, "scale": 0}

    def _record(self, inputs: TickInputs) -> TickOutcome:
        outcome = compute_tick(inputs)
        self.recorded.append((inputs, outcome))
        return outcome

    def start(self) -> None:
        for host_id, node in self.nodes.items():
            body = {
                "role": "allocator",
                "host_id": host_id,
                "models": [],
                "resources": node.resources(),
                "allocator": node.envelope(),
            }
            self.ctl.register(host_id, body)

    def commit(self, change: Any) -> None:
        change(self.desired)
        current = self.desired.current
        assert current is not None
        self.lab.commit(current)

    def demand(self, model: str, requests: int) -> None:
        now = self.clock()
        for i in range(requests):
            seen = RequestObservation(
                t=now - STEP + i * STEP / max(requests, 1),
                endpoint="chat",
                model=model,
                served_model=model,
                host_id=None,
                outcome="ok",
                status=200,
                service_seconds=4.0,
                workload="general",
            )
            self.ctl.demand.observe(seen)
            self.lab.observe(seen)

    def heartbeats(self) -> None:
        now = self.clock()
        for host_id, node in self.nodes.items():
            if host_id in self.silent:
                continue
            acks, node.acks = node.acks, []
            payload = {
                "node_id": host_id,
                "resources": node.resources(),
                "allocator": node.envelope(),
                "request_commands": False,
                "acknowledgements": acks,
            }
            self.ctl.heartbeat(host_id, payload)
            for ack in acks:
                receipt = Receipt(
                    action_id=ack["action_id"],
                    status=ReceiptStatus(ack["status"]),
                    message=ack["message"],
                    duration_seconds=ack["duration_seconds"],
                    artifact_fetched=ack["artifact_fetched"],
                    observed_at=now,
                )
                self.lab.acknowledge(receipt, now)
            for r in node.residencies.values():  # the controller's probe of each engine
                if r.state == "ready":
                    self.ctl.registry.corroborate(
                        host_id, r.model_id, node.endpoint(r.model_id), now
                    )

    def observed(self) -> dict[str, HostSnapshot]:
        """The fleet as the lab sees it: the registry's hosts without what the controller
        learned (the lab learns its own timings from the same receipts)."""
        snapshot = self.ctl.registry.snapshot(self.clock())
        return {h.host_id: replace(h, learned=()) for h in snapshot.hosts}

    def tick(self) -> None:
        now = self.clock()
        assert self.ctl.tick().ok
        inputs, outcome = self.recorded[-1]
        hosts = tuple(replace(h, learned=()) for h in inputs.observed.hosts)
        lab = self.lab.tick(now, hosts, {}, {})
        assert plan_to_json(lab.plan) == plan_to_json(outcome.plan), f"plans differ at {now}"
        assert [e.action for e in lab.result.enqueue] == [
            e.action for e in outcome.result.enqueue
        ], f"enqueued actions differ at {now}"
        assert lab.result.cancellations == outcome.result.cancellations
        assert lab.outcome.retired == outcome.retired
        self.seen["preemption"] += len(outcome.plan.preemptions)
        self.seen["tombstone"] += len(outcome.retired)

    def deliver(self) -> None:
        now = self.clock()
        hosts = self.observed()
        for host_id, node in self.nodes.items():
            if host_id in self.silent or host_id in self.deaf:
                continue
            commands = self.ctl.commands_for(host_id)
            fresh = [c for c in commands if c["action_id"] not in self.delivered]
            lab = self.lab.deliverable(now, hosts, host_id)
            assert [c["action_id"] for c in fresh] == [a.action_id for a, _ in lab], (
                f"deliveries to {host_id} differ at {now}"
            )
            self.held += self.ctl.delivery.safety_error is not None and not fresh
            for command, (_, mine) in zip(fresh, lab, strict=True):
                for field in ("kind", "model_id", "node_id", "artifact_sha256", "memory_mb"):
                    assert command.get(field) == mine.get(field), field
                self.delivered.add(command["action_id"])
                self.seen["drain"] += command["kind"] == "drain"
                node.execute(command)

    def pending_drain(self, host_id: str, model: str) -> bool:
        return any(
            p.action.kind.value == "drain"
            and p.action.host_id == host_id
            and p.action.model_id == model
            for p in self.ctl.store.pending()
        )

    def round(self) -> None:
        self.clock.advance(STEP)
        self.heartbeats()
        self.tick()
        self.deliver()


def test_one_scripted_day_gives_the_same_plans_actions_and_deliveries(tmp_path: Path) -> None:
    day = Day(tmp_path)
    day.start()
    for _ in range(8):  # both models come up
        day.round()
    for _ in range(16):  # chat-a gets busy: it scales out
        day.demand("chat-a", 40)
        day.round()
    day.seen["scale"] = sum(
        1 for n in day.nodes.values() if n.residencies.get("chat-a") is not None
    )
    # a higher-priority model arrives on a full fleet: something must make room
    day.commit(lambda d: d.put("vision", profile(900, priority=90)))
    for _ in range(16):
        day.demand("chat-a", 40)
        day.round()
    # a commit scales chat-a down to one replica; its hosts keep reporting but take no
    # command until one replica's drain is queued and the other's host has gone quiet
    day.commit(lambda d: d.put("chat-a", profile(600, priority=40, high=1)))
    serving = sorted(h for h, n in day.nodes.items() if "chat-a" in n.residencies)
    assert len(serving) == 2, serving
    day.deaf.update(serving)
    day.round()
    (victim,) = [h for h in serving if day.pending_drain(h, "chat-a")]
    (keeper,) = [h for h in serving if h != victim]
    day.silent.add(keeper)
    for _ in range(7):  # 35 s: the keeper's route lease is inside the 30 s margin
        day.round()
    day.deaf.clear()
    day.round()
    assert day.pending_drain(victim, "chat-a"), "held while the keeper's lease is short"
    day.silent.clear()
    for _ in range(4):
        day.round()
    assert not day.pending_drain(victim, "chat-a")
    day.nodes["host-2"].state = "draining"  # the operator drains a host
    held_there = set(day.nodes["host-2"].residencies)
    for _ in range(12):
        day.round()
    assert held_there and not day.nodes["host-2"].residencies, held_there
    day.nodes["host-2"].state = "accepting"
    day.commit(lambda d: d.delete("chat-b"))  # a profile removed: its tombstone
    for _ in range(12):
        day.round()
    assert day.held >= 1, day.seen
    assert day.seen["scale"] >= 2, day.seen
    assert day.seen["preemption"] >= 1, day.seen
    assert day.seen["drain"] >= 2, day.seen
    assert day.seen["tombstone"] == 1, day.seen
