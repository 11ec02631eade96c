"""The dynamic placement rules are declared once, and what is derived from them holds.

``placement_filters.DYNAMIC_FILTERS`` declares each rule's check, its fast check
for a new replica and the facts it reads. The fused fast check must agree with
the chain; the host-class key (derived from the declared facts) must separate
any two hosts a rule tells apart, so a rule that reads a fact it does not
declare fails here; and a new replica is scored by one definition wherever it
is scored.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.domain import (
    ControllerPolicy,
    DemandClass,
    FleetSnapshot,
    HostSnapshot,
    HostState,
    ModelProfile,
)
from gridctl.planner.candidates import Candidate
from gridctl.planner.host_classes import HostClasses
from gridctl.planner.placement_filters import (
    CLASS_FACTS,
    COLOCATION,
    DISK_ADMISSION,
    DISK_BOOKED,
    DYNAMIC_FILTERS,
    DynamicFilter,
    HostFact,
    class_facts,
    fact_reader,
    first_rejection,
    passes_as_new,
)
from gridctl.planner.planning import set_targets
from gridctl.planner.rejections import Rejection
from gridctl.planner.scoring import score_with_dynamic
from gridctl.planner.selection import (
    candidate_for,
    commit,
    evaluate,
    new_placement_facts,
    new_placement_score,
    new_placement_value,
    score,
)
from gridctl.planner.workspace import Workspace

from .builders import NOW, fleet, mini_32g, policy, profile, resident
from .strategies import MODEL_NAMES, planning_inputs, random_host, random_profiles

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _booked_workspace(inputs: Inputs, seed: int, bookings: int) -> Workspace:
    """A workspace part way through a plan: some new replicas booked wherever they fit."""
    profiles, snapshot, pol = inputs
    ws = Workspace(profiles, snapshot, pol)
    set_targets(ws)
    ws.build_scarcity()
    rng = random.Random(seed)
    pairs = [(m, h) for m in ws.model_ids for h in ws.eligible[m]]
    for model_id, host_id in rng.sample(pairs, min(bookings, len(pairs))):
        shaped = candidate_for(ws, model_id, host_id)
        if isinstance(shaped, Candidate) and shaped.incumbent is None:
            shaped.relax_domains = True
            if evaluate(ws, shaped) is None:
                commit(ws, shaped, DemandClass.DIRECT, "booked by the test")
    return ws


def _new_replicas(ws: Workspace) -> Iterator[Candidate]:
    """A new replica of every model on every eligible host the model has nothing on."""
    for model_id in ws.model_ids:
        for host_id in ws.eligible[model_id]:
            shaped = candidate_for(ws, model_id, host_id)
            if isinstance(shaped, Candidate) and shaped.incumbent is None:
                yield shaped


def _chain(ws: Workspace, candidate: Candidate) -> Rejection | None:
    for rule in DYNAMIC_FILTERS:
        found = rule.check(candidate, ws)
        if found is not None:
            return found
    return None


@PROPERTY
@given(planning_inputs(max_hosts=12), st.integers(0, 2**16), st.integers(0, 12))
def test_the_fused_fast_check_agrees_with_the_chain(inputs: Inputs, seed: int, booked: int) -> None:
    """A new replica the fast check passes passes every rule; each rule's fast check is
    exact (colocation's may only be stricter); the fused check is the rules' checks; a
    rule rejects only with the codes it declares (the class search shares those)."""
    ws = _booked_workspace(inputs, seed, booked)
    for shaped in _new_replicas(ws):
        for relax in (False, True):
            shaped.relax_domains = relax
            members = shaped.ledger.members()
            chain = _chain(ws, shaped)
            fast = passes_as_new(shaped, ws)
            each = [rule.passes_new(shaped, ws, members) for rule in DYNAMIC_FILTERS]
            assert fast == all(each)
            assert not fast or chain is None
            assert first_rejection(ws, shaped) == chain
            for rule, passes in zip(DYNAMIC_FILTERS, each, strict=True):
                verdict = rule.check(shaped, ws)
                assert verdict is None or verdict.code in rule.codes, rule.name
                if rule is COLOCATION:
                    assert not passes or verdict is None
                else:
                    assert passes == (verdict is None), rule.name


@PROPERTY
@given(planning_inputs(max_hosts=12), st.integers(0, 2**16), st.integers(0, 12))
def test_a_new_replica_has_one_score_wherever_it_is_scored(
    inputs: Inputs, seed: int, booked: int
) -> None:
    ws = _booked_workspace(inputs, seed, booked)
    for shaped in _new_replicas(ws):
        model_id, host_id = shaped.profile.name, shaped.host_id
        static_sum = ws.static_sum(model_id, host_id)
        facts = new_placement_facts(ws, model_id, host_id, shaped.memory_mb)
        value = new_placement_value(ws, model_id, host_id, static_sum, shaped.memory_mb)
        assert value == score_with_dynamic(static_sum, *facts)
        assert new_placement_score(ws, model_id, host_id) == value
        score(ws, shaped)
        assert shaped.score == value
        static_parts = ws.static_score(model_id, host_id)[0]
        assert shaped.components[: len(static_parts)] == static_parts


# ---------------------------------------------------------------------------
# the class key separates every two hosts a rule tells apart


def _perturbations(rng: random.Random, names: tuple[str, ...]) -> list[tuple[str, object]]:
    """(field, new value) changes of one host's resources, or of its residencies."""
    return [
        ("max_models", rng.choice((0, 1, 2, 3))),
        ("disk_free_mb", rng.choice((None, 0, 3000, 5000, 100_000))),
        ("capacity_mb", rng.choice((8192, 16384, 32768, 65536))),
        ("reserved_mb", rng.choice((0, 1024, 4096, 12288))),
        ("external_mb", rng.choice((0, 2048, 8192))),
        ("thermal_derate", rng.choice((1.0, 0.75, 0.5))),
        ("throttle_fraction", rng.choice((1.0, 0.5))),
        ("host_priority", rng.choice((0, 100))),
        ("residencies", rng.choice(names)),
    ]


def _perturbed(template: HostSnapshot, change: tuple[str, object], host_id: str) -> HostSnapshot:
    name, value = change
    if name == "residencies":  # one model more or fewer live on the copy
        rows = () if template.residencies else (resident(str(value), 2048),)
        return replace(template, host_id=host_id, residencies=rows)
    resources = replace(template.resources, **{name: value})
    return replace(template, host_id=host_id, resources=resources)


def undeclared_reads(
    ws: Workspace, rules: tuple[DynamicFilter, ...], facts: tuple[HostFact, ...]
) -> list[str]:
    """Rule verdicts on a new replica (and its scores) that differ between two hosts whose
    class key built from ``facts`` is equal (hosts special to the model, and pairs in
    failure domains the model uses differently, are told apart by the class search)."""
    read = fact_reader(facts)
    found: list[str] = []
    for model_id in ws.model_ids:
        groups: dict[tuple[object, ...], list[tuple[str, Candidate]]] = {}
        for host_id in ws.eligible[model_id]:
            if host_id in ws.special_hosts(model_id):
                continue
            shaped = candidate_for(ws, model_id, host_id)
            if not isinstance(shaped, Candidate) or shaped.incumbent is not None:
                continue
            key = (
                ws.score_id(host_id),
                ws.static.class_of[host_id],
                ws.domain_of[host_id] in ws.domains[model_id],
                read(ws, ws.ledgers[host_id]),
            )
            groups.setdefault(key, []).append((host_id, shaped))
        for members in groups.values():
            first_id, first = members[0]
            for host_id, other in members[1:]:
                scores = {
                    new_placement_value(ws, model_id, h, ws.static_sum(model_id, h), c.memory_mb)
                    for h, c in ((first_id, first), (host_id, other))
                }
                if len(scores) > 1:
                    found.append(f"score: {model_id} on {first_id} vs {host_id}")
                for relax in (False, True):
                    first.relax_domains = other.relax_domains = relax
                    for rule in rules:
                        a, b = rule.check(first, ws), rule.check(other, ws)
                        if (a and a.code) != (b and b.code):
                            found.append(f"{rule.name}: {model_id} on {first_id} vs {host_id}")
    return found


@st.composite
def perturbed_pairs(draw: st.DrawFn) -> tuple[Inputs, int]:
    """A small random fleet plus copies of one of its hosts, each differing from it in one
    fact, some with another model booked on them (their ledgers differ too)."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    names = MODEL_NAMES[: draw(st.integers(1, 5))]
    hosts = [random_host(rng, i, names, empty=rng.random() < 0.5) for i in range(3)]
    template = replace(
        hosts[0], cached=(), failed_attempts=(), learned=(), residencies=hosts[0].residencies[:1]
    )
    copies = [replace(template, host_id="p-base")]
    for index, change in enumerate(_perturbations(rng, names)):
        copies.append(_perturbed(template, change, f"p-{index:02d}"))
    for index in range(3):
        copies.append(replace(template, host_id=f"p-same-{index}"))
    # one live model each: equal member counts, which of them carry a colocation rule not
    for name in names:
        copies.append(
            replace(template, host_id=f"p-live-{name}", residencies=(resident(name, 2048),))
        )
    # throttled copies with equal capacity for new work but not equal raw memory
    throttled = replace(
        template.resources, reserved_mb=0, thermal_derate=1.0, throttle_fraction=1.0
    )
    halved = replace(throttled, capacity_mb=2 * throttled.capacity_mb, throttle_fraction=0.5)
    for host_id, resources in (("p-raw-1", throttled), ("p-raw-2", halved)):
        copies.append(
            replace(template, host_id=host_id, state=HostState.THROTTLED, resources=resources)
        )
    snapshot = FleetSnapshot(now=NOW, hosts=(*hosts, *copies), demand=())
    host_ids = tuple(h.host_id for h in snapshot.hosts)
    pol = replace(ControllerPolicy(), admission_headroom_mb=rng.choice((0, 256, 1024)))
    return (random_profiles(rng, names, host_ids), snapshot, pol), rng.randint(0, 2**16)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(perturbed_pairs(), st.integers(0, 8))
def test_hosts_sharing_a_class_key_meet_the_same_verdict_from_every_rule(
    pair: tuple[Inputs, int], booked: int
) -> None:
    inputs, seed = pair
    ws = _booked_workspace(inputs, seed, booked)
    assert undeclared_reads(ws, DYNAMIC_FILTERS, CLASS_FACTS) == []
    # the host classes key by exactly these facts: hosts in one class share the key
    classes = HostClasses(ws)
    read = fact_reader(CLASS_FACTS)
    for group in classes.by_static.values():
        for members in group.values():
            keys = {read(ws, ws.ledgers[h]) for h in members}
            assert len(keys) == 1, members


def test_a_rule_reading_a_fact_it_does_not_declare_is_caught() -> None:
    """Disk admission without ``disk_free_mb`` in its declaration: two hosts differing only
    in free disk would share a class key and one cached verdict; the check finds them."""
    undeclared = replace(DISK_ADMISSION, host_facts=(DISK_BOOKED,))
    rules = tuple(undeclared if r is DISK_ADMISSION else r for r in DYNAMIC_FILTERS)
    facts = class_facts(rules)
    assert all(f.name != "disk_free_mb" for f in facts)
    big = profile("big", 4096, size_mb=20_000)
    hosts = fleet(mini_32g("roomy", disk_free_mb=100_000), mini_32g("full", disk_free_mb=5_000))
    ws = Workspace([big], hosts, policy())
    set_targets(ws)
    ws.build_scarcity()
    assert undeclared_reads(ws, rules, facts) == [
        "disk_admission: big on full vs roomy",
        "disk_admission: big on full vs roomy",
    ]
    # with the rules as declared, the two hosts fall into different classes
    assert undeclared_reads(ws, DYNAMIC_FILTERS, CLASS_FACTS) == []
    classes = HostClasses(ws)
    assert classes.signature("roomy") != classes.signature("full")


def test_every_declared_fact_is_in_the_class_key() -> None:
    for rule in DYNAMIC_FILTERS:
        assert set(rule.host_facts) <= set(CLASS_FACTS), rule.name
    assert len({fact.name for fact in CLASS_FACTS}) == len(CLASS_FACTS)
