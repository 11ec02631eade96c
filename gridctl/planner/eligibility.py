"""Static feasibility: can this host ever take this model in this plan?

Each filter is a small function of (profile, host view) returning ``None`` or
a named ``Rejection``. ``STATIC_FILTERS`` is the chain, in the order a reader
would ask the questions; ``static_rejection`` runs it. The result depends on
nothing the plan changes, so it is memoised per (model, host) by the caller.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from itertools import chain

from gridctl.domain import ModelProfile
from gridctl.planner.host_views import HostView
from gridctl.planner.rejections import Rejection, RejectionCode

StaticFilter = Callable[[ModelProfile, HostView], Rejection | None]
# shape rejections, codes, eligible hosts (tuple, set) and compatible count, pins aside
_Row = tuple[
    tuple[Rejection | None, ...], frozenset[RejectionCode], tuple[str, ...], frozenset[str], int
]
_NONE: frozenset[str] = frozenset()
_UNSEEN = Rejection(RejectionCode.RUNTIME, "not yet evaluated")  # a memo miss, by identity


def host_admission(profile: ModelProfile, view: HostView) -> Rejection | None:
    """Paused, draining, unhealthy, quarantined, stale or future hosts take nothing new."""
    return view.admission


def runtime(profile: ModelProfile, view: HostView) -> Rejection | None:
    if set(profile.runtimes).isdisjoint(view.host.resources.runtimes):
        return Rejection(RejectionCode.RUNTIME, f"needs one of {', '.join(profile.runtimes)}")
    return None


def runtime_qualified(profile: ModelProfile, view: HostView) -> Rejection | None:
    """A host that reports qualification offers only runtimes with passing evidence.

    A host that reports no ``qualified_runtimes`` claims nothing: every runtime
    it lists stays eligible, as before qualification existed.
    """
    qualified = view.host.resources.qualified_runtimes
    if qualified is None:
        return None
    offered = [r for r in profile.runtimes if r in view.host.resources.runtimes]
    if offered and not any(r in qualified for r in offered):
        return Rejection(
            RejectionCode.RUNTIME_NOT_QUALIFIED,
            f"no passing qualification for {', '.join(offered)} on this host",
        )
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
    if not profile.required_tags:
        return None
    missing = sorted(set(profile.required_tags) - set(view.host.resources.tags))
    if missing:
        return Rejection(RejectionCode.REQUIRED_TAG, f"missing tag {', '.join(missing)}")
    return None


def forbidden_tags(profile: ModelProfile, view: HostView) -> Rejection | None:
    if not profile.forbidden_tags:
        return None
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


PINNED_ELSEWHERE = Rejection(RejectionCode.NOT_PINNED, "model is pinned elsewhere")


def pins(profile: ModelProfile, view: HostView) -> Rejection | None:
    """A pinned model lives only on its pinned hosts, one replica on each."""
    if profile.pins and view.host_id not in profile.pins:
        return PINNED_ELSEWHERE
    return None


def gpu_count(profile: ModelProfile, view: HostView) -> Rejection | None:
    have = view.host.resources.gpu_count
    if profile.min_gpu_count > 0 and have is None:
        return Rejection(RejectionCode.GPU_COUNT, "GPU count unknown on this host")
    if profile.min_gpu_count > 0 and have is not None and have < profile.min_gpu_count:
        return Rejection(RejectionCode.GPU_COUNT, f"{have} GPUs < {profile.min_gpu_count}")
    return None


def gpu_memory(profile: ModelProfile, view: HostView) -> Rejection | None:
    have = view.host.resources.gpu_memory_mb
    if profile.min_gpu_memory_mb > 0 and have is None:
        return Rejection(RejectionCode.GPU_MEMORY, "GPU memory unknown on this host")
    if profile.min_gpu_memory_mb > 0 and have is not None and have < profile.min_gpu_memory_mb:
        return Rejection(
            RejectionCode.GPU_MEMORY, f"{have} MB per GPU < {profile.min_gpu_memory_mb}"
        )
    return None


# Filters that depend only on a host's shape (``HostView.shape``), never its id.
SHAPE_FILTERS: tuple[StaticFilter, ...] = (
    runtime,
    runtime_qualified,
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


def requirements(profile: ModelProfile, named: bool) -> tuple[object, ...]:
    """Everything ``SHAPE_FILTERS`` read of a profile (its name only when ``named``: some
    host shape has an allow or deny list)."""
    return (
        profile.runtimes,
        profile.backends,
        profile.data_tier,
        profile.required_tags,
        profile.forbidden_tags,
        profile.min_gpu_count,
        profile.min_gpu_memory_mb,
        profile.name if named else "",
    )


class EligibilityMemo:
    """Static filters evaluated once per (model, host shape), not per host.

    Fleets are built from a few kinds of machine, so a thousand hosts usually
    have a handful of shapes; only pins depend on the host id itself. Equal
    rejections are interned, so models rejected for the same reason share one
    value (and one explanation per host).
    """

    def __init__(self) -> None:
        self._shape: dict[tuple[str, object], Rejection | None] = {}
        self._interned: dict[Rejection, Rejection] = {}

    def shape_rejection(self, profile: ModelProfile, view: HostView) -> Rejection | None:
        # one lookup on a hit (a miss is told from a remembered None by the default):
        # each lookup hashes the whole shape tuple, about 1,500 instructions (measured)
        key = (profile.name, view.shape)
        found = self._shape.get(key, _UNSEEN)
        if found is _UNSEEN:
            found = _first(SHAPE_FILTERS, profile, view)
            if found is not None:
                found = self._interned.setdefault(found, found)
            self._shape[key] = found
        return found

    def static_rejection(self, profile: ModelProfile, view: HostView) -> Rejection | None:
        """The first static rejection, in ``STATIC_FILTERS`` order."""
        if view.admission is not None:
            return view.admission
        return self.shape_rejection(profile, view) or pins(profile, view)

    def compatible(self, profile: ModelProfile, view: HostView) -> bool:
        """Could the host take the model if its lifecycle allowed (future-compatible)?"""
        return self.shape_rejection(profile, view) is None and pins(profile, view) is None


class StaticEligibility:
    """Static eligibility of every (model, host) pair, computed per host shape.

    Hosts are grouped by ``HostView.shape``; a model's shape filters run once
    per shape, and its eligible hosts are the admitted hosts of the shapes it
    passes (narrowed to its pins, if any). Per model it keeps the eligible
    hosts in host id order, the static rejection codes seen, and how many hosts
    are compatible regardless of lifecycle. Admitted hosts that every model
    judges alike share a *class* (same shape, same pinned models eligible), so
    fleet-wide indexes such as scarcity are built per class, not per host.
    """

    def __init__(self, profiles: Mapping[str, ModelProfile], views: Mapping[str, HostView]) -> None:
        self.memo = EligibilityMemo()
        self.views = views
        self.profiles = profiles
        shapes: dict[tuple[object, ...], int] = {}
        shape_of: dict[str, int] = {}
        self.shape_of = shape_of
        reps: list[HostView] = []
        admitted: list[list[str]] = []
        admission_codes: set[RejectionCode] = set()
        # hosts whose views share one shape object (a fleet index builds them so) are
        # grouped by its identity first: hashing the shape's nested tuples costs about
        # 1,500 instructions a host, an identity lookup about 100 (measured; the views
        # hold the shapes, so an identity is not reused while this runs)
        by_identity: dict[int, int] = {}
        for host_id, view in views.items():
            facts = view.shape
            index = by_identity.get(id(facts))
            if index is None:
                index = shapes.get(facts)
                if index is None:
                    index = shapes[facts] = len(reps)
                    reps.append(view)
                    admitted.append([])
                by_identity[id(facts)] = index
            shape_of[host_id] = index
            if view.admission is None:
                admitted[index].append(host_id)
            else:
                admission_codes.add(view.admission.code)
        sizes = [0] * len(reps)  # hosts per shape
        for index in shape_of.values():
            sizes[index] += 1
        self.rejections: dict[str, tuple[Rejection | None, ...]] = {}
        self.eligible: dict[str, tuple[str, ...]] = {}
        self.eligible_set: dict[str, frozenset[str]] = {}
        self.codes: dict[str, frozenset[RejectionCode]] = {}
        self.compatible: dict[str, int] = {}
        # per set of passing shapes: its admitted hosts in id order, as a tuple and a set
        self._opened: dict[tuple[int, ...], tuple[tuple[str, ...], frozenset[str]]] = {}
        pinned_here: dict[str, set[str]] = {}
        # models that ask the same of a host share one row of shape rejections (the name
        # matters only where a shape has an allow or deny list)
        named = any(rep.shape[4] or rep.shape[5] for rep in reps)
        # (shape rejections, codes, admitted passing hosts as a tuple and a set, compatible
        # host count) per requirement set: unpinned models that ask alike share them
        rows: dict[tuple[object, ...], _Row] = {}
        by_model = (self.rejections, self.eligible, self.eligible_set, self.codes)
        rejections_of, eligible_of, eligible_set_of, codes_of = by_model
        compatible_of = self.compatible
        for model_id, profile in profiles.items():
            needs = requirements(profile, named)
            row = rows.get(needs)
            if row is None:
                row = rows[needs] = self._row(profile, reps, admitted, sizes, admission_codes)
            rejections, codes, open_hosts, open_set, compatible = row
            rejections_of[model_id] = rejections
            if profile.pins:
                pinned = set(profile.pins)
                eligible = tuple(h for h in open_hosts if h in pinned)
                if len(eligible) < len(open_hosts):
                    codes = codes | {RejectionCode.NOT_PINNED}
                compatible = sum(
                    1 for h in pinned if h in shape_of and rejections[shape_of[h]] is None
                )
                for host_id in eligible:
                    pinned_here.setdefault(host_id, set()).add(model_id)
                eligible_of[model_id] = eligible
                eligible_set_of[model_id] = frozenset(eligible)
            else:  # models passing the same shapes share one tuple and one set
                eligible_of[model_id] = open_hosts
                eligible_set_of[model_id] = open_set
            codes_of[model_id] = codes
            compatible_of[model_id] = compatible
        # classes: (shape, pinned models eligible there), numbered in host id order
        classes: dict[tuple[int, frozenset[str]], int] = {}
        unpinned: list[int | None] = [None] * len(reps)  # the class of (shape, no pins)
        class_of: dict[str, int] = {}
        class_reps: list[str] = []
        self.class_of = class_of
        self.class_reps = class_reps
        for host_id, view in views.items():
            if view.admission is not None:
                continue
            shape = shape_of[host_id]
            pinned_models = pinned_here.get(host_id) if pinned_here else None
            if pinned_models is None:
                found = unpinned[shape]
                if found is None:
                    found = unpinned[shape] = len(class_reps)
                    class_reps.append(host_id)
            else:
                key = (shape, frozenset(pinned_models))
                found = classes.get(key)
                if found is None:
                    found = classes[key] = len(class_reps)
                    class_reps.append(host_id)
            class_of[host_id] = found

    def _row(
        self,
        profile: ModelProfile,
        reps: list[HostView],
        admitted: list[list[str]],
        sizes: list[int],
        admission_codes: set[RejectionCode],
    ) -> _Row:
        """What every model asking what ``profile`` asks of a host shares (pins aside)."""
        rejections = tuple(self.memo.shape_rejection(profile, rep) for rep in reps)
        passing = tuple(i for i, found in enumerate(rejections) if found is None)
        codes = set(admission_codes)
        for index, found in enumerate(rejections):
            if found is not None and admitted[index]:
                codes.add(found.code)
        opening = self._opened.get(passing)
        if opening is None:
            merged = tuple(sorted(chain.from_iterable(admitted[i] for i in passing)))
            opening = self._opened[passing] = (merged, frozenset(merged))
        compatible = sum(sizes[i] for i in passing)
        return rejections, frozenset(codes), opening[0], opening[1], compatible

    def rejection(self, model_id: str, host_id: str) -> Rejection | None:
        """The first static rejection of one pair, in ``STATIC_FILTERS`` order."""
        view = self.views[host_id]
        if view.admission is not None:
            return view.admission
        found = self.rejections[model_id][self.shape_of[host_id]]
        if found is not None:
            return found
        return pins(self.profiles[model_id], view)


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
