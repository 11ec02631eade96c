"""One stage's memory of accepted coordinator claims and the work under them.

The rules are pure functions in ``fence_rules``; this class is the small
piece of state a stage keeps between messages: the accepted claim per
artifact, and the running stages and preparations registered with ``track``
so that accepting a newer term can report which of them must be fenced.
It is mutable on purpose (a stage's fence is a long-lived object), but holds
no clock and does no I/O; every answer is sorted so none depends on the
order work was registered.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.split.claims import Claim, ClaimKey, StageLoad, StopRequest
from gridctl.split.decisions import ClaimDecision, LoadDecision, StopDecision
from gridctl.split.fence_rules import judge_claim, judge_load, judge_stop
from gridctl.split.stage_work import StageWork


class ClaimRegistry:
    """Accepted claims keyed by artifact, plus the work each stage is doing."""

    def __init__(self) -> None:
        self._claims: dict[ClaimKey, Claim] = {}
        self._work: dict[str, StageWork] = {}

    def current(self, key: ClaimKey) -> Claim | None:
        """The claim accepted for ``key``, if any."""
        return self._claims.get(key)

    def accept(self, claim: Claim, now_ms: int) -> ClaimDecision:
        """Judge ``claim``; on acceptance remember it and fence older-term work.

        Fenced work is forgotten here: the decision hands it to the host
        runtime, which shuts the stages down and cancels the preparations.
        Unfenced work (term 0) never takes part in coordination and is kept.
        """
        decision = judge_claim(self._claims.get(claim.key), claim, now_ms)
        if not decision.accepted:
            return decision
        self._claims[claim.key] = claim
        stale = sorted(
            work
            for work in self._work.values()
            if work.key == claim.key and 0 < work.coordinator_term < claim.coordinator_term
        )
        for work in stale:
            del self._work[work.work_id]
        return replace(decision, fenced_work=tuple(stale))

    def check_load(self, load: StageLoad, now_ms: int) -> LoadDecision:
        """Whether ``load`` is allowed by the accepted claim at ``now_ms``."""
        return judge_load(self._claims.get(load.key), load, now_ms)

    def check_stop(self, stop: StopRequest, now_ms: int) -> StopDecision:
        """Whether ``stop`` may stop the stage; ``now_ms`` is accepted for symmetry.

        A stale stop stays stale after the lease expires, so time does not
        enter this rule.
        """
        del now_ms
        return judge_stop(self._claims.get(stop.key), stop)

    def track(self, work: StageWork) -> None:
        """Register a running stage or preparation (replacing one with the same id)."""
        self._work[work.work_id] = work

    def release(self, work_id: str) -> None:
        """Forget work that ended on its own; unknown ids are ignored."""
        self._work.pop(work_id, None)

    def tracked_work(self) -> tuple[StageWork, ...]:
        """All registered work, sorted by ``work_id``."""
        return tuple(sorted(self._work.values()))
