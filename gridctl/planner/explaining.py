"""Where every rejection and score lands, so "why not on this host?" is free.

Filters and scorers report into an ``ExplanationBook`` as they run; the book
keeps the latest word per (model, host) in compact form and only builds the
frozen ``CandidateExplanation`` values once, at the end of the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from gridctl.domain import CandidateExplanation, ModelExplanation, ScoreComponent
from gridctl.planner.rejections import Rejection
from gridctl.planner.scoring import Components, total
from gridctl.planner.targets import ReplicaTarget

# A rejection, or (components, score).
Entry = Rejection | tuple[Components, float]


class ExplanationBook:
    """The latest explanation per (model, host), plus which hosts were chosen."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Entry]] = {}
        self._chosen: set[tuple[str, str]] = set()
        self._notes: dict[tuple[str, str], str] = {}

    def reject(self, model_id: str, host_id: str, rejection: Rejection) -> None:
        self._entries.setdefault(model_id, {})[host_id] = rejection

    def score(self, model_id: str, host_id: str, components: Components, score: float) -> None:
        self._entries.setdefault(model_id, {})[host_id] = (components, score)

    def choose(self, model_id: str, host_id: str, note: str = "") -> None:
        self._chosen.add((model_id, host_id))
        if note:
            self._notes[(model_id, host_id)] = note

    def unchoose(self, model_id: str, host_id: str) -> None:
        self._chosen.discard((model_id, host_id))

    def has(self, model_id: str, host_id: str) -> bool:
        return host_id in self._entries.get(model_id, {})

    def build(
        self,
        targets: Mapping[str, ReplicaTarget],
        hosts: tuple[str, ...],
        unscored: Callable[[str, str], Components | None],
    ) -> tuple[ModelExplanation, ...]:
        """Freeze the book; ``unscored`` supplies static components for hosts never evaluated.

        It returns None when the model never searched for a host (its incumbents
        already met the target); such hosts are listed as eligible, unscored.
        """
        interned: dict[tuple[str, float], ScoreComponent] = {}
        frozen_parts: dict[Components, tuple[ScoreComponent, ...]] = {}
        shared: dict[tuple[object, ...], CandidateExplanation] = {}

        def components(parts: Components) -> tuple[ScoreComponent, ...]:
            found = frozen_parts.get(parts)
            if found is None:
                built = []
                for part in parts:
                    component = interned.get(part)
                    if component is None:
                        component = interned[part] = ScoreComponent(part[0], part[1])
                    built.append(component)
                found = frozen_parts[parts] = tuple(built)
            return found

        def candidate(host_id: str, entry: Entry, chosen: bool, note: str) -> CandidateExplanation:
            # identical explanations of one host (across models) share one value
            key = (host_id, entry, chosen, note)
            found = shared.get(key)
            if found is not None:
                return found
            if isinstance(entry, Rejection):
                found = CandidateExplanation(
                    host_id=host_id,
                    rejection=entry.code.value,
                    detail=f"{entry.detail} [{note}]" if note else entry.detail,
                    chosen=chosen,
                )
            else:
                parts, score = entry
                found = CandidateExplanation(
                    host_id=host_id,
                    detail=note,
                    score=score if parts else None,
                    components=components(parts),
                    chosen=chosen,
                )
            shared[key] = found
            return found

        explanations: list[ModelExplanation] = []
        for model_id in sorted(targets):
            target = targets[model_id]
            entries = self._entries.get(model_id, {})
            candidates: list[CandidateExplanation] = []
            for host_id in hosts:
                entry = entries.get(host_id)
                chosen = (model_id, host_id) in self._chosen
                note = self._notes.get((model_id, host_id), "")
                if entry is None:
                    parts = unscored(model_id, host_id)
                    if parts is None:
                        entry = ((), 0.0)
                        note = note or "eligible; not scored: incumbents already meet the target"
                    else:
                        entry = (parts, total(parts))
                        note = note or "not evaluated: a better host was found first"
                candidates.append(candidate(host_id, entry, chosen, note))
            explanations.append(
                ModelExplanation(
                    model_id=model_id,
                    target_replicas=target.replicas,
                    target_reason=target.reason,
                    demand_class=target.first_class,
                    candidates=tuple(candidates),
                )
            )
        return tuple(explanations)
