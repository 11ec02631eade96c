"""The static half of placement scoring for one plan: scores that no booking changes.

A (model, host) pair's static score parts (``scoring.static_components``) depend
on the fleet index, the model's target and the scarcity index, never on what the
plan books, so they are memoised here per model and shared between hosts of one
score shape. ``ordered_hosts`` ranks a model's eligible hosts by them, as every
search visits hosts. This is also what the plan's explanation rows read after the
plan is made (``explaining.StaticRows``): kept apart from the ``Workspace`` and
its ledgers, the returned plan keeps only this alive, not the plan's books.
"""

from __future__ import annotations

from gridctl.domain import ControllerPolicy
from gridctl.planner.fleet_index import FleetIndex, StaticScore
from gridctl.planner.host_views import LiveResidency
from gridctl.planner.scoring import Components, ScarcityIndex, round6, static_components
from gridctl.planner.targets import ReplicaTarget


class StaticScores:
    """Memoised static scores and static rankings of one plan's models."""

    def __init__(
        self, fleet: FleetIndex, targets: dict[str, ReplicaTarget], policy: ControllerPolicy
    ) -> None:
        self.profiles = fleet.profiles
        self.views = fleet.views
        self.eligible = fleet.static.eligible
        self.eligible_set = fleet.static.eligible_set
        self.incumbents = fleet.incumbents
        self.norms = fleet.norms
        self.policy = policy
        self.targets = targets  # the plan's targets, filled before anything is scored
        self.scarcity: ScarcityIndex | None = None
        self.alike_groups = fleet.alike_groups
        # hosts whose static score for a model depends on more than the host's score shape
        self.special = fleet.special
        self._score_id = fleet.score_id
        self._static: dict[str, dict[str, StaticScore]] = {m: {} for m in fleet.model_ids}
        self._static_by_shape = fleet.static_by_shape
        self._score_signature: dict[str, tuple[float, float, float]] = {}
        self._ordered: dict[str, tuple[str, ...]] = {}
        self._searched: set[str] = set()

    def static_score(self, model_id: str, host_id: str) -> tuple[Components, float]:
        """Named static score parts of one pair and their rounded total."""
        memo = self._static[model_id]
        found = memo.get(host_id)
        if found is None:
            found = memo[host_id] = self._static_score(model_id, host_id)
        return found[0]

    def static_scores(self, model_id: str) -> dict[str, StaticScore]:
        """The memo of the model's static scores so far, by host (filled by ``ordered_hosts``
        for every eligible host; ``static_score`` fills any other)."""
        return self._static[model_id]

    def static_sum(self, model_id: str, host_id: str) -> float:
        """The unrounded sum of the static parts, so that adding the dynamic parts to it
        reproduces ``total(static + dynamic)`` exactly."""
        memo = self._static[model_id]
        found = memo.get(host_id)
        if found is None:
            found = memo[host_id] = self._static_score(model_id, host_id)
        return found[1]

    def _static_score(self, model_id: str, host_id: str) -> StaticScore:
        profile = self.profiles[model_id]
        view = self.views[host_id]
        need = 0.0
        if self.scarcity is not None:
            need = self.scarcity.need(host_id, len(self.eligible[model_id]))
        signature = self._score_signature.get(model_id)  # (``_signature_of``'s memo)
        if signature is None:
            signature = self._signature_of(model_id)
        incumbent: LiveResidency | None = None
        if host_id in self.special[model_id]:
            incumbent = self.incumbents[model_id].get(host_id)
            shape: tuple[object, ...] = (
                signature,
                self._score_id[host_id],
                None if incumbent is None else incumbent.residency.state,
                view.has_exact_artifact(profile),
                view.failures.get(model_id, 0),
                need,
                view.learned.get(model_id),
                self.norms.model_norm(model_id) if model_id in view.learned else 0.0,
                model_id if model_id in view.learned else "",
            )
        else:
            shape = (signature, self._score_id[host_id], None, False, 0, need, None, 0.0, "")
        found = self._static_by_shape.get(shape)
        if found is None:
            parts = static_components(
                profile,
                view,
                incumbent,
                self.norms,
                self.targets[model_id].performance_factor,
                need,
                self.policy,
            )
            raw: float = 0  # ``sum`` of the parts, in their order, without a generator
            for _, value in parts:
                raw += value
            found = self._static_by_shape[shape] = ((parts, round6(raw)), raw)  # ``total``
        return found

    def _signature_of(self, model_id: str) -> tuple[float, float, float]:
        """What static scoring reads of the profile: models alike in it share scores."""
        signature = self._score_signature.get(model_id)
        if signature is None:
            profile = self.profiles[model_id]
            signature = self._score_signature[model_id] = (
                self.targets[model_id].performance_factor,
                profile.warm_seconds,
                profile.load_seconds,
            )
        return signature

    def score_group(self, model_id: str) -> tuple[object, ...]:
        """Everything ``_static_score`` reads of the model for a host not special to it (its
        signature and, for the scarcity need, its eligible-host count): models of one group
        score alike on every such host of one score shape and static class."""
        return (self._signature_of(model_id), len(self.eligible[model_id]))

    def score_id(self, host_id: str) -> int:
        """Which score shape the host has: hosts with equal ids score alike."""
        return self._score_id[host_id]

    def ordered_hosts(self, model_id: str) -> tuple[str, ...]:
        """Eligible hosts of a model, best static score first, then host id."""
        found = self._ordered.get(model_id)
        if found is None:
            if self.profiles[model_id].pins:
                found = self._ordered_pinned(model_id)
            else:
                found = self._ordered_by_alike(model_id)
            self._ordered[model_id] = found
        return found

    def _ordered_by_alike(self, model_id: str) -> tuple[str, ...]:
        """``ordered_hosts`` of an unpinned model: every member of one group of alike hosts
        (one score shape, one static class, so equally eligible) not special to the model
        shares one static score, computed once; special hosts are scored one by one."""
        memo = self._static[model_id]
        special = self.special[model_id]
        eligible = self.eligible_set[model_id]
        by_score: dict[float, list[str]] = {}
        merged: set[float] = set()  # scores shared by several groups: their hosts need a sort
        for members in self.alike_groups:
            if members[0] not in eligible:
                continue
            plain = [h for h in members if h not in special] if special else members
            if not plain:
                continue
            value = memo.get(plain[0]) or self._static_score(model_id, plain[0])
            memo.update(dict.fromkeys(plain, value))
            _add_ranked(by_score, merged, value[0][1], plain)
        for host_id in sorted(special & eligible):
            value = memo.get(host_id) or self._static_score(model_id, host_id)
            memo[host_id] = value
            _add_ranked(by_score, merged, value[0][1], [host_id])
        ranked: list[str] = []
        for score in sorted(by_score, reverse=True):
            hosts = by_score[score]
            if score in merged:
                hosts.sort()
            ranked.extend(hosts)
        return tuple(ranked)

    def _ordered_pinned(self, model_id: str) -> tuple[str, ...]:
        """``ordered_hosts`` host by host: a pinned model's few eligible hosts."""
        memo = self._static[model_id]
        for host_id in self.eligible[model_id]:
            if host_id not in memo:
                memo[host_id] = self._static_score(model_id, host_id)
        # eligible hosts are in host id order and the sort is stable
        return tuple(sorted(self.eligible[model_id], key=lambda h: -memo[h][0][1]))

    def searched(self, model_id: str) -> bool:
        """Whether the model ever ranked its eligible hosts (searched for a new replica)."""
        return model_id in self._ordered or model_id in self._searched

    def mark_searched(self, model_id: str) -> None:
        """Note a search for a new replica that ranked hosts without ``ordered_hosts``."""
        self._searched.add(model_id)


def _add_ranked(
    by_score: dict[float, list[str]], merged: set[float], score: float, hosts: list[str]
) -> None:
    """File hosts under their static score (a dict of lists, for ``ordered_hosts``)."""
    found = by_score.get(score)
    if found is None:
        by_score[score] = list(hosts)
    else:
        found.extend(hosts)
        merged.add(score)
