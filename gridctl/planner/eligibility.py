"""Static feasibility: can this host ever take this model in this plan?

Each filter is a small function of (profile, host view) returning ``None`` or
a named ``Rejection``. ``STATIC_FILTERS`` is the chain, in the order a reader
would ask the questions; ``static_rejection`` runs it. The result depends on
nothing the plan changes, so it is memoised per (model, host) by the caller.
"""

from __future__ import annotations

from collections.abc import Callable

from gridctl.domain import ModelProfile
from gridctl.planner.host_views import HostView
from gridctl.planner.rejections import Rejection, RejectionCode

StaticFilter = Callable[[ModelProfile, HostView], Rejection | None]


def host_admission(profile: ModelProfile, view: HostView) -> Rejection | None:
    """Paused, draining, unhealthy, quarantined, stale or future hosts take nothing new."""
    return view.admission


def runtime(profile: ModelProfile, view: HostView) -> Rejection | None:
    if set(profile.runtimes).isdisjoint(view.host.resources.runtimes):
        return Rejection(RejectionCode.RUNTIME, f"needs one of {', '.join(profile.runtimes)}")
    return None


def backend(profile: ModelProfile, view: HostView) -> Rejection | None:
    if profile.backends and set(profile.backends).isdisjoint(view.host.resources.backends):
        return Rejection(RejectionCode.BACKEND, f"needs one of {', '.join(profile.backends)}")
    return None


def data_tier(profile: ModelProfile, view: HostView) -> Rejection | None:
    if profile.data_tier not in view.host.resources.allowed_data_tiers:
        return Rejection(RejectionCode.DATA_TIER, f"host not trusted with {profile.data_tier}")
    return None


def required_tags(profile: ModelProfile, view: HostView) -> Rejection | None:
    missing = sorted(set(profile.required_tags) - set(view.host.resources.tags))
    if missing:
        return Rejection(RejectionCode.REQUIRED_TAG, f"missing tag {', '.join(missing)}")
    return None


def forbidden_tags(profile: ModelProfile, view: HostView) -> Rejection | None:
    present = sorted(set(profile.forbidden_tags) & set(view.host.resources.tags))
    if present:
        return Rejection(RejectionCode.FORBIDDEN_TAG, f"forbidden tag {', '.join(present)}")
    return None


def allow_list(profile: ModelProfile, view: HostView) -> Rejection | None:
    allowed = view.host.resources.allowed_models
    if allowed and profile.name not in allowed:
        return Rejection(RejectionCode.NOT_ALLOWED, "not on the host's allow list")
    return None


def deny_list(profile: ModelProfile, view: HostView) -> Rejection | None:
    if profile.name in view.host.resources.denied_models:
        return Rejection(RejectionCode.DENIED, "on the host's deny list")
    return None


def pins(profile: ModelProfile, view: HostView) -> Rejection | None:
    """A pinned model lives only on its pinned hosts, one replica on each."""
    if profile.pins and view.host_id not in profile.pins:
        return Rejection(RejectionCode.NOT_PINNED, "model is pinned elsewhere")
    return None


def gpu_count(profile: ModelProfile, view: HostView) -> Rejection | None:
    have = view.host.resources.gpu_count
    if profile.min_gpu_count > 0 and have < profile.min_gpu_count:
        return Rejection(RejectionCode.GPU_COUNT, f"{have} GPUs < {profile.min_gpu_count}")
    return None


def gpu_memory(profile: ModelProfile, view: HostView) -> Rejection | None:
    have = view.host.resources.gpu_memory_mb
    if profile.min_gpu_memory_mb > 0 and have < profile.min_gpu_memory_mb:
        return Rejection(
            RejectionCode.GPU_MEMORY, f"{have} MB per GPU < {profile.min_gpu_memory_mb}"
        )
    return None


# Filters that depend only on a host's shape (``HostView.shape``), never its id.
SHAPE_FILTERS: tuple[StaticFilter, ...] = (
    runtime,
    backend,
    data_tier,
    required_tags,
    forbidden_tags,
    allow_list,
    deny_list,
    gpu_count,
    gpu_memory,
)
STATIC_FILTERS: tuple[StaticFilter, ...] = (host_admission, *SHAPE_FILTERS, pins)


class EligibilityMemo:
    """Static filters evaluated once per (model, host shape), not per host.

    Fleets are built from a few kinds of machine, so a thousand hosts usually
    have a handful of shapes; only pins depend on the host id itself.
    """

    def __init__(self) -> None:
        self._shape: dict[tuple[str, object], Rejection | None] = {}

    def shape_rejection(self, profile: ModelProfile, view: HostView) -> Rejection | None:
        key = (profile.name, view.shape)
        if key not in self._shape:
            self._shape[key] = _first(SHAPE_FILTERS, profile, view)
        return self._shape[key]

    def static_rejection(self, profile: ModelProfile, view: HostView) -> Rejection | None:
        """The first static rejection, in ``STATIC_FILTERS`` order."""
        if view.admission is not None:
            return view.admission
        return self.shape_rejection(profile, view) or pins(profile, view)

    def compatible(self, profile: ModelProfile, view: HostView) -> bool:
        """Could the host take the model if its lifecycle allowed (future-compatible)?"""
        return self.shape_rejection(profile, view) is None and pins(profile, view) is None


def _first(
    chain: tuple[StaticFilter, ...], profile: ModelProfile, view: HostView
) -> Rejection | None:
    for check in chain:
        rejection = check(profile, view)
        if rejection is not None:
            return rejection
    return None


def static_rejection(profile: ModelProfile, view: HostView) -> Rejection | None:
    return _first(STATIC_FILTERS, profile, view)
