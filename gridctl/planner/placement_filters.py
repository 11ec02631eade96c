"""The dynamic placement rules, each declared once with the facts it reads.

Static eligibility is settled once per plan; what remains depends on what the
plan has already put on a host: serving slots, the reciprocal colocation rules,
the failure-domain minimum, cumulative artifact disk admission and the two
memory ledgers. Each rule is one ``DynamicFilter``: its full check (a named
``Rejection`` or None), a cheap test that a *new* replica surely passes it, the
rejection codes it may return, and the host and model facts it reads of a new
replica on a host the model has nothing on.

Everything that restated the rules is derived from ``DYNAMIC_FILTERS``:

- ``passes_as_new``, the fused fast check the searches try first;
- ``DYNAMIC_CODES``, the rejections the class search may share between models;
- ``CLASS_FACTS`` (split into ``FIXED_FACTS`` and ``MOVING_FACTS``), what the
  host-class key of ``host_classes`` reads of a host: the filters' host facts and
  the new-placement score's (``SCORE_FACTS``), so a filter that reads a new fact
  changes the key and cannot silently share a cached verdict between hosts that
  differ in it;
- ``MODEL_FACTS``, what the class search's cached verdicts read of a model.

A placer that puts one model on several hosts runs the same chain on every
stage host (``first_rejection``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from gridctl.planner.candidates import Candidate
from gridctl.planner.ledgers import HostLedger
from gridctl.planner.rejections import Rejection, RejectionCode
from gridctl.planner.workspace import Workspace

_NONE: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class HostFact:
    """One thing a rule reads of a host for a new replica of a model with nothing there,
    as a Python expression over ``ledger`` (the host's ``HostLedger``), ``ws`` (the
    ``Workspace``) and ``members`` (``ledger.members()``)."""

    name: str
    moves: bool  # it changes as the plan books work on the host (else fixed for the plan)
    source: str

    def read(self, ws: Workspace, ledger: HostLedger) -> object:
        """The fact's value on one host (``fact_reader`` reads several at once)."""
        return fact_reader((self,))(ws, ledger)[0]


@dataclass(frozen=True, slots=True)
class ModelFact:
    """One thing a rule reads of the model being placed (beside its footprint on the host's
    shape and its failure-domain need, which the class search keys by itself)."""

    name: str
    read: Callable[[Workspace, str], Hashable]


MAX_MODELS = HostFact("max_models", False, "ledger.view.host.resources.max_models")
LIVE_VIOLATION = HostFact("live_violation", False, 'ws.live_violations.get(ledger.host_id, "")')
DISK_FREE = HostFact("disk_free_mb", False, "ledger.view.host.resources.disk_free_mb")
NEW_CAPACITY = HostFact("new_capacity_mb", False, "ledger.view.new_capacity_mb")
UNMANAGED = HostFact("unmanaged_mb", False, "ledger.view.unmanaged_mb")
LIVE_MANAGED = HostFact("live_managed_mb", False, "ledger.view.live_managed_mb")
RAW = HostFact("raw_mb", False, "ledger.view.raw_mb")
MEMBER_COUNT = HostFact("member_count", True, "len(members)")
# which members carry a colocation rule (a ceiling or an exclusion, reciprocal): the
# only members whose names a rule can read
CONSTRAINING_MEMBERS = HostFact(
    "constraining_members",
    True,
    "frozenset(members & ws.constraining_models) if members else _NONE",
)
NEW_MB = HostFact("new_mb", True, "ledger.new_mb")
DESIRED_MB = HostFact("desired_mb", True, "ledger.desired_mb")
DISK_BOOKED = HostFact("disk_booked_mb", True, "ledger.disk_mb")

ARTIFACT_MB = ModelFact("artifact_mb", lambda ws, m: ws.profiles[m].artifact.size_mb or 0)
MAX_COLOCATED = ModelFact("max_colocated", lambda ws, m: ws.profiles[m].max_colocated_models)
EXCLUDED = ModelFact("excluded", lambda ws, m: ws.exclusions.get(m))

# what the new-placement score reads of a host beside its static score and failure
# domain: free memory after the replica (``base_free`` less what the plan added) and
# the capacity best fit divides by (``selection.new_placement_value``)
SCORE_FACTS: tuple[HostFact, ...] = (NEW_CAPACITY, UNMANAGED, LIVE_MANAGED, NEW_MB)


@dataclass(frozen=True, slots=True)
class DynamicFilter:
    """One dynamic placement rule.

    ``check`` is the rule (any candidate, kept or new); ``passes_new`` is True only
    where ``check`` finds nothing for a new replica, given the host's current members
    (it may say False where the check would pass: the chain then says which rule
    rejects, and why). ``host_facts`` and ``model_facts`` list everything ``check``
    reads of a new replica on a host the model has nothing on, beside the failure
    domain and the footprint; ``codes`` every code it may reject with.
    """

    name: str
    check: Callable[[Candidate, Workspace], Rejection | None]
    passes_new: Callable[[Candidate, Workspace, AbstractSet[str]], bool]
    host_facts: tuple[HostFact, ...]
    model_facts: tuple[ModelFact, ...]
    codes: frozenset[RejectionCode]


def _model_slots(c: Candidate, ws: Workspace) -> Rejection | None:
    limit = c.view.host.resources.max_models
    if limit <= 0:
        return None
    members = c.ledger.desired_models if c.incumbent else c.ledger.members()
    if c.profile.name not in members and len(members) + 1 > limit:
        return Rejection(RejectionCode.MODEL_SLOTS, f"all {limit} model slots taken")
    return None


def _model_slots_new(c: Candidate, ws: Workspace, members: AbstractSet[str]) -> bool:
    limit = c.view.host.resources.max_models
    return not (0 < limit < len(members) + 1 and c.profile.name not in members)


def _colocation(c: Candidate, ws: Workspace) -> Rejection | None:
    """Reciprocal ceilings and excludes against every live or planned peer."""
    name = c.profile.name
    if c.incumbent is None and c.host_id in ws.live_violations:
        detail = ws.live_violations[c.host_id]
        return Rejection(RejectionCode.COLOCATION_EXCLUDE, f"host must converge first: {detail}")
    members = c.ledger.desired_models if c.incumbent else c.ledger.members()
    excluded = ws.exclusions.get(name)
    if (
        not excluded
        and c.profile.max_colocated_models <= 0
        and members.isdisjoint(ws.ceiling_models)
    ):
        return None  # no rule of its own, and no peer with a ceiling
    peers = members - {name}
    if excluded:
        clash = sorted(peers & excluded)
        if clash:
            return Rejection(RejectionCode.COLOCATION_EXCLUDE, f"excluded beside {clash[0]}")
    count = len(peers) + 1
    if 0 < c.profile.max_colocated_models < count:
        return Rejection(
            RejectionCode.COLOCATION_CEILING,
            f"{count} models > own ceiling {c.profile.max_colocated_models}",
        )
    for peer in sorted(peers):
        other = ws.profiles.get(peer)
        if other is not None and 0 < other.max_colocated_models < count:
            return Rejection(
                RejectionCode.COLOCATION_CEILING,
                f"{peer} allows at most {other.max_colocated_models} models",
            )
    return None


def _colocation_new(c: Candidate, ws: Workspace, members: AbstractSet[str]) -> bool:
    """No rule can apply: none of its own, no peer with a ceiling, a converged host."""
    return not (
        c.host_id in ws.live_violations
        or c.profile.max_colocated_models > 0
        or ws.exclusions.get(c.profile.name)
        or not members.isdisjoint(ws.ceiling_models)
    )


def _failure_domain(c: Candidate, ws: Workspace) -> Rejection | None:
    name = c.profile.name
    if c.relax_domains or not ws.needs_new_domain(name):
        return None
    if c.view.domain in ws.domains[name]:
        return Rejection(RejectionCode.FAILURE_DOMAIN, f"domain {c.view.domain} already used")
    return None


def _failure_domain_new(c: Candidate, ws: Workspace, members: AbstractSet[str]) -> bool:
    name = c.profile.name
    return (
        c.relax_domains
        or ws.domain_of[c.host_id] not in ws.domains[name]
        or not ws.needs_new_domain(name)
    )


def _disk_admission(c: Candidate, ws: Workspace) -> Rejection | None:
    if c.disk_mb <= 0:
        return None
    free = c.ledger.disk_free_mb()
    if free is None:
        return Rejection(RejectionCode.DISK_UNKNOWN, "no authenticated free-disk observation")
    if c.disk_mb > free:
        return Rejection(RejectionCode.DISK_ADMISSION, f"artifact {c.disk_mb} MB > {free} MB free")
    return None


def _disk_admission_new(c: Candidate, ws: Workspace, members: AbstractSet[str]) -> bool:
    if c.disk_mb <= 0:
        return True
    free = c.ledger.disk_free_mb()
    return free is not None and c.disk_mb <= free


def _memory_incremental(c: Candidate, ws: Workspace) -> Rejection | None:
    if c.incumbent is not None:
        return None  # a zero-allocation transition may stay inside the headroom
    need = c.memory_mb + ws.policy.admission_headroom_mb
    free = c.ledger.incremental_free_mb
    if need > free:
        return Rejection(
            RejectionCode.MEMORY_INCREMENTAL, f"needs {need} MB with headroom, {free} MB free now"
        )
    return None


def _memory_incremental_new(c: Candidate, ws: Workspace, members: AbstractSet[str]) -> bool:
    return c.memory_mb + ws.policy.admission_headroom_mb <= c.ledger.incremental_free_mb


def _memory_desired(c: Candidate, ws: Workspace) -> Rejection | None:
    if c.incumbent is not None and not c.charged:  # (a new replica is always charged)
        return None  # unmanaged or pinned memory is charged before anything else
    free = c.ledger.desired_free_mb
    if c.memory_mb > free:
        return Rejection(
            RejectionCode.MEMORY_DESIRED, f"desired footprint over by {c.memory_mb - free} MB"
        )
    return None


def _memory_desired_new(c: Candidate, ws: Workspace, members: AbstractSet[str]) -> bool:
    return c.memory_mb <= c.ledger.desired_free_mb


MODEL_SLOTS = DynamicFilter(
    "model_slots",
    _model_slots,
    _model_slots_new,
    (MAX_MODELS, MEMBER_COUNT),
    (),
    frozenset({RejectionCode.MODEL_SLOTS}),
)
COLOCATION = DynamicFilter(
    "colocation",
    _colocation,
    _colocation_new,
    (LIVE_VIOLATION, MEMBER_COUNT, CONSTRAINING_MEMBERS),
    (MAX_COLOCATED, EXCLUDED),
    frozenset({RejectionCode.COLOCATION_EXCLUDE, RejectionCode.COLOCATION_CEILING}),
)
FAILURE_DOMAIN = DynamicFilter(
    "failure_domain",
    _failure_domain,
    _failure_domain_new,
    (),  # the host's domain: the class search splits a class's members by it
    (),  # the model's used domains and minimum: keyed by the class search per stream
    frozenset({RejectionCode.FAILURE_DOMAIN}),
)
DISK_ADMISSION = DynamicFilter(
    "disk_admission",
    _disk_admission,
    _disk_admission_new,
    (DISK_FREE, DISK_BOOKED),
    (ARTIFACT_MB,),
    frozenset({RejectionCode.DISK_UNKNOWN, RejectionCode.DISK_ADMISSION}),
)
MEMORY_INCREMENTAL = DynamicFilter(
    "memory_incremental",
    _memory_incremental,
    _memory_incremental_new,
    (NEW_CAPACITY, UNMANAGED, LIVE_MANAGED, NEW_MB),
    (),  # its footprint, and the policy's headroom (fixed for the plan)
    frozenset({RejectionCode.MEMORY_INCREMENTAL}),
)
MEMORY_DESIRED = DynamicFilter(
    "memory_desired",
    _memory_desired,
    _memory_desired_new,
    (RAW, DESIRED_MB),
    (),  # its footprint
    frozenset({RejectionCode.MEMORY_DESIRED}),
)

DYNAMIC_FILTERS: tuple[DynamicFilter, ...] = (
    MODEL_SLOTS,
    COLOCATION,
    FAILURE_DOMAIN,
    DISK_ADMISSION,
    MEMORY_INCREMENTAL,
    MEMORY_DESIRED,
)
# the chain's checks alone, for the loops that run them (an attribute read fewer each)
_CHECKS = tuple(rule.check for rule in DYNAMIC_FILTERS)
_PASSES_NEW = tuple(rule.passes_new for rule in DYNAMIC_FILTERS)

DYNAMIC_CODES: frozenset[RejectionCode] = frozenset(
    code for rule in DYNAMIC_FILTERS for code in rule.codes
)


def class_facts(rules: Iterable[DynamicFilter]) -> tuple[HostFact, ...]:
    """What a class key must read of a host for a search under ``rules``: every host fact
    the rules declare and the new-placement score's, each once, in declaration order."""
    declared = [fact for rule in rules for fact in rule.host_facts]
    return tuple(dict.fromkeys([*declared, *SCORE_FACTS]))


CLASS_FACTS: tuple[HostFact, ...] = class_facts(DYNAMIC_FILTERS)
FIXED_FACTS: tuple[HostFact, ...] = tuple(f for f in CLASS_FACTS if not f.moves)
MOVING_FACTS: tuple[HostFact, ...] = tuple(f for f in CLASS_FACTS if f.moves)
MODEL_FACTS: tuple[ModelFact, ...] = tuple(
    dict.fromkeys(fact for rule in DYNAMIC_FILTERS for fact in rule.model_facts)
)


def passes_as_new(c: Candidate, ws: Workspace) -> bool:
    """Whether a new replica surely passes every rule of ``DYNAMIC_FILTERS``: each rule's
    ``passes_new`` in turn, the host's members read once for all of them."""
    members = c.ledger.members()
    # a loop, not ``all`` over a generator: a generator costs a frame of its own per call
    for passes in _PASSES_NEW:  # noqa: SIM110
        if not passes(c, ws, members):
            return False
    return True


def first_rejection(ws: Workspace, candidate: Candidate) -> Rejection | None:
    """The first rule of ``DYNAMIC_FILTERS`` that rejects the candidate, if any."""
    if candidate.incumbent is None and passes_as_new(candidate, ws):
        return None
    for check in _CHECKS:
        rejection = check(candidate, ws)
        if rejection is not None:
            return rejection
    return None


FactReader = Callable[[Workspace, HostLedger], tuple[object, ...]]
_READERS: dict[tuple[HostFact, ...], FactReader] = {}


def fact_reader(facts: tuple[HostFact, ...]) -> FactReader:
    """One function reading ``facts`` of a host, in order, compiled from their sources.

    The host classes read every admitted host this way, and again each host a placement
    changes: reading each fact through a call of its own cost about 12,000 instructions
    a host read (1.2 M of a cold 64x32 plan, measured); one generated function costs
    what a hand-written tuple does. The sources are this module's constants, never
    input."""
    found = _READERS.get(facts)
    if found is None:
        members = any("members" in fact.source for fact in facts)
        body = "".join(f"{fact.source},\n" for fact in facts)
        source = (
            "def read(ws, ledger):\n"
            + ("    members = ledger.members()\n" if members else "")
            + f"    return (\n{body})\n"
        )
        namespace: dict[str, object] = {"_NONE": _NONE}
        exec(compile(source, f"<facts {', '.join(f.name for f in facts)}>", "exec"), namespace)
        made: FactReader = namespace["read"]  # type: ignore[assignment]
        found = _READERS[facts] = made
    return found


def model_facts(ws: Workspace, model_id: str) -> tuple[object, ...]:
    """The values of ``MODEL_FACTS`` of one model, in order."""
    return tuple([fact.read(ws, model_id) for fact in MODEL_FACTS])
