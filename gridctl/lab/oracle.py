"""The hindsight oracle: a bounded exhaustive ceiling for small scenarios.

For at most four machines, nine models and 240 minutes, the oracle replays the
exact observed request trace with perfect knowledge of the future. Per host it
enumerates every compatible placement (the planner's static eligibility,
runtime and raw memory, model slots) and keeps the maximal ones (adding a
model never lowers service); the fleet state is one choice per host. Time
moves in blocks of the two-minute hold; a model added in a block serves only
from the block's second minute (one-minute load-to-ready). Service per minute
is the maximum flow of the minute's requests onto the state's replica
capacity (optimal routing, host derating and outages applied). A dynamic
programme over blocks keeps, per block, at most 256 states (the tie-search
cap) ranked by service and then fewest mutations, so among service-maximising
schedules the fewest-change one wins. The ceiling is intentionally optimistic:
perfect foresight and optimal routing; the scale-down cooldown is not a fence.
The report also audits the schedule's cumulative artifact disk and load times.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gridctl.domain import HostSnapshot, ModelProfile
from gridctl.lab.arrivals import MINUTE
from gridctl.lab.fleets import LabHost
from gridctl.lab.nodes import THROTTLE_DERATE, SimNode
from gridctl.lab.scenario import START, Run, ScenarioConfig, World
from gridctl.lab.serving import Classifier
from gridctl.planner.eligibility import static_rejection
from gridctl.planner.host_views import build_host_view
from gridctl.planner.runtimes import runtime_for_new_placement

MAX_MACHINES = 4
MAX_MODELS = 9
MAX_MINUTES = 240
HOLD_MINUTES = 2
TIE_SEARCH_CAP = 256
PREDECESSORS = 8  # best kept states tried as the previous block of each candidate


def oracle_problems(config: ScenarioConfig) -> list[str]:
    found = []
    if config.machines > MAX_MACHINES:
        found.append(f"at most {MAX_MACHINES} machines (got {config.machines})")
    if config.models > MAX_MODELS:
        found.append(f"at most {MAX_MODELS} models (got {config.models})")
    if config.minutes > MAX_MINUTES:
        found.append(f"at most {MAX_MINUTES} minutes (got {config.minutes})")
    return found


def host_options(
    host: LabHost, snapshot: HostSnapshot, profiles: Mapping[str, ModelProfile], world: World
) -> list[frozenset[str]]:
    """Maximal compatible model sets for one host (the empty set when none fits)."""
    view = build_host_view(snapshot, profiles, START, world.desired.policy)
    fits: dict[str, int] = {}
    for name in sorted(profiles):
        if static_rejection(profiles[name], view) is not None:
            continue
        choice = runtime_for_new_placement(profiles[name], snapshot)
        if choice is not None and choice[1] <= view.raw_mb:
            fits[name] = choice[1]
    slots = host.spec.resources.max_models or len(fits)
    feasible: list[frozenset[str]] = [frozenset()]
    names = sorted(fits)
    for size in range(1, min(slots, len(names)) + 1):
        for combo in itertools.combinations(names, size):
            if sum(fits[m] for m in combo) <= view.raw_mb:
                feasible.append(frozenset(combo))
    maximal = [s for s in feasible if not any(s < t for t in feasible)]
    return sorted(maximal, key=lambda s: sorted(s))


def max_flow(
    demand: Sequence[int], capacity: Sequence[float], edges: Sequence[Sequence[int]]
) -> float:
    """Maximum flow from workloads (``demand``) to models (``capacity``) along ``edges``
    (workload index -> model indices), by augmenting paths on the residual graph."""
    n_w, n_m = len(demand), len(capacity)
    flow = [[0.0] * n_m for _ in range(n_w)]
    left_w = [float(d) for d in demand]
    left_m = [float(c) for c in capacity]
    total = 0.0
    while True:
        # BFS from workloads with demand left, alternating forward (w->m) and back (m->w)
        parent_w: dict[int, tuple[int, int] | None] = {
            w: None for w in range(n_w) if left_w[w] > 1e-9
        }
        parent_m: dict[int, int] = {}
        queue = list(parent_w)
        found = -1
        while queue and found < 0:
            nxt: list[int] = []
            for w in queue:
                for m in edges[w]:
                    if m in parent_m:
                        continue
                    parent_m[m] = w
                    if left_m[m] > 1e-9:
                        found = m
                        break
                    for w2 in range(n_w):
                        if flow[w2][m] > 1e-9 and w2 not in parent_w:
                            parent_w[w2] = (m, w)
                            nxt.append(w2)
                if found >= 0:
                    break
            queue = nxt
        if found < 0:
            return total
        path: list[tuple[int, int, int]] = []  # (w, m, +1 forward / -1 backward)
        m = found
        w = parent_m[m]
        amount = left_m[m]
        while True:
            path.append((w, m, 1))
            back = parent_w[w]
            if back is None:
                amount = min(amount, left_w[w])
                break
            m_prev, w_prev = back
            path.append((w, m_prev, -1))
            amount = min(amount, flow[w][m_prev])
            m, w = m_prev, w_prev
        for pw, pm, sign in path:
            flow[pw][pm] += sign * amount
        left_m[found] -= amount
        left_w[w] -= amount
        total += amount


@dataclass
class _Node:
    value: float
    mutations: int
    state: tuple[frozenset[str], ...]
    back: _Node | None


def oracle_report(world: World, smart: Run) -> dict[str, object]:
    problems = oracle_problems(world.config)
    if problems:
        raise ValueError("; ".join(problems))
    profiles = world.profiles
    managed = [h for h in world.hosts if h.kind != "external-endpoint"]
    snaps = []
    for h in managed:
        sim = SimNode(h, profiles, START)
        sim.last_heartbeat = START
        snaps.append(sim.snapshot())
    options = [host_options(h, s, profiles, world) for h, s in zip(managed, snaps, strict=True)]
    models = sorted(profiles)
    workloads = sorted(w.name for w in world.desired.catalog.workloads)
    classify = Classifier(world.desired.catalog)
    minutes = world.config.minutes
    # the exact observed trace: per minute, requests per workload (and per named model)
    demand_rows: list[tuple[int, ...]] = []
    for arrivals in world.arrivals:
        counts = dict.fromkeys(workloads + [f"@{m}" for m in models], 0)
        for a in arrivals:
            key = f"@{a.model}" if a.model else classify(a.endpoint, a.modality, a.text)
            counts[key] = counts.get(key, 0) + 1
        demand_rows.append(tuple(counts[k] for k in workloads + [f"@{m}" for m in models]))
    edges: list[list[int]] = []
    for w in workloads:
        edges.append([i for i, m in enumerate(models) if profiles[m].workload_scores.get(w, 0) > 0])
    edges += [[i] for i in range(len(models))]
    per_replica = {
        (h.host_id, m): profiles[m].replica_concurrency
        * MINUTE
        * h.speed
        / profiles[m].expected_service_seconds
        for h in managed
        for m in models
    }
    down = {
        (e.host_id, t) for e in world.events if e.kind == "outage" for t in range(e.start, e.end)
    }
    hot = {
        (e.host_id, t) for e in world.events if e.kind == "throttle" for t in range(e.start, e.end)
    }
    cache: dict[tuple[int, tuple[float, ...]], float] = {}
    evaluated = 0

    def served(state: tuple[frozenset[str], ...], minute: int) -> float:
        nonlocal evaluated
        cap = [0.0] * len(models)
        for host, chosen in zip(managed, state, strict=True):
            if (host.host_id, minute) in down:
                continue
            derate = THROTTLE_DERATE if (host.host_id, minute) in hot else 1.0
            for m in chosen:
                cap[models.index(m)] += per_replica[(host.host_id, m)] * derate
        key = (minute, tuple(round(c, 6) for c in cap))
        found = cache.get(key)
        if found is None:
            evaluated += 1
            found = cache[key] = max_flow(demand_rows[minute], cap, edges)
        return found

    states = list(itertools.product(*options))
    empty: tuple[frozenset[str], ...] = tuple(frozenset() for _ in managed)
    beam = [_Node(0.0, 0, empty, None)]
    for block_start in range(0, minutes, HOLD_MINUTES):
        block = range(block_start, min(minutes, block_start + HOLD_MINUTES))
        best_prev = sorted(beam, key=lambda n: (-n.value, n.mutations))[:PREDECESSORS]
        by_state = {n.state: n for n in beam}
        nodes: list[_Node] = []
        for state in states:
            steady = sum(served(state, t) for t in block[1:])
            choices = list(best_prev)
            if state in by_state and by_state[state] not in choices:
                choices.append(by_state[state])
            best: _Node | None = None
            for prev in choices:
                kept = tuple(a & b for a, b in zip(state, prev.state, strict=True))
                moved = sum(len(a ^ b) for a, b in zip(state, prev.state, strict=True))
                first = served(state if kept == state else kept, block[0])
                node = _Node(prev.value + first + steady, prev.mutations + moved, state, prev)
                if best is None or (node.value, -node.mutations) > (best.value, -best.mutations):
                    best = node
            assert best is not None
            nodes.append(best)
        nodes.sort(key=lambda n: (-n.value, n.mutations, [sorted(s) for s in n.state]))
        beam = nodes[:TIE_SEARCH_CAP]
    final = beam[0]
    schedule: list[tuple[frozenset[str], ...]] = []
    cursor: _Node | None = final
    while cursor is not None and cursor.back is not None:
        schedule.append(cursor.state)
        cursor = cursor.back
    schedule.reverse()
    changes: list[str] = []
    previous = empty
    downloaded: dict[str, set[str]] = {h.host_id: set() for h in managed}
    slow_loads = 0
    for index, state in enumerate(schedule):
        for host, before, after in zip(managed, previous, state, strict=True):
            for m in sorted(after - before):
                changes.append(f"minute {index * HOLD_MINUTES}: + {m} on {host.host_id}")
                downloaded[host.host_id].add(m)
                size = profiles[m].artifact.size_mb or 0
                if size / max(host.transfer_mb_per_second, 1.0) > MINUTE:
                    slow_loads += 1
            for m in sorted(before - after):
                changes.append(f"minute {index * HOLD_MINUTES}: - {m} on {host.host_id}")
        previous = state
    disk = []
    for host in managed:
        need = sum(profiles[m].artifact.size_mb or 0 for m in downloaded[host.host_id])
        free = host.spec.resources.disk_free_mb or 0
        disk.append(
            {
                "host_id": host.host_id,
                "artifact_mb": need,
                "disk_free_mb": free,
                "fits": need <= free,
            }
        )
    disk_ok = all(bool(d["fits"]) for d in disk)
    ceiling = round(final.value, 6)
    smart_served = int(smart.summary["served"])
    offered = int(smart.summary["offered"])
    return {
        "ceiling_served": ceiling,
        "offered": offered,
        "ceiling_pct": round(100.0 * ceiling / offered, 6) if offered else 100.0,
        "smart_strategy": smart.strategy.value,
        "smart_served": smart_served,
        "smart_pct_of_ceiling": round(100.0 * smart_served / ceiling, 6) if ceiling else 100.0,
        "remaining_gain": round(max(0.0, ceiling - smart_served), 6),
        "mutations": final.mutations,
        "placement_changes": changes,
        "states_evaluated": evaluated,
        "joint_states": len(states),
        "hold_minutes": HOLD_MINUTES,
        "tie_search_cap": TIE_SEARCH_CAP,
        "disk_audit": {"passed": disk_ok, "hosts": disk},
        "startup_audit": {"passed": slow_loads == 0, "loads_over_one_minute": slow_loads},
        "note": (
            "hindsight placement opportunity independent of disk and startup limits"
            if disk_ok and slow_loads == 0
            else "cache preparation is also required to reach the ceiling"
        ),
    }
