"""Affinity workflow sequences: which workload a session moves to next.

Only requests carrying a (double-hashed) session key teach sequences. Each
session has a cursor: the workload of its last request and when that request
started and finished. A later request of the same session that started after
the cursor's request had finished is a departure from the cursor's workload;
when its workload differs, the (from, to) transition gains one example and a
lead time (arrival to arrival). Completions that arrive out of order, or that
overlap the cursor's request, update aggregate demand elsewhere but never
establish an order here. Staying in one workload is not a departure.

A transition is mature after ``affinity_min_transitions`` examples; its
confidence is its examples over every departure from the same source.
Memory is bounded: at most ``affinity_max_workflows`` cursors and
``affinity_max_transitions`` transitions, the least recently seen evicted
first, and both expire ``affinity_expiry_seconds`` after they were last seen.
Traffic from different sessions is never compared, so adjacent requests of
unrelated users cannot create a transition.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.demand.features import RequestFeatures
from gridctl.domain import ControllerPolicy

LEAD_SAMPLES = 16  # recent lead times kept per transition for the median


@dataclass(frozen=True, slots=True)
class Cursor:
    workload: str
    started: float
    completed: float
    seen: float


@dataclass(frozen=True, slots=True)
class TransitionStats:
    examples: int
    leads: tuple[float, ...]
    seen: float


@dataclass(frozen=True, slots=True)
class WorkloadTransition:
    """A learned workload edge as status and ``gridctl forecast`` report it."""

    source: str
    target: str
    confidence: float
    examples: int
    lead_seconds: float
    mature: bool


def median(values: tuple[float, ...]) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2.0


class SequenceLearner:
    """Bounded per-session cursors and workload transitions (no clock: time is an argument)."""

    def __init__(self, policy: ControllerPolicy) -> None:
        self.policy = policy
        self.cursors: dict[str, Cursor] = {}  # insertion order = least recently seen first
        self.transitions: dict[tuple[str, str], TransitionStats] = {}
        # a lower bound of every ``seen`` held: no scan is needed before the horizon passes it
        self._oldest_seen = float("inf")

    def observe(self, features: RequestFeatures) -> None:
        if features.session is None or features.evaluation:
            return
        t = features.t
        if t - self.policy.affinity_expiry_seconds > self._oldest_seen:
            self.expire(t)  # something held may be older than the horizon
        key = features.session
        cursors = self.cursors
        previous = cursors.get(key)
        if previous is not None and t <= previous.completed:
            # out-of-order or simultaneous completion: no order, keep the newer cursor
            self._touch(
                key,
                Cursor(
                    previous.workload,
                    previous.started,
                    previous.completed,
                    max(previous.seen, t),
                ),
            )
            return
        started = features.started
        workload = features.workload
        if previous is not None and started >= previous.completed and workload != previous.workload:
            lead = max(0.0, started - previous.started)
            self._count(previous.workload, workload, lead, t)
        self._touch(key, Cursor(workload, started, t, t))

    def expire(self, now: float) -> None:
        horizon = now - self.policy.affinity_expiry_seconds
        if horizon <= self._oldest_seen:
            return  # nothing held is older than the horizon
        for key in [k for k, c in self.cursors.items() if c.seen < horizon]:
            del self.cursors[key]
        for edge in [e for e, s in self.transitions.items() if s.seen < horizon]:
            del self.transitions[edge]
        self._oldest_seen = min(
            [c.seen for c in self.cursors.values()] + [s.seen for s in self.transitions.values()],
            default=float("inf"),
        )

    def _touch(self, key: str, cursor: Cursor) -> None:
        cursors = self.cursors
        cursors.pop(key, None)
        cursors[key] = cursor
        if cursor.seen < self._oldest_seen:
            self._oldest_seen = cursor.seen
        while len(cursors) > self.policy.affinity_max_workflows:
            del cursors[next(iter(cursors))]

    def _count(self, source: str, target: str, lead: float, at: float) -> None:
        edge = (source, target)
        stats = self.transitions.pop(edge, TransitionStats(0, (), at))
        leads = (*stats.leads, lead)[-LEAD_SAMPLES:]
        self.transitions[edge] = TransitionStats(stats.examples + 1, leads, at)
        self._oldest_seen = min(self._oldest_seen, at)
        while len(self.transitions) > self.policy.affinity_max_transitions:
            del self.transitions[next(iter(self.transitions))]

    def departures(self, source: str) -> int:
        return sum(s.examples for (a, _), s in self.transitions.items() if a == source)

    def edges(self, now: float, mature_only: bool = True) -> tuple[WorkloadTransition, ...]:
        """Learned edges still inside the expiry window, sorted by (source, target)."""
        horizon = now - self.policy.affinity_expiry_seconds
        live = {e: s for e, s in self.transitions.items() if s.seen >= horizon}
        totals: dict[str, int] = {}
        for (source, _), stats in live.items():
            totals[source] = totals.get(source, 0) + stats.examples
        result: list[WorkloadTransition] = []
        for (source, target), stats in sorted(live.items()):
            mature = stats.examples >= self.policy.affinity_min_transitions
            if mature_only and not mature:
                continue
            result.append(
                WorkloadTransition(
                    source=source,
                    target=target,
                    confidence=stats.examples / totals[source],
                    examples=stats.examples,
                    lead_seconds=median(stats.leads),
                    mature=mature,
                )
            )
        return tuple(result)

    def restore(
        self, cursors: dict[str, Cursor], transitions: dict[tuple[str, str], TransitionStats]
    ) -> None:
        """Replace what is held with persisted state (least recently seen first)."""
        self.cursors = dict(sorted(cursors.items(), key=lambda kv: (kv[1].seen, kv[0])))
        self.transitions = dict(sorted(transitions.items(), key=lambda kv: (kv[1].seen, kv[0])))
        self._oldest_seen = min(
            [c.seen for c in self.cursors.values()] + [s.seen for s in self.transitions.values()],
            default=float("inf"),
        )

    def state(self) -> dict[str, object]:
        """Everything the learner holds, JSON-shaped (for persistence and privacy checks)."""
        return {
            "cursors": {
                k: [c.workload, c.started, c.completed, c.seen] for k, c in self.cursors.items()
            },
            "transitions": [
                [a, b, s.examples, list(s.leads), s.seen] for (a, b), s in self.transitions.items()
            ],
        }
