"""Closed vocabularies shared by every layer: modes, host and residency states."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    """How far the controller may act on a plan."""

    OBSERVE = "observe"  # plan and forecast; drift recorded as deferred
    RECOMMEND = "recommend"  # actions proposed, none executable
    AUTOMATIC = "automatic"  # executable within the safety governors


class HostState(StrEnum):
    """The six lifecycle states of the local host-protection loop."""

    ACCEPTING = "accepting"
    THROTTLED = "throttled"
    DRAINING = "draining"
    PAUSED = "paused"
    UNHEALTHY = "unhealthy"
    QUARANTINED = "quarantined"

    @property
    def admits_new_work(self) -> bool:
        # module names, not ``HostState.ACCEPTING``: each class attribute read of a member
        # goes through ``EnumType.__getattr__`` (read for every proxied request)
        return self is _ACCEPTING or self is _THROTTLED


class ResidencyState(StrEnum):
    """Lifecycle of one model on one host: LOAD -> WARM -> READY -> DRAIN -> UNLOAD."""

    CACHED = "cached"  # weights on disk, no process, no memory
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"
    DRAINING = "draining"
    UNLOADING = "unloading"
    FAILED = "failed"

    @property
    def occupies_memory(self) -> bool:
        return self is not _CACHED

    @property
    def in_progress(self) -> bool:
        return self is _LOADING or self is _WARMING


# members by module name, for the properties above (enum members are singletons)
_ACCEPTING, _THROTTLED = HostState.ACCEPTING, HostState.THROTTLED
_CACHED, _LOADING, _WARMING = ResidencyState.CACHED, ResidencyState.LOADING, ResidencyState.WARMING


class Ownership(StrEnum):
    """Who holds lifecycle authority over a residency."""

    MANAGED = "managed"  # started or identity-proven by gridctl
    MANUAL = "manual"  # operator-run on a managed host; never actuated
    EXTERNAL = "external"  # registered inventory (e.g. `gridctl join`); never actuated


class DataTier(StrEnum):
    """Data classification a model may handle and a host may be trusted with."""

    PUBLIC = "public"
    INTERNAL = "internal"
    CONFIDENTIAL = "confidential"
    RESTRICTED = "restricted"
