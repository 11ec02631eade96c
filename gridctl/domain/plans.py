"""The planner's output: assignments, preemptions, shortfalls and explanations.

A plan is data, never an exception: an unplaceable model is an ``Unsatisfied``
entry with a stable code. Every (model, host) pair the planner considered has a
``CandidateExplanation`` saying why it was rejected or how it scored.

Candidate rows are the largest part of a plan (one per host per model) and
most readers never look at them, so a model's ``candidates`` may be a
``LazyRows``: a read-only sequence that builds its rows on first read, once.
It equals, hashes and iterates like the tuple it stands for. A model's rows
(``CandidateRows``) cross a process boundary as columns, one tuple per field,
and are built again on first read on the other side: a controller planning in
a worker process receives a plan without building a row per host per model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import partial
from typing import Generic, TypeVar, overload

from gridctl.domain.row_summaries import RowSummary, summarise_columns, summarise_rows

Row = TypeVar("Row")


class DemandClass(StrEnum):
    """Why a replica is wanted; earlier classes place first within a priority class."""

    PINNED = "pinned"
    BASELINE = "baseline"  # configured min_replicas
    DIRECT = "direct"  # direct request/queue/SLO/error evidence
    INFERRED = "inferred"  # correlation-only prewarm; never preempts


class UnsatisfiedCode(StrEnum):
    INSUFFICIENT_CAPACITY = "insufficient_capacity"
    NO_ELIGIBLE_NODES = "no_eligible_nodes"
    PINNED_NODE_UNAVAILABLE = "pinned_node_unavailable"
    FAILURE_DOMAIN_SHORTFALL = "failure_domain_shortfall"
    COLOCATION_CONFLICT = "colocation_conflict"
    DISK_ADMISSION = "disk_admission"
    PREEMPTION_STAGED = "preemption_staged"
    EVICTION_LIMIT = "eviction_limit"
    UNSAFE_REPLACEMENT = "unsafe_replacement"


@dataclass(frozen=True)
class ScoreComponent:
    name: str
    value: float


class LazyRows(Sequence[Row], Generic[Row]):
    """A tuple of rows built by ``build`` on first read (``build`` must be pure)."""

    __slots__ = ("_build", "_rows")

    def __init__(self, build: Callable[[], tuple[Row, ...]]) -> None:
        self._build: Callable[[], tuple[Row, ...]] | None = build
        self._rows: tuple[Row, ...] = ()

    def rows(self) -> tuple[Row, ...]:
        """The rows as a plain tuple (built now if not yet)."""
        if self._build is not None:
            self._rows = self._build()
            self._build = None  # drop what the builder kept alive
        return self._rows

    @overload
    def __getitem__(self, index: int) -> Row: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Row, ...]: ...
    def __getitem__(self, index: int | slice) -> Row | tuple[Row, ...]:
        return self.rows()[index]

    def __len__(self) -> int:
        return len(self.rows())

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, LazyRows):
            return self.rows() == other.rows()
        if isinstance(other, tuple):
            return self.rows() == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.rows())

    def __repr__(self) -> str:
        return repr(self.rows())


@dataclass(frozen=True)
class CandidateExplanation:
    """One host considered for one model: a rejection code, or the named score parts."""

    host_id: str
    rejection: str | None = None
    detail: str = ""
    score: float | None = None
    components: tuple[ScoreComponent, ...] = ()
    chosen: bool = False


Columns = tuple[
    tuple[str, ...],
    tuple[str | None, ...],
    tuple[str, ...],
    tuple[float | None, ...],
    tuple[tuple[ScoreComponent, ...], ...],
    tuple[bool, ...],
]


def _from_columns(columns: Columns) -> tuple[CandidateExplanation, ...]:
    return tuple(map(CandidateExplanation, *columns))


class CandidateRows(LazyRows[CandidateExplanation]):
    """One model's candidate rows; pickled as columns (``_from_columns`` rebuilds them).

    ``summary()`` folds them (``row_summaries``); ``summarise``, when given, folds
    them without building them (it must give what folding the built rows gives)."""

    __slots__ = ("_summarise", "_summary")

    def __init__(
        self,
        build: Callable[[], tuple[CandidateExplanation, ...]],
        summarise: Callable[[], RowSummary] | None = None,
    ) -> None:
        super().__init__(build)
        self._summarise = summarise
        self._summary: RowSummary | None = None

    def summary(self) -> RowSummary:
        """The rows folded into chosen hosts and groups of hosts alike (once)."""
        if self._summary is None:
            summarise = self._summarise
            self._summary = summarise() if summarise is not None else summarise_rows(self.rows())
            self._summarise = None
        return self._summary

    def __reduce__(self) -> tuple[Callable[[Columns], CandidateRows], tuple[Columns]]:
        rows = self.rows()
        columns: Columns = (
            tuple(r.host_id for r in rows),
            tuple(r.rejection for r in rows),
            tuple(r.detail for r in rows),
            tuple(r.score for r in rows),
            tuple(r.components for r in rows),
            tuple(r.chosen for r in rows),
        )
        return (_lazy_from_columns, (columns,))


def _lazy_from_columns(columns: Columns) -> CandidateRows:
    summarise = partial(summarise_columns, columns[0], columns[1], columns[2], columns[5])
    return CandidateRows(partial(_from_columns, columns), summarise)


@dataclass(frozen=True)
class ModelExplanation:
    model_id: str
    target_replicas: int
    target_reason: str
    demand_class: DemandClass | None
    candidates: Sequence[CandidateExplanation] = ()
    split: str | None = None  # "split over N hosts: ..." when the plan placed a split

    def summary(self) -> RowSummary:
        """The candidate rows folded: chosen hosts, then groups of hosts alike."""
        if isinstance(self.candidates, CandidateRows):
            return self.candidates.summary()
        return summarise_rows(self.candidates)


@dataclass(frozen=True)
class Assignment:
    """One desired replica of ``model_id`` on ``host_id``."""

    model_id: str
    host_id: str
    runtime: str
    memory_mb: int
    reason: str
    demand_class: DemandClass
    priority: int
    existing: bool = False  # satisfied by a live residency already there

    # The generated ``__init__`` of a frozen dataclass sets each field through
    # ``object.__setattr__``: about 13,000 instructions for these eight on Python 3.11
    # (measured), and a plan makes one per replica; filling the instance dict at once
    # takes a fraction. ``dataclass`` keeps an ``__init__`` the class defines;
    # ``tests/domain/test_plans_init.py`` checks it takes and sets exactly the fields.
    def __init__(
        self,
        model_id: str,
        host_id: str,
        runtime: str,
        memory_mb: int,
        reason: str,
        demand_class: DemandClass,
        priority: int,
        existing: bool = False,
    ) -> None:
        self.__dict__.update(
            model_id=model_id,
            host_id=host_id,
            runtime=runtime,
            memory_mb=memory_mb,
            reason=reason,
            demand_class=demand_class,
            priority=priority,
            existing=existing,
        )


@dataclass(frozen=True)
class Preemption:
    """A staged eviction: drain and unload ``model_id`` on ``host_id`` for ``beneficiary``."""

    host_id: str
    model_id: str
    beneficiary: str
    reason: str


@dataclass(frozen=True)
class Unsatisfied:
    model_id: str
    code: UnsatisfiedCode
    message: str
    missing_replicas: int = 0
    host_id: str | None = None


@dataclass(frozen=True)
class SplitStage:
    """One host of a split replica: its half-open layer range and the memory charged."""

    host_id: str
    layer_start: int
    layer_end: int
    memory_mb: int


@dataclass(frozen=True)
class SplitPlacement:
    """One replica of ``model_id`` served across several hosts (llama.cpp's RPC backend).

    The coordinator host runs ``llama-server --rpc`` and is also the first stage;
    every stage host serves its layer range. Stages are ordered by layer range.
    """

    model_id: str
    coordinator_host_id: str
    stages: tuple[SplitStage, ...]
    layer_count: int
    context_length: int
    parallel_lanes: int
    runtime: str
    reason: str
    demand_class: DemandClass
    priority: int

    @property
    def memory_mb(self) -> int:
        return sum(stage.memory_mb for stage in self.stages)

    def summary(self) -> str:
        """``split over 3 hosts: a layers 0-9 (3000 MB), ...`` (ranges inclusive)."""
        parts = ", ".join(
            f"{s.host_id} layers {s.layer_start}-{s.layer_end - 1} ({s.memory_mb} MB)"
            for s in self.stages
        )
        return (
            f"split over {len(self.stages)} hosts: {parts}; coordinator "
            f"{self.coordinator_host_id}, context {self.context_length}, "
            f"{self.parallel_lanes} lanes"
        )


@dataclass(frozen=True)
class Plan:
    """The complete result of one planning pass over frozen inputs.

    ``splits`` are replicas served across several hosts; nothing acts on them yet
    (the reconciler issues no commands for a split), and ``assignments`` never
    holds a split's stages."""

    input_digest: str
    now: float
    targets: tuple[tuple[str, int], ...]
    assignments: tuple[Assignment, ...]
    preemptions: tuple[Preemption, ...]
    unsatisfied: tuple[Unsatisfied, ...]
    explanations: tuple[ModelExplanation, ...]
    splits: tuple[SplitPlacement, ...] = ()

    def splits_for(self, model_id: str) -> tuple[SplitPlacement, ...]:
        return tuple(s for s in self.splits if s.model_id == model_id)

    def assignments_for(self, model_id: str) -> tuple[Assignment, ...]:
        return tuple(a for a in self.assignments if a.model_id == model_id)

    def explanation_of(self, model_id: str) -> ModelExplanation | None:
        """One model's explanation (its candidate rows are built only when read)."""
        for explanation in self.explanations:
            if explanation.model_id == model_id:
                return explanation
        return None
