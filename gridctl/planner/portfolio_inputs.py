"""Portfolio inputs for one tick: the snapshot's direct demand plus the learners' picture.

Shared by the controller's tick and the scenario lab, so both plan on exactly
the same inputs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from gridctl.domain import DesiredState, FleetSnapshot
from gridctl.planner.portfolio_types import MEDIA_WORKLOADS, PortfolioInputs

if TYPE_CHECKING:
    from gridctl.demand.learning import DemandPicture


def portfolio_inputs(
    desired: DesiredState, snapshot: FleetSnapshot, picture: DemandPicture | None
) -> PortfolioInputs:
    """Portfolio inputs: the tick's snapshot (its direct demand) plus the learners' picture."""
    media = frozenset(
        w.name
        for w in desired.catalog.workloads
        if {"image", "video"} & (set(w.endpoints) | set(w.modalities))
    )
    return PortfolioInputs(
        profiles=tuple(sorted(desired.profiles, key=lambda p: p.name)),
        snapshot=snapshot,
        policy=desired.policy,
        workloads=picture.workloads if picture is not None else (),
        outcomes=picture.outcomes if picture is not None else (),
        media_workloads=media or MEDIA_WORKLOADS,
    )
