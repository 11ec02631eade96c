"""The class search against the host-by-host search: the same plan, byte for byte.

``plan_placement`` searches equivalent hosts as one class when a fleet's hosts
fall into few classes (``by_class=True`` forces it); ``by_class=False`` keeps
the original host-by-host search. Both must give identical bytes
(assignments, preemptions, shortfalls and every explanation row) on random
fleets, and on fleets made of copies of a few machines, where classes are
large and the class search takes its shortcuts.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.domain import ControllerPolicy, FleetSnapshot, HostSnapshot, ModelProfile
from gridctl.planner import plan_bytes, plan_placement

from .strategies import (
    DOMAINS,
    MODEL_NAMES,
    NOW,
    planning_inputs,
    random_demand,
    random_host,
    random_profiles,
)

pytestmark = pytest.mark.slow  # 1,000 examples of three plans each, twice
Inputs = tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]
DIFFERENTIAL = settings(
    max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def _clone(rng: random.Random, template: HostSnapshot, index: int) -> HostSnapshot:
    """A copy of one machine under a new id, in any domain, usually without residencies."""
    resources = replace(template.resources, failure_domain=rng.choice(DOMAINS))
    residencies = template.residencies if rng.random() < 0.2 else ()
    cached = template.cached if rng.random() < 0.2 else ()
    return replace(
        template,
        host_id=f"c{index:03d}",
        resources=resources,
        residencies=residencies,
        cached=cached,
        failed_attempts=template.failed_attempts if rng.random() < 0.1 else (),
        learned=template.learned if rng.random() < 0.2 else (),
    )


@st.composite
def cloned_fleets(draw: st.DrawFn, max_hosts: int = 60, max_models: int = 6) -> Inputs:
    """Fleets of copies of one to four machines: large classes of equivalent hosts."""
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    names = MODEL_NAMES[: draw(st.integers(1, max_models))]
    templates = [random_host(rng, i, names, empty=False) for i in range(rng.randint(1, 4))]
    count = draw(st.integers(1, max_hosts))
    hosts = tuple(_clone(rng, rng.choice(templates), i) for i in range(count))
    profiles = random_profiles(rng, names, tuple(h.host_id for h in hosts))
    snapshot = FleetSnapshot(now=NOW, hosts=hosts, demand=random_demand(rng, names))
    policy = replace(
        ControllerPolicy(),
        max_evictions_per_plan=draw(st.sampled_from((64, 1, 2))),
        admission_headroom_mb=draw(st.sampled_from((0, 256, 1024))),
    )
    return profiles, snapshot, policy


def _same_plan(inputs: Inputs) -> None:
    profiles, snapshot, policy = inputs
    by_host = plan_bytes(plan_placement(profiles, snapshot, policy, by_class=False))
    by_class = plan_bytes(plan_placement(profiles, snapshot, policy, by_class=True))
    assert by_class == by_host
    assert plan_bytes(plan_placement(profiles, snapshot, policy)) == by_host  # either, by size


@DIFFERENTIAL
@given(cloned_fleets())
def test_class_search_matches_host_search_on_fleets_of_copies(inputs: Inputs) -> None:
    _same_plan(inputs)


@DIFFERENTIAL
@given(planning_inputs())
def test_class_search_matches_host_search_on_random_fleets(inputs: Inputs) -> None:
    _same_plan(inputs)
