"""Exact-artifact seeding: the fleet fetches a new artifact from its origin once.

While no fresh host holds a verified copy of an exact artifact (same SHA-256)
that a profile sources from the network, loads of it are sequenced: one host
fetches from the origin (the seed) and the others wait (``artifact_seeding``)
until a heartbeat shows the copy, after which the controller points them at that
peer, up to the ordinary fanout limit. The seed holds its slot while its load is
pending, observed running, or succeeded but not yet shown by a newer heartbeat
of its host. Installed sources (``pypi://``, ``file://``) have no origin to
spare and are not sequenced.

The wait never outlives its reason. When the latest finished load of the
artifact failed, or every seed load sits on a host that is no longer fresh, the
sequencing lifts and the ordinary fanout applies; the admitted load carries
the named fallback (``SeedFallback``) in its reason so status says why a second
host went to the origin.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum

from gridctl.domain import ActionKind, ResidencyState
from gridctl.reconcile.observing import FleetView, artifact_identity
from gridctl.reconcile.records import HistoryEntry

Replica = tuple[str, str]  # (host, model)

_HOLDING = frozenset(
    {ResidencyState.CACHED, ResidencyState.WARMING, ResidencyState.READY, ResidencyState.DRAINING}
)


REMOTE_SCHEMES = ("https://", "http://", "hf://")  # sources fetched over the network


def fetched_remotely(source: str | None) -> bool:
    """Only a network source has an origin to spare; ``pypi://`` and ``file://`` are local."""
    return source is not None and source.startswith(REMOTE_SCHEMES)


class SeedFallback(StrEnum):
    """Why a load of a not-yet-held artifact may go to the origin beside another."""

    SEED_FAILED = "artifact_seed_failed"  # the latest finished load of it failed
    SEED_HOST_UNAVAILABLE = "artifact_seed_host_unavailable"  # its seed host went stale


@dataclass(frozen=True)
class SeedVerdict:
    """Whether one more load of an artifact must wait for its seed, or why not."""

    wait: bool  # True: ``artifact_seeding``, one origin download at a time
    fallback: SeedFallback | None = None


@dataclass
class _Outcome:
    at: float
    failed: bool
    host_id: str
    model_id: str


@dataclass
class SeedIndex:
    """Per exact artifact: the latest finished load, indexed once per tick."""

    latest: dict[str, _Outcome] = field(default_factory=dict)

    @classmethod
    def of(cls, history: Iterable[HistoryEntry]) -> SeedIndex:
        index = cls()
        ordered = sorted(history, key=lambda e: (e.effective_at, e.attempt, e.action_id))
        for e in ordered:
            identity = artifact_identity(e.artifact_sha256)
            if e.kind is not ActionKind.LOAD or identity is None:
                continue
            if e.succeeded or e.failed:
                index.latest[identity] = _Outcome(e.effective_at, e.failed, e.host_id, e.model_id)
        return index


def holder_index(view: FleetView) -> dict[str, frozenset[str]]:
    """Per digest: fresh hosts whose heartbeat shows a verified copy (cached or live)."""
    found: dict[str, set[str]] = {}
    for host_id in view.host_ids():
        host = view.host(host_id)
        if host is None or not view.is_fresh(host_id):
            continue
        shas = {c.artifact_sha256 for c in host.cached}
        shas |= {r.artifact_sha256 for r in host.residencies if r.state in _HOLDING}
        for sha in shas:
            if sha:
                found.setdefault(sha, set()).add(host_id)
    return {sha: frozenset(hosts) for sha, hosts in found.items()}


def unconfirmed_seed(view: FleetView, index: SeedIndex, identity: str) -> Replica | None:
    """A seed whose load succeeded but whose host has not heartbeated since."""
    outcome = index.latest.get(identity)
    if outcome is None or outcome.failed or not view.is_fresh(outcome.host_id):
        return None
    seen = view.observed_at(outcome.host_id)
    if seen is not None and seen > outcome.at:
        return None
    return (outcome.host_id, outcome.model_id)


def seed_verdict(
    *, held: bool, latest_failed: bool, seeds: Iterable[Replica], fresh: Iterable[str]
) -> SeedVerdict:
    """The rule, pure over plain facts (the fanout limit is checked on its own).

    ``held``: some fresh host shows a verified copy; ``latest_failed``: the
    latest finished load of the artifact failed; ``seeds``: other loads of it
    pending or running (or succeeded, unconfirmed); ``fresh``: hosts
    heartbeating now.
    """
    if held:
        return SeedVerdict(wait=False)
    seeds = list(seeds)
    if latest_failed:
        return SeedVerdict(wait=False, fallback=SeedFallback.SEED_FAILED)
    if not seeds:
        return SeedVerdict(wait=False)  # this load is the seed
    alive = set(fresh)
    if not any(host in alive for host, _ in seeds):
        return SeedVerdict(wait=False, fallback=SeedFallback.SEED_HOST_UNAVAILABLE)
    return SeedVerdict(wait=True)


class Seeding:
    """The seeding gate for one tick: holders and outcomes indexed on first use."""

    def __init__(self, view: FleetView, history: Iterable[HistoryEntry]) -> None:
        self._view = view
        self._history = history
        self._seeds: SeedIndex | None = None  # a tick with no exact-artifact load never builds it
        self._holders: dict[str, frozenset[str]] | None = None
        self._fresh: frozenset[str] | None = None

    def _index(self) -> SeedIndex:
        if self._seeds is None:
            self._seeds = SeedIndex.of(self._history)
        return self._seeds

    def _held(self, sha: str) -> bool:
        if self._holders is None:
            self._holders = holder_index(self._view)
        return bool(self._holders.get(sha))

    def fresh(self) -> frozenset[str]:
        if self._fresh is None:
            self._fresh = frozenset(h for h in self._view.host_ids() if self._view.is_fresh(h))
        return self._fresh

    def verdict(self, sha: str, loading: Iterable[Replica]) -> SeedVerdict:
        """May one more replica start loading ``sha`` beside ``loading``?"""
        identity = artifact_identity(sha)
        if identity is None:
            return SeedVerdict(wait=False)
        seeds = set(loading)
        index = self._index()
        waiting = unconfirmed_seed(self._view, index, identity)
        if waiting is not None:
            seeds.add(waiting)
        outcome = index.latest.get(identity)
        return seed_verdict(
            held=self._held(sha),
            latest_failed=outcome is not None and outcome.failed,
            seeds=seeds,
            fresh=self.fresh(),
        )
