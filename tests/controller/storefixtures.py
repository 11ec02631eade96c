"""Builders for store tests: a controllable clock and ready-made actions."""

from __future__ import annotations

from gridctl.domain import Action, ActionKind, DemandClass
from gridctl.reconcile import ActionKey, PendingAction, derive_action_id

T0 = 1_800_000_000.0


class FakeClock:
    """A wall clock the test moves by hand."""

    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def queued(
    kind: ActionKind = ActionKind.LOAD,
    host_id: str = "h1",
    model_id: str = "m",
    *,
    sha: str | None = "a" * 64,
    attempt: int = 0,
    cls: DemandClass | None = DemandClass.BASELINE,
) -> PendingAction:
    key = ActionKey(kind, host_id, model_id, sha)
    return PendingAction(
        action=Action(
            action_id=derive_action_id(key, attempt),
            kind=kind,
            host_id=host_id,
            model_id=model_id,
            artifact_sha256=sha,
            attempt=attempt,
            executable=True,
            reason="test",
            created_at=T0,
        ),
        demand_class=cls,
    )
