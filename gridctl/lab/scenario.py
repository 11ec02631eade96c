"""One scenario: the world built from a seed, and one strategy's run through it.

``build_world`` lays out hosts, models, users, curves, events and the arrival
trace (all from the seed; nothing depends on the strategy). ``run`` steps the
simulated clock a minute at a time: physical events, node progress and
heartbeats (receipts judged by the production state machine), the
controller's tick, fenced delivery, then the minute's requests served against
what is READY. ``report`` is the stable JSON document ``--json`` prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gridctl.domain import (
    ControllerPolicy,
    DesiredState,
    Fleet,
    FleetSnapshot,
    HostSnapshot,
    Mode,
    ModelProfile,
    Plan,
    ResidencyState,
    WorkloadCatalog,
)
from gridctl.lab.arrivals import MINUTE, Arrival, generate, trace_digest
from gridctl.lab.collector import collector_paused
from gridctl.lab.control import LabController, LabTick
from gridctl.lab.fleets import LabHost, lab_hosts
from gridctl.lab.models import BASELINE_MODEL, lab_models
from gridctl.lab.nodes import NodeEvents, SimNode
from gridctl.lab.population import User, average_mix, population
from gridctl.lab.scoring import Accumulator, summary
from gridctl.lab.serving import Classifier, Replica, Served, replicas, serve_minute
from gridctl.lab.strategies import Strategy, feasible_models
from gridctl.lab.traces import Trace
from gridctl.lab.workday import HostEvent, curves, host_events, phase_of

START = 1_800_000_000.0  # the simulated clock's origin (a fixed instant, not the wall clock)
MAX_MACHINES = 64
MAX_USERS = 10_000
MAX_MINUTES = 24 * 60
HEARTBEAT_SECONDS = 5.0  # the node daemon's default heartbeat interval
ROUNDS_PER_MINUTE = int(MINUTE // HEARTBEAT_SECONDS)


@dataclass(frozen=True)
class ScenarioConfig:
    machines: int
    models: int
    users: int
    minutes: int
    seed: int
    traces: Mapping[str, Trace] = field(default_factory=dict)

    def problems(self) -> list[str]:
        found = []
        if not 1 <= self.machines <= MAX_MACHINES:
            found.append(f"--machines must be between 1 and {MAX_MACHINES}")
        if not 1 <= self.users <= MAX_USERS:
            found.append(f"--users must be between 1 and {MAX_USERS}")
        if not 2 <= self.minutes <= MAX_MINUTES:
            found.append(f"--duration must be between 2 minutes and {MAX_MINUTES // 60} hours")
        return found


def lab_policy(machines: int) -> ControllerPolicy:
    """Automatic mode, with a mutation budget that grows with the fleet."""
    return ControllerPolicy(
        name="lab",
        mode=Mode.AUTOMATIC,
        max_concurrent_mutations=max(4, machines),
        max_concurrent_mutations_per_host=1,
    )


@dataclass(frozen=True)
class World:
    config: ScenarioConfig
    hosts: tuple[LabHost, ...]
    desired: DesiredState
    users: tuple[User, ...]
    arrivals: tuple[tuple[Arrival, ...], ...]
    digest: str
    events: tuple[HostEvent, ...]
    mix: dict[str, float]
    allocatable: frozenset[str]

    @property
    def profiles(self) -> dict[str, ModelProfile]:
        return {p.name: p for p in self.desired.profiles}


def build_world(config: ScenarioConfig, fleet: Fleet, catalog: WorkloadCatalog) -> World:
    problems = config.problems()
    if problems:
        raise ValueError("; ".join(problems))
    models = lab_models(config.models)
    hosts = lab_hosts(fleet, config.machines, models, config.seed)
    desired = DesiredState(
        revision=f"lab-{config.seed}",
        dirty=False,
        profiles=models,
        policy=lab_policy(config.machines),
        catalog=catalog,
    )
    users = population(config.users, config.seed)
    day = curves(config.minutes, config.traces)
    with collector_paused():  # millions of acyclic records
        arrivals = generate(users, config.minutes, day, config.seed, START, BASELINE_MODEL)
    digest = trace_digest(a for minute in arrivals for a in minute)
    events = host_events(tuple(h.host_id for h in hosts), config.minutes, config.seed)
    profiles = {p.name: p for p in models}
    nodes = [SimNode(h, profiles, START) for h in hosts]
    for node in nodes:
        node.last_heartbeat = START
    feasible = feasible_models(profiles, tuple(n.snapshot() for n in nodes), START, desired.policy)
    allocatable = frozenset(
        w.name
        for w in catalog.workloads
        if any(profiles[m].workload_scores.get(w.name, 0.0) > 0 for m in feasible)
    )
    return World(
        config, hosts, desired, users, arrivals, digest, events, average_mix(users), allocatable
    )


@dataclass
class Run:
    strategy: Strategy
    summary: dict[str, float | int]
    digest: str
    timeline: list[dict[str, object]]
    accumulator: Accumulator
    prefetch: dict[str, float | int]
    residency: list[dict[str, list[str]]]
    decisions: list[tuple[int, Plan, FleetSnapshot]]  # per tick, for the optimality gap


def _apply_events(
    world: World, nodes: dict[str, SimNode], minute: int, now: float, acc: Accumulator
) -> list[str]:
    notes: list[str] = []
    for event in world.events:
        node = nodes.get(event.host_id)
        if node is None:
            continue
        if event.kind == "throttle":
            active = event.start <= minute < event.end
            if active != node.throttled:
                node.throttled = active
                notes.append(f"{event.host_id} thermal throttle {'on' if active else 'off'}")
        elif event.kind in ("activity", "battery"):
            active = event.start <= minute < event.end
            attribute = "active" if event.kind == "activity" else "on_battery"
            if active != getattr(node, attribute):
                setattr(node, attribute, active)
                state = "begins" if active else "ends"
                notes.append(f"{event.host_id} owner {event.kind} {state}")
        elif event.kind == "outage":
            if minute == event.start and node.up:
                lost = NodeEvents()
                node.go_down(lost, now)
                acc.node(event.host_id, lost, outage=True)
                notes.append(f"{event.host_id} outage: every process lost")
            elif minute == event.end and not node.up:
                node.come_up(now)
                notes.append(f"{event.host_id} recovered (cached weights kept)")
    return notes


def run(world: World, strategy: Strategy, *, keep_plans: bool = False) -> Run:
    with collector_paused():  # never re-scan the world's trace for cycles
        return _run(world, strategy, keep_plans)


def _run(world: World, strategy: Strategy, keep_plans: bool) -> Run:
    profiles = world.profiles
    nodes = {h.host_id: SimNode(h, profiles, START) for h in world.hosts}
    controller = LabController(world.desired, strategy, world.mix)
    acc = Accumulator(world.allocatable)
    classify = Classifier(world.desired.catalog)
    sessions: dict[str, str] = {}
    seen: dict[str, HostSnapshot] = {}
    timeline: list[dict[str, object]] = []
    residency: list[dict[str, list[str]]] = []
    decisions: list[tuple[int, Plan, FleetSnapshot]] = []
    consumed: list[tuple[Arrival, ...]] = []  # each minute's arrivals, as served
    minute_counts: dict[str, int] = {}
    named_counts: dict[str, int] = {}
    prefetch_credit: set[tuple[str, str, float]] = set()
    ttl = world.desired.policy.command_ttl_seconds
    for minute, arrivals in enumerate(world.arrivals):
        now = START + MINUTE * minute
        notes = _apply_events(world, nodes, minute, now, acc)
        for host_id, node in sorted(nodes.items()):
            events = node.advance(now, MINUTE)
            _credit_prefetch(node, events, acc, prefetch_credit)
            acc.node(host_id, events)
            for receipt in node.heartbeat(now):
                controller.acknowledge(receipt, now)
            if node.up:
                seen[host_id] = node.snapshot()
        hosts = tuple(seen[h] for h in sorted(seen))
        outcome = controller.tick(now, hosts, minute_counts, named_counts)
        if keep_plans:
            decisions.append((minute, outcome.plan, outcome.snapshot))
        for u in outcome.plan.unsatisfied:
            acc.unsatisfied_minutes[u.model_id] = acc.unsatisfied_minutes.get(u.model_id, 0) + 1
        _actuate(controller, outcome, nodes, seen, now, minute, acc, prefetch_credit, ttl)
        # the minute's requests meet what was READY after the tick
        pool = replicas(list(nodes.values()), profiles)
        issued = [_issued(e) for e in outcome.result.enqueue]
        for step in range(1, ROUNDS_PER_MINUTE):
            at = now + HEARTBEAT_SECONDS * step
            issued.extend(
                _follow_up(
                    controller,
                    nodes,
                    seen,
                    at,
                    minute,
                    acc,
                    prefetch_credit,
                    ttl,
                    minute_counts,
                    named_counts,
                )
            )
        pool = _still_ready(pool, nodes)
        mapping = dict(outcome.mapping)
        log, observations = serve_minute(arrivals, pool, mapping, profiles, classify, sessions)
        controller.observe_all(observations)
        consumed.append(arrivals)
        minute_counts, named_counts = dict(log.workload_counts), dict(log.named_counts)
        acc.minute(minute, log)
        ready = {
            h: sorted(m for m, r in n.residencies.items() if r.state.value == "ready")
            for h, n in sorted(nodes.items())
        }
        residency.append(ready)
        timeline.append(
            _timeline_row(minute, world.config.minutes, outcome, notes, log.served, ready, issued)
        )
    acc.finish()
    managed = [h for h in world.hosts if h.kind != "external-endpoint"]
    node_hours = len(managed) * world.config.minutes / 60.0
    prefetch = _prefetch_card(nodes, acc)
    return Run(
        strategy,
        summary(acc, node_hours),
        _consumed_digest(world, consumed),
        timeline,
        acc,
        prefetch,
        residency,
        decisions,
    )


def _consumed_digest(world: World, consumed: list[tuple[Arrival, ...]]) -> str:
    """The digest of the arrivals the run served. When they are the world's own minutes,
    the very same immutable tuples in order, that is the world's digest (re-hashing
    millions of lines would give it again); anything else is hashed."""
    if len(consumed) == len(world.arrivals) and all(
        mine is theirs for mine, theirs in zip(consumed, world.arrivals, strict=True)
    ):
        return world.digest
    return trace_digest(a for minute in consumed for a in minute)


def _still_ready(
    pool: dict[str, list[Replica]], nodes: Mapping[str, SimNode]
) -> dict[str, list[Replica]]:
    """The replicas READY both after the minute's tick and at its end: a replica drained
    or lost during the minute serves none of it, one that became ready serves the next."""
    ready = {
        (host_id, model)
        for host_id, node in nodes.items()
        if node.up
        for model, row in node.residencies.items()
        if row.state is ResidencyState.READY
    }
    kept = {m: [r for r in rs if (r.host_id, m) in ready] for m, rs in pool.items()}
    return {m: rs for m, rs in kept.items() if rs}


def _issued(entry: Any) -> str:
    action = entry.action
    return f"{action.kind.value} {action.model_id} on {action.host_id}"


def _actuate(
    controller: LabController,
    outcome: LabTick,
    nodes: dict[str, SimNode],
    seen: dict[str, HostSnapshot],
    now: float,
    minute: int,
    acc: Accumulator,
    credited: set[tuple[str, str, float]],
    ttl: float,
) -> None:
    """Deliver a tick's executable commands and let the nodes start them at ``now``."""
    acc.safety.extend(outcome.unsafe)
    for action, command in controller.deliverable(now, seen):
        target = nodes.get(action.host_id)
        if target is not None:
            target.deliver(command, action, ttl, now)
    for host_id, node in sorted(nodes.items()):
        before = node.used_mb()
        events = node.advance(now, MINUTE)
        _credit_prefetch(node, events, acc, credited)
        acc.node(host_id, events)
        # a derate or an owner's apps may shrink capacity under live models; only
        # this tick's own work taking memory beyond capacity is a breach
        if node.up and node.used_mb() > max(before, node.capacity_mb()):
            acc.safety.append(f"memory over capacity on {host_id} at minute {minute}")


def _follow_up(
    controller: LabController,
    nodes: dict[str, SimNode],
    seen: dict[str, HostSnapshot],
    at: float,
    minute: int,
    acc: Accumulator,
    credited: set[tuple[str, str, float]],
    ttl: float,
    minute_counts: Mapping[str, int],
    named_counts: Mapping[str, int],
) -> list[str]:
    """One heartbeat interval inside the minute: nodes finish what is due by ``at``;
    when any of them has a receipt to report, every node heartbeats and the
    controller ticks again (as the live controller does on the next heartbeat),
    so a lifecycle chain (drain, unload, load, warm) is not stretched to a
    minute per step. Demand is what the learners knew at the minute's start."""
    reported = False
    for host_id, node in sorted(nodes.items()):
        events = node.advance(at, MINUTE)
        _credit_prefetch(node, events, acc, credited)
        acc.node(host_id, events)
        reported = reported or bool(node.up and node.receipts)
    if not reported:
        return []
    for host_id, node in sorted(nodes.items()):
        for receipt in node.heartbeat(at):
            controller.acknowledge(receipt, at)
        if node.up:
            seen[host_id] = node.snapshot()
    hosts = tuple(seen[h] for h in sorted(seen))
    outcome = controller.tick(at, hosts, minute_counts, named_counts)
    _actuate(controller, outcome, nodes, seen, at, minute, acc, credited, ttl)
    return [_issued(e) for e in outcome.result.enqueue]


def _credit_prefetch(
    node: SimNode, events: NodeEvents, acc: Accumulator, credited: set[tuple[str, str, float]]
) -> None:
    for model, at in events.ready:
        entry = node.cache.get(model)
        if entry is None or not entry.prefetched:
            continue
        key = (node.host_id, model, entry.cached_at)
        if key in credited:
            continue
        credited.add(key)
        seconds = entry.size_mb / max(node.host.transfer_mb_per_second, 1.0)
        acc.prefetch_hit(at - entry.cached_at, seconds)


def _prefetch_card(nodes: Mapping[str, SimNode], acc: Accumulator) -> dict[str, float | int]:
    unused = sum(1 for n in nodes.values() for e in n.cache.values() if e.prefetched and not e.used)
    leads = sorted(acc.prefetch_lead_seconds)
    return {
        "downloads": acc.prefetch_downloads,
        "hits": acc.prefetch_hits,
        "unused_predictions": unused,
        "reclaimed_disk_mb": acc.evicted_mb,
        "median_lead_seconds": leads[len(leads) // 2] if leads else 0.0,
        "avoided_load_seconds": acc.avoided_load_seconds,
        "cache_hits": acc.cache_hits,
        "modeled_disk_used_mb": sum(e.size_mb for n in nodes.values() for e in n.cache.values()),
    }


def _timeline_row(
    minute: int,
    minutes: int,
    outcome: LabTick,
    notes: list[str],
    served: Sequence[Served],
    ready: dict[str, list[str]],
    issued: list[str],
) -> dict[str, object]:
    offered: dict[str, int] = {}
    ok: dict[str, int] = {}
    for s in served:
        offered[s.workload] = offered.get(s.workload, 0) + 1
        if s.outcome == "ok":
            ok[s.workload] = ok.get(s.workload, 0) + 1
    portfolio = outcome.portfolio
    admission = {r.workload: r.state.value for r in portfolio.admission} if portfolio else {}
    return {
        "minute": minute,
        "phase": phase_of((minute + 0.5) / minutes),
        "events": notes,
        "issued": issued,
        "mapping": {w: m for w, m in outcome.mapping if m is not None},
        "admission": admission,
        "offered": dict(sorted(offered.items())),
        "served": dict(sorted(ok.items())),
        "ready": {h: m for h, m in ready.items() if m},
        "unsatisfied": sorted({u.model_id for u in outcome.plan.unsatisfied}),
    }


def scenario_header(world: World) -> dict[str, object]:
    c = world.config
    return {
        "machines": c.machines,
        "models": c.models,
        "users": c.users,
        "duration_minutes": c.minutes,
        "seed": c.seed,
        "hosts": [
            {
                "host_id": h.host_id,
                "kind": h.kind,
                "capacity_mb": h.spec.resources.capacity_mb,
                "disk_free_mb": h.spec.resources.disk_free_mb,
                "cached": [a.model_id for a in h.spec.cached],
            }
            for h in world.hosts
        ],
        "model_ids": [p.name for p in world.desired.profiles],
        "allocatable_workloads": sorted(world.allocatable),
        "traces": {w: t.source for w, t in sorted(c.traces.items())},
        "events": [
            {"kind": e.kind, "host_id": e.host_id, "start_minute": e.start, "end_minute": e.end}
            for e in world.events
        ],
        "trace_digest": world.digest,
    }


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return round(value, 6)
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_rounded(v) for v in value]
    return value


def run_report(world: World, result: Run, *, timeline: bool = True) -> dict[str, object]:
    acc = result.accumulator
    workloads = {
        w: {
            "offered": acc.offered.get(w, 0),
            "served": acc.ok.get(w, 0),
            "served_pct": 100.0 * acc.ok.get(w, 0) / acc.offered[w] if acc.offered.get(w) else 0.0,
            "allocatable": w in world.allocatable,
        }
        for w in sorted(acc.offered)
    }
    body: dict[str, object] = {
        "strategy": result.strategy.value,
        "trace_digest": result.digest,
        "summary": result.summary,
        "prefetch": result.prefetch,
        "workloads": workloads,
        "safety": {"violations": list(acc.safety)},
        "capacity": {
            "overloaded_minutes": dict(sorted(acc.overloaded_minutes.items())),
            "unsatisfied_minutes": dict(sorted(acc.unsatisfied_minutes.items())),
        },
    }
    if timeline:
        body["timeline"] = result.timeline
    rounded: dict[str, object] = _rounded(body)
    return rounded
