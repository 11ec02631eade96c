"""A model's candidate rows folded into a few lines: chosen hosts, then hosts alike.

A plan holds one candidate row per host per model: 200,000 rows for 1,000
hosts and 200 models, of which a reader wants a handful. Most hosts are turned
down, or left unevaluated, for the same reason in the same words as many
others (a data tier, a missing tag, a memory shortfall of one machine shape),
so a model's rows fold into groups of hosts that share a rejection code and
detail, each with how many hosts it holds and one example host (the first in
host-id order). Hosts the plan chose are listed by name, outside the groups.
Every row lands in exactly one place: the counts of the groups plus the chosen
hosts add up to the rows.

``summarise_rows`` folds any rows; the planner folds its own lazily built rows
without building them (``CandidateRows.summary``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

# (rejection code or None, detail): the hosts of one group share both
GroupKey = tuple[str | None, str]


@dataclass(frozen=True)
class RowGroup:
    """Hosts of one model turned down (``rejection``) or left eligible alike."""

    rejection: str | None
    detail: str
    hosts: int
    example_host: str


@dataclass(frozen=True)
class RowSummary:
    """One model's candidate rows as chosen hosts plus groups of hosts alike.

    ``groups`` are ordered rejections first, then largest first, then by code and
    detail, so equal rows always give an equal summary."""

    hosts: int
    chosen: tuple[str, ...]
    groups: tuple[RowGroup, ...]

    @property
    def rejected(self) -> tuple[RowGroup, ...]:
        return tuple(g for g in self.groups if g.rejection is not None)

    @property
    def eligible(self) -> tuple[RowGroup, ...]:
        return tuple(g for g in self.groups if g.rejection is None)


def _group_order(group: RowGroup) -> tuple[bool, int, str, str]:
    return (group.rejection is None, -group.hosts, group.rejection or "", group.detail)


def summary_from_counts(
    hosts: int,
    chosen: Iterable[str],
    counts: dict[GroupKey, int],
    examples: dict[GroupKey, str],
) -> RowSummary:
    """The summary of groups already counted (``examples``: each group's first host)."""
    groups = [
        RowGroup(rejection=key[0], detail=key[1], hosts=count, example_host=examples[key])
        for key, count in counts.items()
        if count > 0
    ]
    groups.sort(key=_group_order)
    return RowSummary(hosts=hosts, chosen=tuple(sorted(chosen)), groups=tuple(groups))


class RowFacts(Protocol):
    """What a summary reads of a candidate row (``CandidateExplanation`` has it)."""

    @property
    def host_id(self) -> str: ...
    @property
    def rejection(self) -> str | None: ...
    @property
    def detail(self) -> str: ...
    @property
    def chosen(self) -> bool: ...


def summarise_columns(
    host_ids: Sequence[str],
    rejections: Sequence[str | None],
    details: Sequence[str],
    chosen: Sequence[bool],
) -> RowSummary:
    """The summary of rows given column by column (any order: each group's example is
    its smallest host id)."""
    counts: dict[GroupKey, int] = {}
    examples: dict[GroupKey, str] = {}
    picked: list[str] = []
    for host_id, rejection, detail, is_chosen in zip(
        host_ids, rejections, details, chosen, strict=True
    ):
        if is_chosen:
            picked.append(host_id)
            continue
        key = (rejection, detail)
        found = counts.get(key)
        if found is None:
            counts[key] = 1
            examples[key] = host_id
        else:
            counts[key] = found + 1
            if host_id < examples[key]:
                examples[key] = host_id
    return summary_from_counts(len(host_ids), picked, counts, examples)


def summarise_rows(rows: Iterable[RowFacts]) -> RowSummary:
    """The summary of candidate rows (any order)."""
    listed = list(rows)
    return summarise_columns(
        [r.host_id for r in listed],
        [r.rejection for r in listed],
        [r.detail for r in listed],
        [r.chosen for r in listed],
    )
