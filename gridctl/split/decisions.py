"""What the fence answers: accept, or reject with exactly one named reason.

Rejections are data, not exceptions, so the coordinator can count accepts
towards quorum and record every refusal where it happened.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.split.reasons import FenceReason
from gridctl.split.stage_work import StageWork, WorkKind


@dataclass(frozen=True)
class ClaimDecision:
    """The answer to a ``Claim``.

    ``supersedes_term`` is the older term this acceptance replaced (``None`` for
    a first claim or a same-term lease refresh). ``fenced_work`` is the stale
    work of older terms the host runtime must now stop, sorted by ``work_id``.
    ``current_term`` is the term the stage holds after deciding.
    """

    accepted: bool
    reason: FenceReason | None = None
    supersedes_term: int | None = None
    refreshed: bool = False
    current_term: int | None = None
    fenced_work: tuple[StageWork, ...] = ()

    @property
    def stages_to_shut_down(self) -> tuple[StageWork, ...]:
        return tuple(w for w in self.fenced_work if w.kind is WorkKind.RUNNING_STAGE)

    @property
    def preparations_to_cancel(self) -> tuple[StageWork, ...]:
        return tuple(w for w in self.fenced_work if w.kind is WorkKind.PREPARATION)


@dataclass(frozen=True)
class LoadDecision:
    """The answer to a ``StageLoad``; ``unfenced`` marks a local/legacy bypass."""

    accepted: bool
    reason: FenceReason | None = None
    unfenced: bool = False


@dataclass(frozen=True)
class StopDecision:
    """The answer to a ``StopRequest``."""

    accepted: bool
    reason: FenceReason | None = None


def reject_claim(reason: FenceReason, current_term: int | None = None) -> ClaimDecision:
    return ClaimDecision(accepted=False, reason=reason, current_term=current_term)


def reject_load(reason: FenceReason) -> LoadDecision:
    return LoadDecision(accepted=False, reason=reason)
