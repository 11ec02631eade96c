"""The predictive cache lifecycle: cache-only prefetches, TTL expiry and proven replacement.

Why its own module: prediction may spend spare *disk*, never serving capacity,
and it must not be able to fill disks. Every rule here is a pure function of the
authoritative plan, the latest fleet snapshot, the profiles, the policy and
``now``:

* **prefetch** — a correlation-only prediction (no direct, queued or baseline
  demand) that received no serving slot may stage one cache-only transfer on a
  future-compatible managed host, if the profile has an exact source, digest and
  declared size and the host's *authenticated* free disk, after the plan's own
  uncached placements, still leaves ``predictive_disk_reserve_mb``. Candidates
  are ranked by confidence- and pressure-weighted cold-start value per MB and
  re-ranked after every choice (each choice changes the disk ledger);
* **expiry** — a predictive entry never used, whose model has no demand left and
  that has been cached for ``predictive_cache_ttl_seconds``, is evicted by exact
  digest;
* **replacement** — when disk is full, a stronger prediction may replace mature
  (``prefetch_victim_min_age_seconds``) unused predictive entries: a bounded
  search over the union of the lowest-value and the largest candidates, up to
  ``prefetch_max_victims`` victims, proves the incoming value per MB is at least
  ``prefetch_replacement_value_gain`` times the group's and its total value is
  not less. Replacement takes two generations: this plan evicts, and the
  prefetch is planned only after a heartbeat proves the space came back —
  intended deletion is never credited as free space.

Never evicted: operator or demanded entries, used entries, live or planned
models, pinned hosts, direct or queued demand, inexact revisions, and hosts
without the ``evict`` actuator. A queued eviction is checked again against the
latest heartbeat before delivery (:func:`eviction_problem`).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gridctl.domain import (
    ActionKind,
    CachedArtifact,
    ControllerPolicy,
    DemandClass,
    FleetSnapshot,
    HostSnapshot,
    HostState,
    ModelDemand,
    ModelProfile,
    Plan,
    ResidencyState,
)
from gridctl.reconcile.proposals import Proposal

PREFETCH_REASON = "predictive prefetch"  # reason prefix: a cache-only predictive load
EVICT_REASON = "predictive cache"  # reason prefix of lifecycle evictions
_ADMITTING = (HostState.ACCEPTING, HostState.THROTTLED)


@dataclass(frozen=True)
class CacheAdvice:
    """One cache-only step: ``kind`` is "prefetch" or "evict"; ``rule`` names why."""

    kind: str
    host_id: str
    model_id: str
    sha256: str
    size_mb: int
    rule: str  # "predicted_demand" | "ttl_expired" | "replacement"
    value: float
    detail: str

    @property
    def reason(self) -> str:
        prefix = PREFETCH_REASON if self.kind == "prefetch" else EVICT_REASON
        return f"{prefix}: {self.rule}: {self.detail}"


def prediction_value(profile: ModelProfile, demand: ModelDemand | None) -> float:
    """Expected cold-start seconds a cached copy saves, weighted by confidence and pressure."""
    if demand is None:
        return 0.0
    pressure = max(
        demand.offered_concurrency,
        demand.correlated_requests_per_minute * profile.expected_service_seconds / 60.0,
    )
    return max(0.0, demand.confidence) * pressure * profile.load_seconds


def is_exact(entry: CachedArtifact, profiles: Mapping[str, ModelProfile]) -> bool:
    profile = profiles.get(entry.model_id)
    return profile is not None and entry.artifact_sha256 == profile.artifact_sha256


def _live(host: HostSnapshot, model_id: str) -> bool:
    return any(
        r.model_id == model_id and r.state is not ResidencyState.CACHED for r in host.residencies
    )


def protection(
    entry: CachedArtifact,
    host: HostSnapshot,
    profiles: Mapping[str, ModelProfile],
    demand: Mapping[str, ModelDemand],
    planned: frozenset[tuple[str, str]],
) -> str | None:
    """Why ``entry`` on ``host`` may not be evicted at all, or None."""
    if host.kind != "managed" or "evict" not in host.capabilities:
        return "host has no evict actuator"
    if not entry.predictive:
        return f"{entry.provenance} entry (not a predictive download)"
    if entry.used:
        return "used: a child was launched from it"
    if _live(host, entry.model_id):
        return "live residency"
    if (host.host_id, entry.model_id) in planned:
        return "placed by the plan"
    profile = profiles.get(entry.model_id)
    if profile is not None and host.host_id in profile.pins:
        return "pinned to this host"
    wanted = demand.get(entry.model_id)
    if wanted is not None and wanted.has_direct_evidence:
        return "direct or queued demand"
    return None


def expirations(
    snapshot: FleetSnapshot,
    profiles: Mapping[str, ModelProfile],
    policy: ControllerPolicy,
    planned: frozenset[tuple[str, str]],
) -> list[CacheAdvice]:
    """Unused predictive entries whose demand is gone, cached for at least the TTL."""
    demand = {d.model_id: d for d in snapshot.demand}
    advice = []
    for host in sorted(snapshot.hosts, key=lambda h: h.host_id):
        for entry in sorted(host.cached, key=lambda c: (c.model_id, c.artifact_sha256 or "")):
            if entry.artifact_sha256 is None or entry.cached_at is None:
                continue  # no exact digest to fence on, or no known age
            if protection(entry, host, profiles, demand, planned) is not None:
                continue
            wanted = demand.get(entry.model_id)
            if wanted is not None and wanted.correlated_requests_per_minute > 0:
                continue  # the prediction is still alive
            age = snapshot.now - entry.cached_at
            if age < policy.predictive_cache_ttl_seconds:
                continue
            advice.append(
                CacheAdvice(
                    "evict",
                    host.host_id,
                    entry.model_id,
                    entry.artifact_sha256,
                    entry.size_mb or 0,
                    "ttl_expired",
                    0.0,
                    f"unused for {age:.0f}s >= ttl {policy.predictive_cache_ttl_seconds:.0f}s",
                )
            )
    return advice


def compatible(profile: ModelProfile, host: HostSnapshot) -> bool:
    """A host that could later serve ``profile``: the static parts of placement."""
    res = host.resources
    if profile.pins and host.host_id not in profile.pins:
        return False
    if not set(profile.runtimes) & set(res.runtimes):
        return False
    if profile.backends and not set(profile.backends) & set(res.backends):
        return False
    if not set(profile.required_tags) <= set(res.tags) or set(profile.forbidden_tags) & set(
        res.tags
    ):
        return False
    if res.allowed_models and profile.name not in res.allowed_models:
        return False
    if profile.name in res.denied_models or profile.data_tier not in res.allowed_data_tiers:
        return False
    return res.capacity_mb - res.reserved_mb >= profile.largest_memory_among(res.runtimes)


def disk_ledger(
    snapshot: FleetSnapshot, plan: Plan, profiles: Mapping[str, ModelProfile]
) -> dict[str, int]:
    """Authenticated free disk per host after the plan's uncached new placements."""
    placing: dict[str, list[str]] = {}  # new placements per host: one pass, not one per host
    for a in plan.assignments:
        if not a.existing:
            placing.setdefault(a.host_id, []).append(a.model_id)
    ledger: dict[str, int] = {}
    for host in snapshot.hosts:
        if host.resources.disk_free_mb is None:
            continue  # missing telemetry never authorises a predictive transfer
        free = host.resources.disk_free_mb
        placed = placing.get(host.host_id)
        if placed:  # (most hosts get nothing new: their free disk is what they report)
            cached = {c.model_id for c in host.cached} | {r.model_id for r in host.residencies}
            for model_id in placed:
                profile = profiles.get(model_id)
                if model_id not in cached:
                    free -= (profile.artifact.size_mb or 0) if profile else 0
        ledger[host.host_id] = free
    return ledger


@dataclass(frozen=True)
class _Candidate:
    profile: ModelProfile
    value: float

    @property
    def size_mb(self) -> int:
        return int(self.profile.artifact.size_mb or 0)

    @property
    def per_mb(self) -> float:
        return self.value / self.size_mb if self.size_mb else 0.0


def _candidates(
    plan: Plan, snapshot: FleetSnapshot, profiles: Mapping[str, ModelProfile]
) -> list[_Candidate]:
    placed = {a.model_id for a in plan.assignments}
    out = []
    for d in sorted(snapshot.demand, key=lambda d: d.model_id):
        profile = profiles.get(d.model_id)
        if profile is None or not d.correlation_only or profile.min_replicas > 0:
            continue  # only a pure prediction prefetches; baseline work places normally
        art = profile.artifact
        if d.model_id in placed or not (art.source and art.sha256 and art.size_mb):
            continue
        if any(c.model_id == d.model_id for h in snapshot.hosts for c in h.cached):
            continue  # already cached somewhere: a later placement can use it
        value = prediction_value(profile, d)
        if value > 0:
            out.append(_Candidate(profile, value))
    return out


def _eligible_hosts(snapshot: FleetSnapshot, profile: ModelProfile) -> list[HostSnapshot]:
    return [
        h
        for h in sorted(snapshot.hosts, key=lambda h: h.host_id)
        if h.kind == "managed"
        and h.state in _ADMITTING
        and "load" in h.capabilities
        and compatible(profile, h)
        and not any(r.model_id == profile.name for r in h.residencies)
    ]


@dataclass(frozen=True)
class _Victim:
    entry: CachedArtifact
    value: float

    @property
    def size_mb(self) -> int:
        return int(self.entry.size_mb or 0)


def replacement_victims(
    host: HostSnapshot,
    incoming: _Candidate,
    free_mb: int,
    snapshot: FleetSnapshot,
    profiles: Mapping[str, ModelProfile],
    policy: ControllerPolicy,
    planned: frozenset[tuple[str, str]],
    taken: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[_Victim, ...] | None:
    """The cheapest proven victim group that makes room for ``incoming``, or None."""
    demand = {d.model_id: d for d in snapshot.demand}
    pool = []
    for entry in host.cached:
        if (host.host_id, entry.model_id) in taken or entry.artifact_sha256 is None:
            continue
        if protection(entry, host, profiles, demand, planned) is not None:
            continue
        if not is_exact(entry, profiles) or entry.cached_at is None or not entry.size_mb:
            continue  # inexact revisions and unknown sizes or ages are never candidates
        if snapshot.now - entry.cached_at < policy.prefetch_victim_min_age_seconds:
            continue  # not mature yet
        value = prediction_value(profiles[entry.model_id], demand.get(entry.model_id))
        pool.append(_Victim(entry, value))
    k = policy.prefetch_max_victims
    cheapest = sorted(pool, key=lambda v: (v.value, v.entry.model_id))[:k]
    largest = sorted(pool, key=lambda v: (-v.size_mb, v.entry.model_id))[:k]
    union = sorted({v.entry.model_id: v for v in cheapest + largest}.values(), key=_victim_key)
    best: tuple[tuple[float, int, int, tuple[str, ...]], tuple[_Victim, ...]] | None = None
    for count in range(1, min(k, len(union)) + 1):
        for group in itertools.combinations(union, count):
            freed = sum(v.size_mb for v in group)
            if free_mb + freed - incoming.size_mb < policy.predictive_disk_reserve_mb:
                continue
            lost = sum(v.value for v in group)
            if incoming.value < lost:
                continue  # less total expected startup value
            if incoming.per_mb < policy.prefetch_replacement_value_gain * (lost / freed):
                continue  # not the configured value-density gain
            rank = (lost, count, freed, tuple(v.entry.model_id for v in group))
            if best is None or rank < best[0]:
                best = (rank, group)
    return None if best is None else best[1]


def _victim_key(v: _Victim) -> tuple[str, str]:
    return (v.entry.model_id, v.entry.artifact_sha256 or "")


def cache_lifecycle(
    plan: Plan,
    snapshot: FleetSnapshot,
    profiles: Mapping[str, ModelProfile],
    policy: ControllerPolicy,
    *,
    loading: frozenset[tuple[str, str]] = frozenset(),
) -> tuple[CacheAdvice, ...]:
    """Every cache-only step for this plan; ``loading`` = (host, model) loads in flight."""
    planned = frozenset((a.host_id, a.model_id) for a in plan.assignments)
    advice: list[CacheAdvice] = expirations(snapshot, profiles, policy, planned)
    ledger = disk_ledger(snapshot, plan, profiles)
    remaining = [
        c
        for c in _candidates(plan, snapshot, profiles)
        if not any(m == c.profile.name for _, m in loading)
    ]
    evicting: set[tuple[str, str]] = {(a.host_id, a.model_id) for a in advice}
    while remaining:
        remaining.sort(key=lambda c: (-c.per_mb, -c.value, c.profile.name))
        choice = remaining.pop(0)
        fits = [
            h
            for h in _eligible_hosts(snapshot, choice.profile)
            if h.host_id in ledger
            and ledger[h.host_id] - choice.size_mb >= policy.predictive_disk_reserve_mb
        ]
        if fits:
            host = max(fits, key=lambda h: (ledger[h.host_id], h.host_id))
            ledger[host.host_id] -= choice.size_mb
            advice.append(_prefetch(host, choice, ledger[host.host_id]))
            continue
        for host in _eligible_hosts(snapshot, choice.profile):
            if host.host_id not in ledger:
                continue
            group = replacement_victims(
                host,
                choice,
                ledger[host.host_id],
                snapshot,
                profiles,
                policy,
                planned,
                frozenset(evicting),
            )
            if group is None:
                continue
            for victim in group:
                evicting.add((host.host_id, victim.entry.model_id))
                advice.append(_replacement(host, victim, choice, len(group)))
            break  # two generations: the prefetch waits for proof the space is back
    return tuple(advice)


def _prefetch(host: HostSnapshot, choice: _Candidate, left_mb: int) -> CacheAdvice:
    art = choice.profile.artifact
    assert art.sha256 is not None
    return CacheAdvice(
        "prefetch",
        host.host_id,
        choice.profile.name,
        art.sha256,
        choice.size_mb,
        "predicted_demand",
        choice.value,
        f"value {choice.value:.1f}s ({choice.per_mb:.4f}/MB); {left_mb} MB free after",
    )


def _replacement(
    host: HostSnapshot, victim: _Victim, incoming: _Candidate, count: int
) -> CacheAdvice:
    assert victim.entry.artifact_sha256 is not None
    return CacheAdvice(
        "evict",
        host.host_id,
        victim.entry.model_id,
        victim.entry.artifact_sha256,
        victim.size_mb,
        "replacement",
        victim.value,
        f"1 of {count} for {incoming.profile.name} ({incoming.per_mb:.4f}/MB vs "
        f"{victim.value / victim.size_mb:.4f}/MB)",
    )


def cache_proposals(
    plan: Plan,
    snapshot: FleetSnapshot,
    profiles: Mapping[str, ModelProfile],
    policy: ControllerPolicy,
) -> list[Proposal]:
    """The lifecycle's advice as reconciler proposals (cache-only loads and evictions)."""
    loading = frozenset(
        (h.host_id, r.model_id)
        for h in snapshot.hosts
        for r in h.residencies
        if r.state is ResidencyState.LOADING
    )
    proposals = []
    for a in cache_lifecycle(plan, snapshot, profiles, policy, loading=loading):
        profile = profiles.get(a.model_id)
        prefetch = a.kind == "prefetch"
        proposals.append(
            Proposal(
                kind=ActionKind.LOAD if prefetch else ActionKind.EVICT,
                host_id=a.host_id,
                model_id=a.model_id,
                artifact_sha256=a.sha256,
                memory_mb=0,
                runtime=None,
                reason=a.reason,
                priority=profile.priority if profile is not None and prefetch else 0,
                demand_class=DemandClass.INFERRED if prefetch else None,
                needs_download=prefetch,
                cold_start_seconds=profile.load_seconds if profile is not None else 0.0,
            )
        )
    return proposals


def eviction_problem(
    model_id: str,
    sha256: str | None,
    host: HostSnapshot | None,
    profiles: Mapping[str, ModelProfile],
    demand: Sequence[ModelDemand] = (),
) -> str | None:
    """Why a queued eviction must not be delivered now (revalidated on the latest heartbeat)."""
    if host is None:
        return "host unknown"
    entry = next(
        (c for c in host.cached if c.model_id == model_id and c.artifact_sha256 == sha256), None
    )
    if entry is None:
        return "the exact entry is no longer reported"
    by_model = {d.model_id: d for d in demand}
    return protection(entry, host, profiles, by_model, frozenset())
