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
        unscored: Callable[[str, str], Components],
    ) -> tuple[ModelExplanation, ...]:
        """Freeze the book; ``unscored`` supplies components for hosts never evaluated."""
        interned: dict[tuple[str, float], ScoreComponent] = {}

        def component(part: tuple[str, float]) -> ScoreComponent:
            found = interned.get(part)
            if found is None:
                found = interned[part] = ScoreComponent(part[0], part[1])
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
                if isinstance(entry, Rejection):
                    candidates.append(
                        CandidateExplanation(
                            host_id=host_id,
                            rejection=entry.code.value,
                            detail=f"{entry.detail} [{note}]" if note else entry.detail,
                            chosen=chosen,
                        )
                    )
                    continue
                if entry is None:
                    parts = unscored(model_id, host_id)
                    entry = (parts, total(parts))
                    note = note or "not evaluated: a better host was found first"
                parts, score = entry
                candidates.append(
                    CandidateExplanation(
                        host_id=host_id,
                        detail=note,
                        score=score,
                        components=tuple(component(p) for p in parts),
                        chosen=chosen,
                    )
                )
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
