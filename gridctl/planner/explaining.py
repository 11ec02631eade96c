"""Where every rejection and score lands, so "why not on this host?" is free.

Filters and scorers report into an ``ExplanationBook`` as they run; the book
keeps the latest word per (model, host) in compact form and only builds the
frozen ``CandidateExplanation`` values once, at the end of the plan.

Most of a large plan's (model, host) pairs are never touched by a search: they
are statically rejected, or eligible but not evaluated. Those are not booked
one by one; ``StaticRows`` derives them at the end from the host shapes (one
static rejection per model and shape, one static score per model and host
class) and shares equal explanations of one host between models, so a plan of
1,000 hosts and 200 models does not build 200,000 values. A model's rows are
built only when read (``--explain``, status, the dashboard): a plan that is
only reconciled never builds them. A model's summary (``row_summaries``: hosts
grouped by rejection code and detail) is folded from the same indexes without
building its rows, so a plan document costs per group, not per host.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import partial

from gridctl.domain import (
    CandidateExplanation,
    CandidateRows,
    DemandClass,
    ModelExplanation,
    ScoreComponent,
)
from gridctl.domain.row_summaries import GroupKey, RowSummary, summary_from_counts
from gridctl.planner.eligibility import StaticEligibility
from gridctl.planner.rejections import Rejection
from gridctl.planner.scoring import Components
from gridctl.planner.static_scores import StaticScores
from gridctl.planner.targets import ReplicaTarget

# A rejection, or (components, score).
Entry = Rejection | tuple[Components, float]

UNSCORED: Entry = ((), 0.0)
NOT_SEARCHED = "eligible; not scored: incumbents already meet the target"
NOT_EVALUATED = "not evaluated: a better host was found first"


class Candidates:
    """Frozen candidate explanations; statically explained pairs of one host share one value
    across models, and score parts are interned."""

    def __init__(self) -> None:
        self._interned: dict[tuple[str, float], ScoreComponent] = {}
        self._frozen_parts: dict[Components, tuple[ScoreComponent, ...]] = {}
        # keyed by the identity of a long-lived entry; the entry is kept alive here
        self._by_identity: dict[tuple[str, int, str], tuple[Entry, CandidateExplanation]] = {}
        self._parts_by_identity: dict[int, tuple[Components, tuple[ScoreComponent, ...]]] = {}

    def components(self, parts: Components) -> tuple[ScoreComponent, ...]:
        found = self._frozen_parts.get(parts)
        if found is None:
            built = []
            for part in parts:
                component = self._interned.get(part)
                if component is None:
                    component = self._interned[part] = ScoreComponent(part[0], part[1])
                built.append(component)
            found = self._frozen_parts[parts] = tuple(built)
        return found

    def make(self, host_id: str, entry: Entry, chosen: bool, note: str) -> CandidateExplanation:
        """The explanation of one pair."""
        if isinstance(entry, Rejection):
            return CandidateExplanation(
                host_id=host_id,
                rejection=entry.code._value_,
                detail=f"{entry.detail} [{note}]" if note else entry.detail,
                chosen=chosen,
            )
        parts, score = entry
        return CandidateExplanation(
            host_id=host_id,
            detail=note,
            score=score if parts else None,
            components=self.components(parts),
            chosen=chosen,
        )

    def static(self, host_id: str, entry: Entry, note: str) -> CandidateExplanation:
        """``make(host_id, entry, False, note)`` for an entry that lives as long as the plan."""
        key = (host_id, id(entry), note)
        hit = self._by_identity.get(key)
        if hit is not None and hit[0] is entry:
            return hit[1]
        found = self.make(host_id, entry, False, note)
        self._by_identity[key] = (entry, found)
        return found

    def scored(
        self, host_id: str, entry: tuple[Components, float], note: str
    ) -> CandidateExplanation:
        """An unchosen, unshared scored explanation of an entry that lives as long as the plan."""
        parts, score = entry
        hit = self._parts_by_identity.get(id(parts))
        if hit is None or hit[0] is not parts:
            hit = self._parts_by_identity[id(parts)] = (parts, self.components(parts))
        return CandidateExplanation(
            host_id=host_id,
            detail=note,
            score=score if parts else None,
            components=hit[1],
        )


class StaticRows:
    """The explanation of every pair no search touched, derived from the static indexes.

    It reads the fleet's static eligibility and the plan's static scores, never the
    plan's books: the candidate rows of a returned plan keep only these alive."""

    def __init__(
        self,
        static: StaticEligibility,
        scores: StaticScores,
        host_ids: Sequence[str],
        position: Mapping[str, int],
    ) -> None:
        self._static = static
        self._scores = scores
        self._host_ids = host_ids
        self._position = position
        self._rows: dict[tuple[int, ...], list[CandidateExplanation]] = {}
        self._groups: dict[tuple[int, ...], dict[GroupKey, list[str]]] = {}

    def entry(self, model_id: str, host_id: str) -> tuple[Entry, str]:
        """(entry, default note) of one pair nothing was booked for."""
        scores = self._scores
        rejection = self._static.rejection(model_id, host_id)
        if rejection is not None:
            return rejection, ""
        if scores.searched(model_id):
            return scores.static_score(model_id, host_id), NOT_EVALUATED
        return UNSCORED, NOT_SEARCHED

    def row(
        self, model_id: str, cells: Candidates, touched: AbstractSet[str]
    ) -> Sequence[CandidateExplanation]:
        """One candidate per host, in host order, as if nothing had been booked; hosts in
        ``touched`` (explained from the book) may be left with any value."""
        scores = self._scores
        static = self._static
        if scores.profiles[model_id].pins:
            row = []
            for host_id in self._host_ids:
                entry, note = self.entry(model_id, host_id)
                row.append(cells.static(host_id, entry, note))
            return row
        rejections = static.rejections[model_id]
        key = tuple(id(r) for r in rejections)  # interned rejections, alive with the memo
        base = self._rows.get(key)
        if base is None:
            base = []
            for host_id, view in static.views.items():
                found = view.admission or rejections[static.shape_of[host_id]]
                if found is None:
                    base.append(cells.static(host_id, UNSCORED, NOT_SEARCHED))
                else:
                    base.append(cells.static(host_id, found, ""))
            self._rows[key] = base
        if not scores.searched(model_id):
            return base
        row = list(base)
        position = self._position
        score = scores.static_score
        for host_id in static.eligible[model_id]:
            if host_id not in touched:
                row[position[host_id]] = cells.scored(
                    host_id, score(model_id, host_id), NOT_EVALUATED
                )
        return row

    def groups(
        self, model_id: str, touched: AbstractSet[str]
    ) -> tuple[dict[GroupKey, int], dict[GroupKey, str]]:
        """What ``row`` gives the hosts not in ``touched``, folded without building it:
        hosts per (rejection code, detail) and each group's first host in id order."""
        counts: dict[GroupKey, int] = {}
        examples: dict[GroupKey, str] = {}
        if self._scores.profiles[model_id].pins:
            for host_id in self._host_ids:
                if host_id not in touched:
                    count_host(counts, examples, group_key(*self.entry(model_id, host_id)), host_id)
            return counts, examples
        static = self._static
        rejections = static.rejections[model_id]
        key = tuple(id(r) for r in rejections)  # interned rejections, alive with the memo
        base = self._groups.get(key)
        if base is None:
            base = {}
            for host_id, view in static.views.items():
                found = view.admission or rejections[static.shape_of[host_id]]
                entry: Entry = UNSCORED if found is None else found
                base.setdefault(group_key(entry, "" if found else NOT_SEARCHED), []).append(host_id)
            self._groups[key] = base
        searched = self._scores.searched(model_id)
        gone = set(touched)
        for group, members in base.items():
            if searched and group == _NOT_SEARCHED:  # the search ranked them: static scores
                group = _NOT_EVALUATED
            left = len(members) - len(gone.intersection(members)) if gone else len(members)
            if left:
                counts[group] = left
                examples[group] = next(h for h in members if h not in touched)
        return counts, examples


def group_key(entry: Entry, note: str) -> GroupKey:
    """The (rejection code, detail) of the row ``Candidates.make`` writes for ``entry``."""
    if isinstance(entry, Rejection):
        return entry.code._value_, f"{entry.detail} [{note}]" if note else entry.detail
    return None, note


def count_host(
    counts: dict[GroupKey, int], examples: dict[GroupKey, str], key: GroupKey, host_id: str
) -> None:
    """One more host in group ``key``; the example is the smallest host id."""
    found = counts.get(key)
    if found is None:
        counts[key] = 1
        examples[key] = host_id
        return
    counts[key] = found + 1
    if host_id < examples[key]:
        examples[key] = host_id


_NOT_SEARCHED: GroupKey = (None, NOT_SEARCHED)
_NOT_EVALUATED: GroupKey = (None, NOT_EVALUATED)
_new_instance = object.__new__


def _explanation(
    model_id: str,
    target_replicas: int,
    target_reason: str,
    demand_class: DemandClass | None,
    candidates: CandidateRows,
) -> ModelExplanation:
    """``ModelExplanation(...)`` of these fields, written straight into the new instance.

    The frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``:
    about 11,000 instructions per model, against 4,000 here (measured; one per model
    per plan). The class has no ``__post_init__`` or validation this would skip.
    """
    explanation: ModelExplanation = _new_instance(ModelExplanation)
    explanation.__dict__.update(
        model_id=model_id,
        target_replicas=target_replicas,
        target_reason=target_reason,
        demand_class=demand_class,
        candidates=candidates,
    )
    return explanation


class ExplanationBook:
    """The latest explanation per (model, host), plus which hosts were chosen."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Entry]] = {}
        self._chosen: dict[str, set[str]] = {}
        self._notes: dict[str, dict[str, str]] = {}

    def reject(self, model_id: str, host_id: str, rejection: Rejection) -> None:
        self._entries.setdefault(model_id, {})[host_id] = rejection

    def score(self, model_id: str, host_id: str, components: Components, score: float) -> None:
        self._entries.setdefault(model_id, {})[host_id] = (components, score)

    def choose(self, model_id: str, host_id: str, note: str = "") -> None:
        self._chosen.setdefault(model_id, set()).add(host_id)
        if note:
            self._notes.setdefault(model_id, {})[host_id] = note

    def unchoose(self, model_id: str, host_id: str) -> None:
        self._chosen.get(model_id, set()).discard(host_id)

    def has(self, model_id: str, host_id: str) -> bool:
        return host_id in self._entries.get(model_id, {})

    def build(
        self,
        targets: Mapping[str, ReplicaTarget],
        position: Mapping[str, int],
        static: StaticRows,
    ) -> tuple[ModelExplanation, ...]:
        """Freeze the book over ``static``'s rows for the pairs nothing was booked for.

        ``position`` is each host's index in host id order. Hosts of a model
        that never searched (its incumbents already met the target) are listed
        as eligible, unscored; hosts a search ranked but did not reach carry
        their static score parts. Each model's candidate rows are built when
        first read: the book must not change after this call.
        """
        cells = Candidates()
        row = self._row
        summary = self._summary
        explanations: list[ModelExplanation] = []
        for model_id in sorted(targets):
            target = targets[model_id]
            replicas = target.replicas
            explanations.append(
                _explanation(
                    model_id,
                    replicas,
                    target.reason,
                    target.class_of(0) if replicas > 0 else None,  # target.first_class
                    CandidateRows(
                        partial(row, model_id, cells, position, static),
                        partial(summary, model_id, len(position), static),
                    ),
                )
            )
        return tuple(explanations)

    def _row(
        self, model_id: str, cells: Candidates, position: Mapping[str, int], static: StaticRows
    ) -> tuple[CandidateExplanation, ...]:
        entries = self._entries.get(model_id, {})
        chosen = self._chosen.get(model_id, set())
        notes = self._notes.get(model_id, {})
        touched = set(entries) | chosen | set(notes)
        row = static.row(model_id, cells, touched)
        if touched:
            row = list(row)
            for host_id in touched:
                entry = entries.get(host_id)
                note = notes.get(host_id, "")
                if entry is None:
                    entry, default_note = static.entry(model_id, host_id)
                    note = note or default_note
                row[position[host_id]] = cells.make(host_id, entry, host_id in chosen, note)
        return tuple(row)

    def _summary(self, model_id: str, hosts: int, static: StaticRows) -> RowSummary:
        """``summarise_rows(self._row(...))`` without building the rows."""
        entries = self._entries.get(model_id, {})
        chosen = self._chosen.get(model_id, set())
        notes = self._notes.get(model_id, {})
        touched = set(entries) | chosen | set(notes)
        counts, examples = static.groups(model_id, touched)
        for host_id in touched - chosen:
            entry = entries.get(host_id)
            note = notes.get(host_id, "")
            if entry is None:
                entry, default_note = static.entry(model_id, host_id)
                note = note or default_note
            count_host(counts, examples, group_key(entry, note), host_id)
        return summary_from_counts(hosts, chosen, counts, examples)
