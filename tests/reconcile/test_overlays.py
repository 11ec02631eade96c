"""Delivered load/warm work is shown to the planner as the in-progress residency it becomes."""

from __future__ import annotations

from gridctl.domain import (
    Action,
    ActionKind,
    CachedArtifact,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    Residency,
    ResidencyState,
)
from gridctl.reconcile import PendingAction
from gridctl.reconcile.overlays import with_pending_work


def host(host_id: str, *rows: Residency, cached: tuple[str, ...] = ()) -> HostSnapshot:
    return HostSnapshot(
        host_id=host_id,
        resources=HostResources(capacity_mb=4096),
        residencies=rows,
        cached=tuple(CachedArtifact(m) for m in cached),
    )


def pending(kind: ActionKind, host_id: str, *, delivered: bool = True) -> PendingAction:
    action = Action(f"{kind}-{host_id}", kind, host_id, "m", memory_mb=640, executable=True)
    return PendingAction(action=action, delivered=delivered)


def states(snapshot: FleetSnapshot) -> dict[str, list[str]]:
    return {
        h.host_id: [f"{r.model_id}:{r.state.value}" for r in h.residencies] for h in snapshot.hosts
    }


def test_delivered_load_and_warm_show_as_in_progress() -> None:
    snap = FleetSnapshot(
        now=10,
        hosts=(
            host("a"),
            host("b", Residency("m", 0, ResidencyState.CACHED), cached=("m",)),
        ),
    )
    shown = with_pending_work(
        snap, [pending(ActionKind.LOAD, "a"), pending(ActionKind.WARM, "b")], 10
    )
    assert states(shown) == {"a": ["m:loading"], "b": ["m:warming"]}
    assert shown.hosts[0].residencies[0].memory_mb == 640


def test_queued_work_and_reported_progress_are_left_alone() -> None:
    ready = Residency("m", 640, ResidencyState.READY)
    snap = FleetSnapshot(now=10, hosts=(host("a"), host("b", ready)))
    shown = with_pending_work(
        snap,
        [
            pending(ActionKind.LOAD, "a", delivered=False),
            pending(ActionKind.WARM, "b"),
            pending(ActionKind.DRAIN, "a"),
        ],
        10,
    )
    assert shown == snap
