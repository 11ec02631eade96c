"""Routes to child engines: the seam between the controller's registry and the router.

The registry (in ``gridctl.controller``) learns routes from heartbeats and
probes; the router (``gridctl.router``) picks one per request. Neither should
know the other's package: the controller hosts the router, so a router that
imported the registry's module would close a cycle through the whole shell.
Both depend on this module instead: the route value the router sees and the
small ``RouteTable`` protocol it calls, which the registry implements.

Data and typing only: no I/O, no clock, no imports from the rest of gridctl.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass
class EngineRoute:
    """A child engine serving one model on one host, as the router sees it."""

    host_id: str
    model_id: str
    endpoint: str
    api_key: str | None  # private: never serialised into status or discovery
    managed: bool = True
    corroborated_at: float | None = None  # last successful controller-side probe
    max_concurrency: int = 1
    artifact_sha256: str | None = None
    # Routing inputs filled in by ``RouteTable.routable`` (never serialised):
    advertised_concurrency: int | None = None  # None = the engine did not say; 0 = closed
    concurrency_multiplier: float = 1.0  # the host's local protection limit on admissions
    protection_class: int = 0  # 0 accepting, 1 throttled (lower is preferred)
    queue_depth: int = 0  # work the host advertises as queued
    lease_at: float = 0.0  # controller receipt time of the host's last heartbeat


class RouteTable(Protocol):
    """What the router asks of the routes it may use, and nothing else.

    Reads, plus the in-flight request counters the router owns (kept beside the
    routes so a heartbeat that replaces a host's routes does not reset them).
    ``now`` is the caller's clock: the table reads none of its own.
    """

    def routable(self, model_id: str, now: float) -> list[EngineRoute]:
        """Admitted, ready, corroborated routes for ``model_id``, ordered by host id."""
        ...

    def served_models(self, now: float) -> list[str]:
        """Every model with at least one routable route, sorted."""
        ...

    def active_requests(self, host_id: str, model_id: str) -> int:
        """Requests the router has in flight on one engine."""
        ...

    def request_started(self, host_id: str, model_id: str, now: float) -> None:
        """Count one request admitted to the engine of ``model_id`` on ``host_id``."""
        ...

    def request_finished(self, host_id: str, model_id: str, now: float) -> None:
        """Count one admitted request as done (its slot is free again)."""
        ...
