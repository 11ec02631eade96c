"""The exact optimality gap: each tick's placement problem as a MILP, solved by HiGHS.

For every tick the planner solved, the same problem is posed as a mixed
integer program over (model, host) replicas: the planner's own hard rules
decide which pairs exist (static eligibility, runtime, raw memory), host
memory and model-slot limits bind, each model is capped at the plan's target,
and the objective is priority-weighted satisfied replicas. The planner's
placement is scored with the same objective; the gap is the share of the
optimum it missed. Rules the MILP leaves out (failure-domain spread,
colocation) only loosen it, so the gap is an upper bound of the planner's.

The solver is created by the caller (``solver``), so the shell decides what
happens to the solver's own console output; HiGHS (and numpy beneath it) is
imported only when a gap is computed, so importing the lab stays I/O-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gridctl.demand.sequences import median
from gridctl.domain import FleetSnapshot, ModelProfile, Plan
from gridctl.lab.scenario import Run, World
from gridctl.planner.eligibility import static_rejection
from gridctl.planner.host_views import build_host_view
from gridctl.planner.runtimes import runtime_for_new_placement

if TYPE_CHECKING:
    import highspy

REPORT_GAP_PCT = 2.0  # ticks further than this from the optimum are listed with both placements
MAX_LISTED = 20


@dataclass(frozen=True)
class TickGap:
    minute: int
    planner_value: float
    optimum: float
    planner: tuple[tuple[str, str], ...]  # (model, host)
    optimal: tuple[tuple[str, str], ...]

    @property
    def gap_pct(self) -> float:
        return 100.0 * (self.optimum - self.planner_value) / self.optimum if self.optimum else 0.0


def weight(profile: ModelProfile) -> float:
    return float(profile.priority + 1)


def _pairs(
    plan: Plan, snapshot: FleetSnapshot, profiles: Mapping[str, ModelProfile], policy: Any
) -> tuple[list[tuple[str, str, int]], dict[str, tuple[int, int]]]:
    """Eligible (model, host, memory) pairs and each host's (memory, slots) limits."""
    pairs: list[tuple[str, str, int]] = []
    limits: dict[str, tuple[int, int]] = {}
    targets = dict(plan.targets)
    for host in snapshot.hosts:
        view = build_host_view(host, profiles, snapshot.now, policy)
        capacity = view.raw_mb - view.unmanaged_mb - view.fixed_mb
        slots = host.resources.max_models or len(profiles)
        limits[host.host_id] = (max(0, capacity), slots)
        live = view.live_models
        for name in sorted(profiles):
            profile = profiles[name]
            if targets.get(name, 0) <= 0:
                continue
            if name not in live and static_rejection(profile, view) is not None:
                continue
            choice = runtime_for_new_placement(profile, host)
            if choice is None or choice[1] > capacity:
                continue
            pairs.append((name, host.host_id, choice[1]))
    return pairs, limits


def solve_tick(
    minute: int,
    plan: Plan,
    snapshot: FleetSnapshot,
    profiles: Mapping[str, ModelProfile],
    policy: Any,
    solver: highspy.Highs,
) -> TickGap:
    targets = dict(plan.targets)
    placed = tuple(sorted((a.model_id, a.host_id) for a in plan.assignments))
    value = sum(
        weight(profiles[m]) * min(sum(1 for x, _ in placed if x == m), targets.get(m, 0))
        for m in {x for x, _ in placed}
        if m in profiles
    )
    pairs, limits = _pairs(plan, snapshot, profiles, policy)
    if not pairs:
        return TickGap(minute, value, value, placed, placed)
    import highspy  # numerical library, loaded only when a gap is asked for

    solver.clearModel()
    inf = highspy.kHighsInf
    for i, (model, _, _) in enumerate(pairs):
        solver.addVar(0.0, 1.0)
        solver.changeColIntegrality(i, highspy.HighsVarType.kInteger)
        solver.changeColCost(i, weight(profiles[model]))
    for model in sorted({m for m, _, _ in pairs}):
        cols = [i for i, p in enumerate(pairs) if p[0] == model]
        solver.addRow(-inf, float(targets.get(model, 0)), len(cols), cols, [1.0] * len(cols))
    for host_id, (memory, slots) in sorted(limits.items()):
        cols = [i for i, p in enumerate(pairs) if p[1] == host_id]
        if not cols:
            continue
        solver.addRow(-inf, float(memory), len(cols), cols, [float(pairs[i][2]) for i in cols])
        solver.addRow(-inf, float(slots), len(cols), cols, [1.0] * len(cols))
    solver.changeObjectiveSense(highspy.ObjSense.kMaximize)
    solver.run()
    values = list(solver.getSolution().col_value)
    optimum = float(solver.getInfo().objective_function_value)
    chosen = tuple(sorted((pairs[i][0], pairs[i][1]) for i, v in enumerate(values) if v > 0.5))
    return TickGap(minute, value, max(optimum, value), placed, chosen)


def optimality_report(
    world: World, result: Run, solver: Callable[[], highspy.Highs]
) -> dict[str, object]:
    """The per-tick gap distribution of ``result`` (a run made with ``keep_plans``)."""
    if not result.decisions:
        raise ValueError("the run kept no plans (run it with keep_plans=True)")
    profiles = world.profiles
    policy = world.desired.policy
    highs = solver()
    highs.setOptionValue("output_flag", False)
    highs.setOptionValue("mip_rel_gap", 0.0)
    ticks = [solve_tick(m, p, s, profiles, policy, highs) for m, p, s in result.decisions]
    gaps = [t.gap_pct for t in ticks]
    worst = max(ticks, key=lambda t: (t.gap_pct, -t.minute))
    ordered = sorted(gaps)

    def quantile(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    far = [t for t in ticks if t.gap_pct > REPORT_GAP_PCT]
    return {
        "strategy": result.strategy.value,
        "ticks": len(ticks),
        "median_gap_pct": round(median(tuple(gaps)), 6),
        "p90_gap_pct": round(quantile(0.9), 6),
        "worst_gap_pct": round(worst.gap_pct, 6),
        "worst_minute": worst.minute,
        "ticks_at_optimum": sum(1 for g in gaps if g <= 1e-9),
        "gap_pct_per_tick": [round(g, 6) for g in gaps],
        "beyond_threshold": [
            {
                "minute": t.minute,
                "gap_pct": round(t.gap_pct, 6),
                "planner_value": t.planner_value,
                "optimum": t.optimum,
                "planner": [f"{m}@{h}" for m, h in t.planner],
                "optimal": [f"{m}@{h}" for m, h in t.optimal],
            }
            for t in far[:MAX_LISTED]
        ],
        "beyond_threshold_count": len(far),
        "threshold_pct": REPORT_GAP_PCT,
    }
