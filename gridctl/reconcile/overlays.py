"""Commands in flight, shown to the planner as the in-progress residencies they will become.

Between delivering a load and the node's next heartbeat reporting LOADING, the
host looks empty; a plan made in that window could pick an equally good host
and start a duplicate cold load (and then flip back once the first copy is
cached). Overlaying the controller's own pending load/warm work as LOADING
residencies keeps the in-progress incumbent occupied and sticky, as the spec
asks of loading and warming incumbents. Only delivered work is shown (the node
may be running it); queued work stays the reconciler's business. A host that
already reports the model in progress or ready is left exactly as reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from gridctl.domain import ActionKind, FleetSnapshot, Ownership, Residency, ResidencyState
from gridctl.reconcile.records import PendingAction

CONSTRUCTIVE = (ActionKind.LOAD, ActionKind.WARM)


def with_pending_work(
    snapshot: FleetSnapshot, pending: Iterable[PendingAction], now: float
) -> FleetSnapshot:
    """``snapshot`` with pending load/warm work the node has not reported yet shown as
    LOADING (nothing there) or WARMING (only cached weights there)."""
    wanted: dict[str, dict[str, PendingAction]] = {}
    for held in pending:
        if held.action.kind in CONSTRUCTIVE and held.delivered:
            wanted.setdefault(held.action.host_id, {}).setdefault(held.action.model_id, held)
    if not wanted:
        return snapshot
    hosts = []
    for host in snapshot.hosts:
        mine = wanted.get(host.host_id)
        if not mine:
            hosts.append(host)
            continue
        rows = {r.model_id: r for r in host.residencies}
        residencies = list(host.residencies)
        for model_id, held in sorted(mine.items()):
            row = rows.get(model_id)
            if held.action.kind is ActionKind.LOAD and row is None:
                residencies.append(_in_progress(held, ResidencyState.LOADING, now))
            elif held.action.kind is ActionKind.WARM and (
                row is None or row.state is ResidencyState.CACHED
            ):
                if row is not None:
                    residencies.remove(row)
                residencies.append(_in_progress(held, ResidencyState.WARMING, now))
        hosts.append(replace(host, residencies=tuple(residencies)))
    return replace(snapshot, hosts=tuple(hosts))


def _in_progress(held: PendingAction, state: ResidencyState, now: float) -> Residency:
    action = held.action
    return Residency(
        model_id=action.model_id,
        memory_mb=action.memory_mb,
        state=state,
        artifact_sha256=action.artifact_sha256,
        runtime=action.runtime,
        loaded_at=now,
        ownership=Ownership.MANAGED,
    )
