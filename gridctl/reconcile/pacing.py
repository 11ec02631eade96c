"""Churn suppression from history: failure backoff, mutation cooldown, observation fencing.

* failure_backoff — per (kind, host, model): after n consecutive failures the
  next attempt waits ``base * 2**(n-1)`` seconds, capped at ``max``.
* mutation_cooldown — per (host, model): a step in the opposite direction
  (constructive after destructive or the reverse) waits the cooldown after the
  last success.
* awaiting_observation — a snapshot not newer than a successful step of the
  same kind cannot trigger a duplicate of it.
* observation_timeout — a newer heartbeat that shows the step's own starting
  state (cached for warm, ready for drain, draining for unload, absent for
  load) proves the earlier lifecycle finished and may start a new one at once;
  any other newer state waits the observation timeout after the success.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gridctl.domain import ActionKind, ControllerPolicy, ResidencyState
from gridctl.reconcile.codes import BlockedCode
from gridctl.reconcile.observing import FleetView, artifact_matches
from gridctl.reconcile.proposals import Proposal
from gridctl.reconcile.records import HistoryEntry

Block = tuple[BlockedCode, float | None]
_Step = tuple[ActionKind, str, str]  # kind, host, model


@dataclass(frozen=True)
class FailureStreak:
    count: int
    last_failed_at: float


def backoff_delay(failures: int, policy: ControllerPolicy) -> float:
    """Exponential, capped: base, 2*base, 4*base, ... up to the maximum."""
    if failures <= 0:
        return 0.0
    exponent = min(failures - 1, 62)
    return float(
        min(policy.failure_backoff_base_seconds * 2**exponent, policy.failure_backoff_max_seconds)
    )


class HistoryIndex:
    """Last successes and current failure streaks, indexed once per tick."""

    def __init__(self, history: Iterable[HistoryEntry]) -> None:
        self.last_success: dict[_Step, float] = {}
        self.streaks: dict[_Step, FailureStreak] = {}
        self.last_direction: dict[tuple[str, str, bool], float] = {}
        self.acknowledged: set[str] = set()
        ordered = sorted(history, key=lambda e: (e.effective_at, e.attempt, e.action_id))
        for e in ordered:
            step = (e.kind, e.host_id, e.model_id)
            if e.acknowledged and e.status.terminal:
                self.acknowledged.add(e.action_id)
            if e.succeeded:
                self.last_success[step] = max(
                    self.last_success.get(step, e.effective_at), e.effective_at
                )
                self.streaks.pop(step, None)
                key = (e.host_id, e.model_id, e.kind.destructive)
                self.last_direction[key] = max(
                    self.last_direction.get(key, e.effective_at), e.effective_at
                )
            elif e.failed:
                streak = self.streaks.get(step)
                count = streak.count + 1 if streak else 1
                self.streaks[step] = FailureStreak(count, e.effective_at)


def _shows_starting_state(p: Proposal, view: FleetView) -> bool:
    if p.kind.splits:
        return True  # a stage claim leaves no residency row: its receipt is the evidence
    sha = view.wanted_sha(p.model_id) if p.artifact_sha256 is None else p.artifact_sha256
    states = {
        r.state
        for r in view.residencies(p.host_id, p.model_id)
        if artifact_matches(r.artifact_sha256, sha)
    }
    if p.kind is ActionKind.LOAD:
        return not states and not view.is_cached(p.host_id, p.model_id)
    if p.kind is ActionKind.WARM:
        live = states - {ResidencyState.CACHED}
        return not live and view.is_cached(p.host_id, p.model_id)
    if p.kind is ActionKind.DRAIN:
        return ResidencyState.READY in states
    if p.kind is ActionKind.UNLOAD:
        return ResidencyState.DRAINING in states
    return view.is_cached(p.host_id, p.model_id)


def pacing_block(
    p: Proposal, history: HistoryIndex, view: FleetView, policy: ControllerPolicy, now: float
) -> Block | None:
    step = (p.kind, p.host_id, p.model_id)
    streak = history.streaks.get(step)
    if streak is not None:
        until = streak.last_failed_at + backoff_delay(streak.count, policy)
        if now < until:
            return BlockedCode.FAILURE_BACKOFF, until
    opposite = history.last_direction.get((p.host_id, p.model_id, not p.kind.destructive))
    if opposite is not None:
        until = opposite + policy.mutation_cooldown_seconds
        if now < until:
            return BlockedCode.MUTATION_COOLDOWN, until
    succeeded_at = history.last_success.get(step)
    if succeeded_at is not None:
        seen = view.observed_at(p.host_id)
        if seen is None or seen <= succeeded_at:
            return BlockedCode.AWAITING_OBSERVATION, None
        if not _shows_starting_state(p, view):
            until = succeeded_at + policy.observation_timeout_seconds
            if now < until:
                return BlockedCode.OBSERVATION_TIMEOUT, until
    return None
