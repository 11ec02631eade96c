"""Remembered canonical texts give the digest a fresh serialisation gives.

``InputTexts`` remembers the text of frozen inputs by identity, item by item,
so a controller can keep one across ticks; ``SharedIndexes`` keeps the
demand-independent indexes of the same profiles, hosts, instant and policy.
Neither may change a plan: after hosts are replaced, added or dropped, after
demand changes and after ``forget_unused``, every plan equals a plan made from
scratch, byte for byte.
"""

from __future__ import annotations

import random
from dataclasses import replace

from hypothesis import HealthCheck, given, settings

from gridctl.domain import ControllerPolicy, FleetSnapshot, ModelProfile
from gridctl.planner import input_digest, plan_bytes, plan_placement
from gridctl.planner.canonical import InputTexts
from gridctl.planner.fleet_index import SharedIndexes

from .strategies import MODEL_NAMES, planning_inputs, random_demand, random_host

Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
MEMO = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _next_tick(rng: random.Random, snapshot: FleetSnapshot) -> FleetSnapshot:
    """Some hosts replaced by new objects, one dropped or added, new demand."""
    names = MODEL_NAMES[:5]
    hosts = list(snapshot.hosts)
    for i in range(len(hosts)):
        if rng.random() < 0.3:
            hosts[i] = random_host(rng, i, names, empty=rng.random() < 0.5)
    if hosts and rng.random() < 0.3:
        hosts.pop(rng.randrange(len(hosts)))
    if rng.random() < 0.3:
        hosts.append(random_host(rng, len(hosts) + 100, names, empty=False))
    return replace(snapshot, hosts=tuple(hosts), demand=random_demand(rng, names))


@MEMO
@given(planning_inputs(max_hosts=12))
def test_remembered_texts_give_the_fresh_digest_across_ticks(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    rng = random.Random(len(snapshot.hosts))
    texts = InputTexts()
    for _ in range(4):
        remembered = input_digest(profiles, snapshot, policy, texts)
        assert remembered == input_digest(profiles, snapshot, policy)
        assert input_digest(profiles, snapshot, policy, texts) == remembered  # all hits
        texts.forget_unused()
        snapshot = _next_tick(rng, snapshot)


@MEMO
@given(planning_inputs(max_hosts=12))
def test_shared_indexes_change_no_plan(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    rng = random.Random(len(snapshot.hosts) + 1)
    frozen = tuple(profiles)  # shared only for a tuple, as the portfolio passes them
    texts = InputTexts()
    indexes = SharedIndexes()
    for _ in range(3):
        for demand in (snapshot.demand, random_demand(rng, MODEL_NAMES[:5]), ()):
            varied = replace(snapshot, demand=demand)
            shared = plan_placement(frozen, varied, policy, texts=texts, indexes=indexes)
            assert plan_bytes(shared) == plan_bytes(plan_placement(profiles, varied, policy))
        snapshot = _next_tick(rng, snapshot)


def test_forget_unused_drops_only_what_the_last_tick_did_not_read() -> None:
    rng = random.Random(3)
    names = MODEL_NAMES[:3]
    hosts = tuple(random_host(rng, i, names, empty=False) for i in range(4))
    snapshot = FleetSnapshot(now=1_800_000_000.0, hosts=hosts, demand=())
    policy = ControllerPolicy()
    texts = InputTexts()
    input_digest([], snapshot, policy, texts)
    assert texts.forget_unused() == 0  # everything was read
    fewer = replace(snapshot, hosts=hosts[:2])
    input_digest([], fewer, policy, texts)
    assert texts.forget_unused() == 2  # the two hosts no longer planned
    assert input_digest([], fewer, policy, texts) == input_digest([], fewer, policy)
