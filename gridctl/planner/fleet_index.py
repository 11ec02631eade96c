"""The indexes of one plan that depend only on profiles, hosts, the instant and policy.

Host views, static eligibility, fleet norms, incumbents and the hosts special
to each model are a function of the frozen inputs other than demand. A plan
builds them once; a search that plans the same profiles, hosts, instant and
policy many times with different demand (the portfolio search) shares one
``FleetIndex`` between its plans through ``SharedIndexes``. Nothing here
changes after it is built, except memos of pure functions of these inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelProfile
from gridctl.planner.eligibility import StaticEligibility
from gridctl.planner.host_views import SATISFYING_STATES, HostView, LiveResidency, build_host_view
from gridctl.planner.runtimes import residency_runtime_matches
from gridctl.planner.scoring import Components, FleetNorms

# (static parts, their rounded total), and their unrounded sum
StaticScore = tuple[tuple[Components, float], float]


class FleetIndex:
    """Demand-independent indexes of one (profiles, hosts, now, policy)."""

    def __init__(
        self, profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, policy: ControllerPolicy
    ) -> None:
        now = snapshot.now
        self.profiles: dict[str, ModelProfile] = {
            p.name: p for p in sorted(profiles, key=attrgetter("name"))
        }
        by_name = self.profiles
        self.model_ids: tuple[str, ...] = tuple(by_name)
        shapes: dict[tuple[object, ...], tuple[object, ...]] = {}  # equal host shapes, shared
        self.views: dict[str, HostView] = {}
        # what the pruning of a search reads of each host, without a view per visit
        self.domain_of: dict[str, str] = {}
        self.new_capacity: dict[str, int] = {}
        self.base_free: dict[str, int] = {}  # incremental free memory before any plan's work
        self.max_models: dict[str, int] = {}  # per-host model limits (0: none)
        self.score_id: dict[str, int] = {}
        score_ids: dict[tuple[object, ...], int] = {}
        occupied: list[HostView] = []  # hosts with anything on them, in host id order
        # what the fleet norms read: the first host of each score shape, and every host
        # with learned facts (``occupied``), in host id order
        norm_views: list[HostView] = []
        # one pass over the hosts builds every per-host index (measured: a pass of its
        # own per index costs about 1,000 instructions more per host)
        views, domain_of, new_capacity, base_free = (
            self.views,
            self.domain_of,
            self.new_capacity,
            self.base_free,
        )
        score_id, max_models = self.score_id, self.max_models
        for host in sorted(snapshot.hosts, key=attrgetter("host_id")):
            view = build_host_view(host, by_name, now, policy, shapes)
            host_id = host.host_id
            views[host_id] = view
            resources = host.resources
            domain_of[host_id] = resources.failure_domain
            max_models[host_id] = resources.max_models
            capacity = new_capacity[host_id] = view.new_capacity_mb
            base_free[host_id] = capacity - view.unmanaged_mb - view.live_managed_mb
            found = score_ids.get(view.score_shape)
            if found is None:
                found = score_ids[view.score_shape] = len(score_ids)
                norm_views.append(view)
            elif view.learned:
                norm_views.append(view)
            score_id[host_id] = found
            if view.live or view.cached_digests or view.failures or view.learned:
                occupied.append(view)
        self.host_ids: tuple[str, ...] = tuple(views)
        self.host_position: dict[str, int] = dict(
            zip(self.host_ids, range(len(self.host_ids)), strict=True)
        )
        # the norms of every view, from fewer: a score shape holds the speed priors the
        # norms take maxima of, and the first host of a shape is the first of its values
        # in host order (so ties resolve as over all hosts); learned speeds are kept too
        # (measured: about 0.15 M instructions fewer per cold 64x32 plan)
        self.norms = FleetNorms.of(norm_views)
        self.exclusions = _reciprocal_exclusions(by_name)
        self.static = StaticEligibility(by_name, views)
        self.incumbents: dict[str, dict[str, LiveResidency]] = {m: {} for m in self.model_ids}
        # hosts whose static score for a model depends on more than the host's score shape
        self.special: dict[str, set[str]] = {m: set() for m in self.model_ids}
        self.cached_hosts: dict[str, list[str]] = {m: [] for m in self.model_ids}
        self.live_violations: dict[str, str] = {}
        for view in occupied:
            host_id = view.host.host_id
            if view.live_models:
                breach = _colocation_breach(view.live_models, by_name, self.exclusions)
                if breach:
                    self.live_violations[host_id] = breach
            for model_id in view.cached_digests:
                if model_id in by_name:
                    self.cached_hosts[model_id].append(host_id)
                    self.special[model_id].add(host_id)
            for model_id in view.failures:
                if model_id in by_name:
                    self.special[model_id].add(host_id)
            for model_id in view.learned:
                if model_id in by_name:  # learned timings or speed of this model
                    self.special[model_id].add(host_id)
            if view.admission is not None:
                continue  # the host fence excludes it from placement evidence
            for model_id in view.by_model:
                profile = by_name.get(model_id)
                if profile is None:
                    continue
                row = _best_incumbent(profile, view)
                if row is not None:
                    self.incumbents[model_id][host_id] = row
                    self.special[model_id].add(host_id)
        # admitted hosts alike for static scoring and eligibility of any unpinned model
        # with no incumbent, cache, failure or learned fact there: (score shape, static
        # class) groups, each in host id order
        groups: dict[tuple[int, int], list[str]] = {}
        for host_id, static_class in self.static.class_of.items():
            key = (score_id[host_id], static_class)
            members = groups.get(key)
            if members is None:
                groups[key] = [host_id]
            else:
                members.append(host_id)
        self.alike_groups: tuple[list[str], ...] = tuple(groups.values())
        # memos of pure functions of (model, host shape)
        self.new_runtime: dict[str, dict[int, tuple[str, int] | None]] = {}  # by shape
        self.footprint: dict[str, dict[int, int | None]] = {}  # model -> shape -> MB
        # static score parts by everything they read (``Workspace._static_score``'s key:
        # the model's score signature, the host's score shape, the pair's own facts and the
        # scarcity need), so plans of other demand reuse them
        self.static_by_shape: dict[tuple[object, ...], StaticScore] = {}


class SharedIndexes:
    """The ``FleetIndex`` of the last (profiles, hosts, now, policy) planned, kept for the
    next plan of the same inputs. Inputs are matched by identity (and kept alive here),
    which is exact for frozen inputs."""

    def __init__(self) -> None:
        self._key: tuple[object, ...] | None = None
        self._index: FleetIndex | None = None

    def index(
        self, profiles: Sequence[ModelProfile], snapshot: FleetSnapshot, policy: ControllerPolicy
    ) -> FleetIndex:
        key = (profiles, snapshot.hosts, snapshot.now, policy)
        if self._index is not None and self._key is not None and _same(self._key, key):
            return self._index
        if not isinstance(profiles, tuple):
            return FleetIndex(profiles, snapshot, policy)  # may change between plans
        self._key = key
        self._index = FleetIndex(profiles, snapshot, policy)
        return self._index


def _same(held: tuple[object, ...], key: tuple[object, ...]) -> bool:
    return all(a is b for a, b in zip(held[:2], key[:2], strict=True)) and held[2:] == key[2:]


def fleet_index(
    profiles: Sequence[ModelProfile],
    snapshot: FleetSnapshot,
    policy: ControllerPolicy,
    shared: SharedIndexes | None = None,
) -> FleetIndex:
    """The plan's fleet index: built, or the shared one of the same inputs."""
    if shared is None:
        return FleetIndex(profiles, snapshot, policy)
    return shared.index(profiles, snapshot, policy)


def _best_incumbent(profile: ModelProfile, view: HostView) -> LiveResidency | None:
    """The best satisfying residency of exactly this profile's artifact and runtimes."""
    best: LiveResidency | None = None
    sha = profile.artifact.sha256
    for row in view.residencies_of(profile.name):
        r = row.residency
        if r.state not in SATISFYING_STATES or not residency_runtime_matches(profile, r, view.host):
            continue
        if sha is not None and r.artifact_sha256 != sha:
            continue
        if best is None or _state_rank(row) < _state_rank(best):
            best = row
    return best


def _state_rank(row: LiveResidency) -> tuple[int, int]:
    order = {"ready": 0, "warming": 1, "loading": 2}
    return (order.get(row.residency.state.value, 3), row.memory_mb)


def _reciprocal_exclusions(profiles: dict[str, ModelProfile]) -> dict[str, frozenset[str]]:
    """Exclusions declared by either side apply to both."""
    pairs: dict[str, set[str]] = {}
    for name, profile in profiles.items():
        for other in profile.colocation_excludes:
            if other == name:
                continue
            pairs.setdefault(name, set()).add(other)
            pairs.setdefault(other, set()).add(name)
    return {k: frozenset(v) for k, v in pairs.items()}


def _colocation_breach(
    members: frozenset[str],
    profiles: dict[str, ModelProfile],
    exclusions: dict[str, frozenset[str]],
) -> str:
    """A colocation rule the live models on one host already break, or ""."""
    for name in sorted(members):
        clash = sorted(exclusions.get(name, frozenset()) & members)
        if clash:
            return f"{name} and {clash[0]} are live together"
        profile = profiles.get(name)
        if profile is not None and 0 < profile.max_colocated_models < len(members):
            return f"{len(members)} live models exceed {name}'s ceiling"
    return ""
