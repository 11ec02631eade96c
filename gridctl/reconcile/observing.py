"""One tick's index over the observed fleet: which hosts can be trusted for what.

Built once per tick so the guards ask cheap questions ("is a ready replacement
of this model routable elsewhere?") instead of rescanning every host for every
residency. A host whose ``last_heartbeat`` is unknown is taken as observed at
the snapshot's own instant, which is what a saved snapshot means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    HostSnapshot,
    ModelProfile,
    Ownership,
    Residency,
    ResidencyState,
)
from gridctl.reconcile.records import ControllerMemory


def artifact_matches(residency_sha: str | None, wanted_sha: str | None) -> bool:
    """A residency satisfies a profile only with the exact declared digest."""
    return wanted_sha is None or residency_sha == wanted_sha


def artifact_identity(sha: str | None) -> str | None:
    """The fanout key: the exact artifact. Without a declared digest there is no
    autonomous fetch (it requires one), so no download stampede to limit."""
    return f"sha256:{sha}" if sha else None


@dataclass(frozen=True)
class ReadyReplica:
    host_id: str
    residency: Residency

    @property
    def trusted(self) -> bool:
        """Only authenticated managed inventory may justify draining a managed baseline."""
        return self.residency.ownership is Ownership.MANAGED


class FleetView:
    """Read-only questions about ``snapshot`` at ``now``."""

    def __init__(
        self,
        snapshot: FleetSnapshot,
        profiles: Mapping[str, ModelProfile],
        policy: ControllerPolicy,
        memory: ControllerMemory,
        now: float,
    ) -> None:
        self.snapshot = snapshot
        self.now = now
        self._policy = policy
        self._hosts: dict[str, HostSnapshot] = {h.host_id: h for h in snapshot.hosts}
        self._restarted_at = memory.grace.restarted_at if memory.grace else None
        self._sha: dict[str, str | None] = {m: p.artifact_sha256 for m, p in profiles.items()}
        for tombstone in memory.tombstones:
            self._sha.setdefault(tombstone.model_id, tombstone.artifact_sha256)
        self._ready: dict[str, list[ReadyReplica]] = {}
        self._loading: dict[str, set[tuple[str, str]]] = {}
        for host in snapshot.hosts:
            for r in host.residencies:
                if r.state is ResidencyState.LOADING and r.ownership is Ownership.MANAGED:
                    identity = artifact_identity(r.artifact_sha256 or self._sha.get(r.model_id))
                    if identity is not None:
                        self._loading.setdefault(identity, set()).add((host.host_id, r.model_id))
        for host in sorted(snapshot.hosts, key=lambda h: h.host_id):
            if not self.is_routable(host.host_id):
                continue
            for r in host.residencies:
                if r.state is ResidencyState.READY and artifact_matches(
                    r.artifact_sha256, self._sha.get(r.model_id)
                ):
                    self._ready.setdefault(r.model_id, []).append(ReadyReplica(host.host_id, r))

    # --- hosts -------------------------------------------------------------------------

    def host(self, host_id: str) -> HostSnapshot | None:
        return self._hosts.get(host_id)

    def host_ids(self) -> tuple[str, ...]:
        return tuple(sorted(self._hosts))

    def observed_at(self, host_id: str) -> float | None:
        host = self._hosts.get(host_id)
        if host is None:
            return None
        return host.last_heartbeat if host.last_heartbeat is not None else self.snapshot.now

    def is_fresh(self, host_id: str) -> bool:
        seen = self.observed_at(host_id)
        if seen is None:
            return False
        age = self.now - seen
        return (
            age <= self._policy.heartbeat_stale_seconds
            and -age <= self._policy.heartbeat_future_skew_seconds
        )

    def is_registered(self, host_id: str) -> bool:
        """Seen since the controller restarted (always true without a restart)."""
        seen = self.observed_at(host_id)
        if seen is None:
            return False
        return self._restarted_at is None or seen >= self._restarted_at

    def admits_new_work(self, host_id: str) -> bool:
        host = self._hosts.get(host_id)
        return host is not None and host.state.admits_new_work and self.is_fresh(host_id)

    def is_routable(self, host_id: str) -> bool:
        """Replacement evidence: fresh, admitting, and re-registered after a restart."""
        return self.admits_new_work(host_id) and self.is_registered(host_id)

    # --- residencies -------------------------------------------------------------------

    def wanted_sha(self, model_id: str) -> str | None:
        return self._sha.get(model_id)

    def residencies(self, host_id: str, model_id: str) -> tuple[Residency, ...]:
        host = self._hosts.get(host_id)
        if host is None:
            return ()
        return tuple(r for r in host.residencies if r.model_id == model_id)

    def is_cached(self, host_id: str, model_id: str) -> bool:
        host = self._hosts.get(host_id)
        if host is None:
            return False
        sha = self._sha.get(model_id)
        if any(
            c.model_id == model_id and artifact_matches(c.artifact_sha256, sha) for c in host.cached
        ):
            return True
        return any(
            r.state is ResidencyState.CACHED and artifact_matches(r.artifact_sha256, sha)
            for r in self.residencies(host_id, model_id)
        )

    def ready_replicas(self, model_id: str) -> tuple[ReadyReplica, ...]:
        """READY residencies of the exact revision on routable hosts, by host id."""
        return tuple(self._ready.get(model_id, ()))

    def running_loads(self, identity: str) -> frozenset[tuple[str, str]]:
        """(host, model) replicas observed running a managed load of this exact artifact.

        A load that reports no digest counts toward its model's declared artifact:
        an unproven load may still be joining the same download."""
        return frozenset(self._loading.get(identity, ()))
