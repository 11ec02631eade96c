"""The score of one run: service, suitability, SLO, lifecycle, safety, coverage, churn.

Minimum-user, least-workload, SLO and coverage terms are evaluated over
structurally allocatable workloads only (some configured model could ever
serve them on this fleet): a video request no host can run still lowers raw
service and shows as a capacity gap, but it does not make every strategy tie
at zero on decision quality. The coverage term is a normalised logarithm of
each allocatable workload's service, so abandoning a whole supported need is
visible while improvements near full service still count.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from gridctl.lab.nodes import NodeEvents
from gridctl.lab.serving import MinuteLog

REVERSAL_SECONDS = 600.0  # a change undone within ten minutes is a rapid reversal
STARTUP_WINDOW_MINUTES = 5  # a refusal served within five minutes waited on a cold start
MIN_USER_REQUESTS = 5
WEIGHTS = {
    "served": 0.25,
    "suitability": 0.15,
    "slo": 0.15,
    "lifecycle": 0.10,
    "safety": 0.10,
    "min_user": 0.10,
    "coverage": 0.15,
}


def coverage_term(service: float) -> float:
    """log(1 + 9s) / log(10): 0 for an abandoned need, 1 at full service."""
    return math.log1p(9.0 * max(0.0, min(1.0, service))) / math.log(10.0)


@dataclass
class Accumulator:
    """Everything scoring needs, folded minute by minute."""

    allocatable: frozenset[str]
    offered: dict[str, int] = field(default_factory=dict)
    ok: dict[str, int] = field(default_factory=dict)
    slo_ok: int = 0
    allocatable_requests: int = 0
    suitability: float = 0.0
    users: dict[str, list[int]] = field(default_factory=dict)  # user -> [requests, ok]
    per_minute: list[dict[str, list[int]]] = field(default_factory=list)  # w -> [offered, ok]
    refused_minutes: dict[str, list[int]] = field(default_factory=dict)
    served_minutes: dict[str, set[int]] = field(default_factory=dict)
    changes: list[tuple[str, str, str, float]] = field(default_factory=list)  # kind,host,model,at
    replica_used: dict[tuple[str, str], bool] = field(default_factory=dict)
    warmups: int = 0
    warmups_used: int = 0
    loads: int = 0
    cache_hits: int = 0
    prefetch_downloads: int = 0
    prefetch_hits: int = 0
    prefetch_lead_seconds: list[float] = field(default_factory=list)
    avoided_load_seconds: float = 0.0
    evicted_mb: int = 0
    refused_commands: int = 0
    safety: list[str] = field(default_factory=list)
    overloaded_minutes: dict[str, int] = field(default_factory=dict)
    unsatisfied_minutes: dict[str, int] = field(default_factory=dict)

    def minute(self, index: int, log: MinuteLog) -> None:
        row: dict[str, list[int]] = {}
        for s in log.served:
            w = s.workload
            cell = row.setdefault(w, [0, 0])
            cell[0] += 1
            self.offered[w] = self.offered.get(w, 0) + 1
            user = self.users.setdefault(s.arrival.user_id, [0, 0])
            counted = w in self.allocatable
            if counted:
                user[0] += 1
                self.allocatable_requests += 1
            if s.outcome == "ok":
                cell[1] += 1
                self.ok[w] = self.ok.get(w, 0) + 1
                self.suitability += s.suitability
                self.served_minutes.setdefault(w, set()).add(index)
                if s.host_id and s.model:
                    self.replica_used[(s.host_id, s.model)] = True
                if counted:
                    user[1] += 1
                    self.slo_ok += int(s.within_slo)
            elif s.outcome == "rejected":
                self.refused_minutes.setdefault(w, []).append(index)
        self.per_minute.append(row)
        for model in log.overloaded:
            self.overloaded_minutes[model] = self.overloaded_minutes.get(model, 0) + 1

    def node(self, host_id: str, events: NodeEvents, outage: bool = False) -> None:
        for model, at in events.ready:
            self.changes.append(("ready", host_id, model, at))
            self._close((host_id, model))
            self.replica_used[(host_id, model)] = False
            self.warmups += 1
        for model, at in events.removed:
            if not outage:
                self.changes.append(("removed", host_id, model, at))
            self._close((host_id, model))
        for _model, hit, prefetch, seconds in events.loads:
            self.loads += 1
            if hit:
                self.cache_hits += 1
            elif prefetch:
                self.prefetch_downloads += 1
            del seconds
        self.evicted_mb += events.evicted_mb
        self.refused_commands += len(events.refused)

    def prefetch_hit(self, lead_seconds: float, load_seconds: float) -> None:
        self.prefetch_hits += 1
        self.prefetch_lead_seconds.append(lead_seconds)
        self.avoided_load_seconds += load_seconds

    def _close(self, key: tuple[str, str]) -> None:
        used = self.replica_used.pop(key, None)
        if used is not None:
            self.warmups_used += int(used)

    def finish(self) -> None:
        for key in sorted(self.replica_used):
            self._close(key)


def churn(changes: Iterable[tuple[str, str, str, float]]) -> tuple[int, int]:
    """(changes, rapid reversals): a removal within ten minutes of the same replica's
    readiness, or a re-readiness within ten minutes of its removal."""
    last: dict[tuple[str, str], tuple[str, float]] = {}
    count = reversals = 0
    for kind, host, model, at in sorted(changes, key=lambda c: (c[3], c[1], c[2], c[0])):
        count += 1
        prior = last.get((host, model))
        if prior is not None and prior[0] != kind and at - prior[1] < REVERSAL_SECONDS:
            reversals += 1
        last[(host, model)] = (kind, at)
    return count, reversals


def startup_waits(acc: Accumulator) -> int:
    """Refused requests whose workload was served within the next few minutes: demand
    that waited on a cold start a predictive policy could have hidden."""
    total = 0
    for workload, minutes in acc.refused_minutes.items():
        served = acc.served_minutes.get(workload, set())
        for m in minutes:
            if any(m < s <= m + STARTUP_WINDOW_MINUTES for s in served):
                total += 1
    return total


def _pct(part: float, whole: float) -> float:
    return 100.0 * part / whole if whole else 100.0


def summary(acc: Accumulator, node_hours: float) -> dict[str, float | int]:
    offered = sum(acc.offered.values())
    ok = sum(acc.ok.values())
    service = {w: acc.ok.get(w, 0) / n for w, n in acc.offered.items() if n}
    allocatable = sorted(w for w in service if w in acc.allocatable)
    users = [u for u in acc.users.values() if u[0] >= MIN_USER_REQUESTS] or [
        u for u in acc.users.values() if u[0] > 0
    ]
    min_user = min((_pct(u[1], u[0]) for u in users), default=100.0)
    least = min((100.0 * service[w] for w in allocatable), default=100.0)
    coverage = (
        100.0 * sum(coverage_term(service[w]) for w in allocatable) / len(allocatable)
        if allocatable
        else 100.0
    )
    changes, reversals = churn(acc.changes)
    terms = {
        "served": _pct(ok, offered),
        "suitability": 100.0 * acc.suitability / ok if ok else 0.0,
        "slo": _pct(acc.slo_ok, acc.allocatable_requests),
        "lifecycle": _pct(acc.warmups_used, acc.warmups),
        "safety": 0.0 if acc.safety else 100.0,
        "min_user": min_user,
        "coverage": coverage,
    }
    score = sum(WEIGHTS[k] * v for k, v in terms.items())
    return {
        "score": score,
        "served_pct": terms["served"],
        "suitability_pct": terms["suitability"],
        "slo_pct": terms["slo"],
        "lifecycle_pct": terms["lifecycle"],
        "safety_violations": len(acc.safety),
        "min_user_pct": min_user,
        "least_workload_pct": least,
        "coverage_pct": coverage,
        "offered": offered,
        "served": ok,
        "changes": changes,
        "rapid_reversals": reversals,
        "changes_per_node_hour": changes / node_hours if node_hours else 0.0,
        "rapid_reversal_pct": _pct(reversals, changes) if changes else 0.0,
        "startup_waits": startup_waits(acc),
        "cold_loads": acc.loads - acc.cache_hits,
        "cache_hits": acc.cache_hits,
        "refused_commands": acc.refused_commands,
    }
