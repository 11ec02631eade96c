"""Pick one admitted, ready engine for one request.

Load is compared as active requests over each engine's concurrency, so a wide
engine does not look busier than a narrow one; an engine at its concurrency is
closed (the hard admission boundary). Ties break on host id, never on order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from gridctl.controller.registry import EngineRoute


def choose_route(
    routes: Sequence[EngineRoute],
    active: Callable[[EngineRoute], int],
) -> EngineRoute | None:
    """The least loaded open route, or None when every route is full or none exists."""
    best: tuple[float, str] | None = None
    chosen: EngineRoute | None = None
    for route in routes:
        in_flight = active(route)
        capacity = max(1, route.max_concurrency)
        if in_flight >= capacity * 4:  # llama.cpp queues beyond its slots; bound the queue
            continue
        key = (in_flight / capacity, route.host_id)
        if best is None or key < best:
            best, chosen = key, route
    return chosen
