"""The tick: one pure decision path for the controller, its dry run and the scenario lab.

``compute_tick`` turns one instant's inputs into a plan and the reconciler's
actions; ``delivery_gate`` decides whether a pending action may leave as a
command. Learned startup timings and the per-host learned rows the planner
reads are computed here too. Nothing in this package does I/O or reads a clock:
the controller gathers the inputs and carries out the results.
"""

from importlib import import_module
from typing import TYPE_CHECKING

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

if TYPE_CHECKING:
    from gridctl.tick.delivery import (
        DeliveryFacts,
        RouteLease,
        Verdict,
        Withheld,
        delivery_gate,
        routes_from_hosts,
    )

# the delivery gate is imported on first use of one of its names: a dry run never reads it
_DELIVERY = frozenset(
    {"DeliveryFacts", "RouteLease", "Verdict", "Withheld", "delivery_gate", "routes_from_hosts"}
)


def __getattr__(name: str) -> object:
    if name not in _DELIVERY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module("gridctl.tick.delivery"), name)
    globals()[name] = value  # found directly from now on
    return value


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
