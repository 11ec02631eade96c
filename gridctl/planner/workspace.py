"""The state of one planning pass: inputs, indexes, ledgers and what was decided.

Built once from the frozen inputs, a ``Workspace`` holds every index the
filters and scorers need (the demand-independent ``FleetIndex``: host views,
static eligibility per model, reciprocal colocation exclusions, incumbents per
(model, host); and memoised static scores) and the mutable books: per-host
ledgers, assignments, staged preemptions, the eviction budget, shortfalls and
explanations. Static scores and rankings live in its ``StaticScores``
(``scores``), which it exposes as its own methods. It is private to one call
of ``plan_placement``: the plan's lazily built candidate rows read only the
fleet index and the static scores, never the workspace, so the books are freed
when the plan is returned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gridctl.domain import (
    Assignment,
    ControllerPolicy,
    DemandClass,
    FleetSnapshot,
    ModelDemand,
    ModelProfile,
    Preemption,
    SplitPlacement,
    UnsatisfiedCode,
)
from gridctl.planner.explaining import ExplanationBook
from gridctl.planner.fleet_index import SharedIndexes, fleet_index
from gridctl.planner.host_views import LiveResidency
from gridctl.planner.ledgers import HostLedger
from gridctl.planner.rejections import RejectionCode
from gridctl.planner.runtimes import runtime_for_new_placement
from gridctl.planner.scoring import ScarcityIndex
from gridctl.planner.static_scores import StaticScores
from gridctl.planner.targets import ReplicaTarget


@dataclass(slots=True)
class Shortfall:
    """Accumulated missing replicas of one model under one code."""

    missing: int
    message: str
    host_id: str | None = None


class Workspace:
    """Inputs, indexes and mutable books of one planning pass."""

    def __init__(
        self,
        profiles: Sequence[ModelProfile],
        snapshot: FleetSnapshot,
        policy: ControllerPolicy,
        shared: SharedIndexes | None = None,
    ) -> None:
        fleet = fleet_index(profiles, snapshot, policy, shared)
        self.policy = policy
        self.now = snapshot.now
        self.profiles = fleet.profiles
        self.model_ids = fleet.model_ids
        self.demand: dict[str, ModelDemand] = {d.model_id: d for d in snapshot.demand}
        self.views = fleet.views
        self.host_ids = fleet.host_ids
        self.host_position = fleet.host_position
        self.domain_of = fleet.domain_of
        self.new_capacity = fleet.new_capacity
        self.base_free = fleet.base_free
        self._max_models = fleet.max_models
        self.journal: set[str] = set()  # hosts whose ledger changed since the classes read them
        self.ledgers: dict[str, HostLedger] = {
            k: HostLedger(v, self.journal) for k, v in self.views.items()
        }
        self.explain = ExplanationBook()
        self.norms = fleet.norms
        self.exclusions = fleet.exclusions
        # models that limit how many models may share their host
        self.ceiling_models = frozenset(
            name for name, profile in self.profiles.items() if profile.max_colocated_models > 0
        )
        # models whose presence on a host changes what colocation says to another model
        self.constraining_models = self.ceiling_models | frozenset(
            name for name in self.profiles if name in self.exclusions
        )
        self.static = fleet.static
        self.eligible = fleet.static.eligible
        self.eligible_set = fleet.static.eligible_set
        self.static_codes = fleet.static.codes
        self.compatible_count = fleet.static.compatible
        self.dead: dict[str, dict[str, RejectionCode]] = {}
        self.incumbents = fleet.incumbents
        # hosts whose static score for a model depends on more than the host's score shape
        self._special = fleet.special
        self.cached_hosts = fleet.cached_hosts
        self.live_violations = fleet.live_violations
        self.targets: dict[str, ReplicaTarget] = {}
        self.scarcity: ScarcityIndex | None = None
        self.assignments: dict[str, dict[str, Assignment]] = {m: {} for m in self.model_ids}
        self.domains: dict[str, dict[str, int]] = {m: {} for m in self.model_ids}
        self.preemptions: dict[tuple[str, str], Preemption] = {}
        # replicas a staged preemption took back from a model already counted as placed
        # (an equal-priority victim): its rounds place or report them again
        self.displaced: dict[str, int] = {}
        self.releases = 0  # assignments removed so far in this plan
        # model -> ``releases`` when a search for a replacement host last found none
        self.no_replacement: dict[str, int] = {}
        self.best_steady: dict[str, float] = {}  # model -> its best steady-state static quality
        self.repack_searches = 0  # replacement searches spent on starting proactive repacks
        self.shortfalls: dict[tuple[str, UnsatisfiedCode], Shortfall] = {}
        self.splits: list[SplitPlacement] = []  # replicas across several hosts (``splits``)
        self._new_runtime = fleet.new_runtime
        self._footprint = fleet.footprint
        self.scores = scores = StaticScores(fleet, self.targets, policy)
        # the static scores' methods as the workspace's own (bound once: the searches call
        # them per host visited)
        self.static_score = scores.static_score
        self.static_scores = scores.static_scores
        self.static_sum = scores.static_sum
        self.score_group = scores.score_group
        self.score_id = scores.score_id
        self.ordered_hosts = scores.ordered_hosts
        self.searched = scores.searched
        self.mark_searched = scores.mark_searched
        self.alike_groups = fleet.alike_groups
        self._resident: dict[str, list[str]] | None = None
        self._occupied: frozenset[str] | None = None
        self.warm_back: dict[str, float] = {}  # model -> fastest learned restore path

    def build_scarcity(self) -> None:
        """Index which hosts constrained, enabled models need (after the targets are set)."""
        self.scarcity = self.scores.scarcity = ScarcityIndex(
            self.eligible_set,
            {m: t.replicas for m, t in self.targets.items()},
            self.static.class_of,
            self.static.class_reps,
            self._max_models,
            {m: p.max_replicas for m, p in self.profiles.items()},
        )

    # -- incumbents ----------------------------------------------------------
    def incumbent(self, model_id: str, host_id: str) -> LiveResidency | None:
        """A healthy live residency of exactly this profile's artifact and runtimes, if any."""
        return self.incumbents[model_id].get(host_id)

    def stale_resident(self, model_id: str, host_id: str) -> bool:
        """A same-named residency whose artifact digest is missing or different."""
        sha = self.profiles[model_id].artifact.sha256
        if sha is None:
            return False
        return any(
            row.residency.artifact_sha256 != sha
            for row in self.views[host_id].residencies_of(model_id)
        )

    # -- scores (``StaticScores``) and special hosts ------------------------
    def special_hosts(self, model_id: str) -> set[str]:
        """Hosts with an incumbent, cached weights, failures or learned facts of the model."""
        return self._special[model_id]

    def resident_hosts(self, model_id: str) -> list[str]:
        """Hosts with any residency of the model, serving or not."""
        if self._resident is None:
            self._resident = {m: [] for m in self.model_ids}
            for host_id, view in self.views.items():
                for resident in view.by_model:
                    if resident in self._resident:
                        self._resident[resident].append(host_id)
        return self._resident[model_id]

    def occupied_hosts(self) -> frozenset[str]:
        """Hosts with any live residency (work a repack could move)."""
        if self._occupied is None:
            self._occupied = frozenset(h for h, view in self.views.items() if view.live)
        return self._occupied

    def new_footprint(self, model_id: str, host_id: str) -> int | None:
        """The memory a new replica takes on the host, None where no runtime fits."""
        by_shape = self.footprints(model_id)
        shape = self.static.shape_of[host_id]
        if shape in by_shape:
            return by_shape[shape]
        choice = self.new_runtime(model_id, host_id)
        found = by_shape[shape] = None if choice is None else choice[1]
        return found

    def footprints(self, model_id: str) -> dict[int, int | None]:
        """``new_footprint``'s memo of the model: footprints by host shape so far."""
        found = self._footprint.get(model_id)
        if found is None:
            found = self._footprint[model_id] = {}
        return found

    def new_runtime(self, model_id: str, host_id: str) -> tuple[str, int] | None:
        """(runtime, footprint) of a new placement; a function of the host's shape."""
        by_shape = self._new_runtime.get(model_id)
        if by_shape is None:
            by_shape = self._new_runtime[model_id] = {}
        shape = self.static.shape_of[host_id]
        if shape in by_shape:
            return by_shape[shape]
        profile = self.profiles[model_id]
        found = by_shape[shape] = runtime_for_new_placement(profile, self.views[host_id].host)
        return found

    # -- books ---------------------------------------------------------------
    def record_assignment(self, assignment: Assignment) -> None:
        self.assignments[assignment.model_id][assignment.host_id] = assignment
        domain = self.domain_of[assignment.host_id]
        used = self.domains[assignment.model_id]
        used[domain] = used.get(domain, 0) + 1
        self.explain.choose(assignment.model_id, assignment.host_id)

    def remove_assignment(self, model_id: str, host_id: str) -> Assignment:
        self.releases += 1  # capacity may have come free: searches that failed may not now
        assignment = self.assignments[model_id].pop(host_id)
        domain = self.domain_of[host_id]
        used = self.domains[model_id]
        used[domain] -= 1
        if not used[domain]:
            del used[domain]
        self.explain.unchoose(model_id, host_id)
        return assignment

    def placed(self, model_id: str) -> int:
        return len(self.assignments[model_id])

    def required_domains(self, model_id: str) -> int:
        # min(least, replicas) as a conditional: a builtin min() call costs about 1,300
        # instructions on CPython 3.11, a conditional about 120 (measured)
        least = self.profiles[model_id].min_failure_domains
        replicas = self.targets[model_id].replicas
        return replicas if replicas < least else least

    def needs_new_domain(self, model_id: str) -> bool:
        # ``used < required_domains(model_id)``, inlined (every dynamic filter chain asks)
        used = len(self.domains[model_id])
        return used < self.profiles[model_id].min_failure_domains and (
            used < self.targets[model_id].replicas
        )

    def evictions_left(self) -> int:
        return self.policy.max_evictions_per_plan - len(self.preemptions)

    def add_shortfall(
        self,
        model_id: str,
        code: UnsatisfiedCode,
        message: str,
        host_id: str | None = None,
        missing: int = 1,
    ) -> None:
        key = (model_id, code)
        found = self.shortfalls.get(key)
        if found is None:
            self.shortfalls[key] = Shortfall(missing, message, host_id)
        else:
            found.missing += missing

    def demand_class_of(self, model_id: str, index: int) -> DemandClass:
        return self.targets[model_id].class_of(index)

    def priority(self, model_id: str) -> int:
        return self.profiles[model_id].priority
