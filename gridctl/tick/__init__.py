"""The tick: one pure decision path for the controller, its dry run and the scenario lab.

``compute_tick`` turns one instant's inputs into a plan and the reconciler's
actions; ``delivery_gate`` decides whether a pending action may leave as a
command. Learned startup timings and the per-host learned rows the planner
reads are computed here too. Nothing in this package does I/O or reads a clock:
the controller gathers the inputs and carries out the results.
"""

from gridctl.tick.computing import (
    Admit,
    Decide,
    Decision,
    TickInputs,
    TickOutcome,
    compute_tick,
    decide_by_portfolio,
    planned_snapshot,
    tick_demand,
)
from gridctl.tick.delivery import (
    DeliveryFacts,
    RouteLease,
    Verdict,
    Withheld,
    delivery_gate,
    routes_from_hosts,
)

__all__ = [
    "Admit",
    "Decide",
    "Decision",
    "DeliveryFacts",
    "RouteLease",
    "TickInputs",
    "TickOutcome",
    "Verdict",
    "Withheld",
    "compute_tick",
    "decide_by_portfolio",
    "delivery_gate",
    "planned_snapshot",
    "routes_from_hosts",
    "tick_demand",
]
