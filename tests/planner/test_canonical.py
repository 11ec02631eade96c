"""The one-pass canonical text is ``dumps(canonical(value))``, for odd values too.

``canonical_text`` and ``input_digest`` take fast paths for the types the
domain declares; every other value (bools in int fields, ints in float fields,
-0.0, nan and infinities, str and int subclasses, enums of every kind, lists
and sets where tuples are declared, dicts with non-str keys, nested and
non-frozen dataclasses) must give the same text as the plain definition. The
inputs here are real planning inputs with some fields replaced by such values.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from collections import namedtuple
from enum import Enum, IntEnum, StrEnum
from types import MappingProxyType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.domain import ControllerPolicy, FleetSnapshot, HostSnapshot, ModelProfile
from gridctl.planner import input_digest
from gridctl.planner.canonical import InputTexts, canonical, canonical_text, dumps

from .strategies import planning_inputs

ODD = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


class Count(int):
    pass


class Ratio(float):
    pass


class Name(str):
    pass


class Level(IntEnum):
    LOW = 1
    HIGH = 2


class Colour(str, Enum):  # noqa: UP042 - a mixin enum, not a StrEnum, on purpose
    RED = "red"
    BLUE = "blue"


class Tone(StrEnum):
    SOFT = "soft"
    LOUD = "loud"


class Shape(Enum):
    BOX = ("b", "a")  # canonical keeps an enum's value as it is: this list stays unsorted
    DOT = 0.5
    NONE = None


Pair = namedtuple("Pair", "left right")


@dataclasses.dataclass
class Loose:
    """A non-frozen dataclass nested inside frozen inputs."""

    b: object = None
    a: object = 1


@dataclasses.dataclass(frozen=True)
class NotedHost(HostSnapshot):
    """A subclass of a domain type, with one more field."""

    note: object = "noted"


NAN = float("nan")
LEAVES: tuple[object, ...] = (
    *(None, True, False, 0, 1, -1, 2**70, -(2**64), Count(3), Count(0)),
    *(0.0, -0.0, 1.0, 1e16, 1e-7, 5e-324, NAN, float("inf"), -float("inf")),
    *(Ratio(2.5), Ratio(NAN), Ratio(-0.0)),
    *("", "llama.cpp", "é", "\u2028", 'a"b\\c\n\t', "\x00", "\ud800", Name("x"), Name("")),
    *(Level.LOW, Level.HIGH, Colour.RED, Colour.BLUE, Tone.SOFT, Tone.LOUD, *Shape),
)
KEYS = st.sampled_from(
    (
        *("a", "b", "1", "True", "None", Name("a")),
        *(1, 0, -1, True, False, None, 1.0, -0.0, NAN, Level.LOW, Colour.RED, Tone.LOUD, (1, 2)),
    )
)
HASHABLE = st.sampled_from(LEAVES)
ODD_VALUES = st.recursive(
    HASHABLE,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(HASHABLE, max_size=4),
        st.sets(HASHABLE, max_size=4),
        st.builds(Pair, inner, inner),
        st.dictionaries(KEYS, inner, max_size=4),
        st.dictionaries(KEYS, inner, max_size=3).map(MappingProxyType),
        st.builds(Loose, inner, inner),
    ),
    max_leaves=10,
)


def _twisted(value: object, rng: random.Random, pool: list[object], depth: int = 0) -> object:
    """``value`` with some fields (at any depth) replaced by values from ``pool``."""
    if isinstance(value, tuple) and depth < 4:
        items = [_twisted(v, rng, pool, depth + 1) for v in value]
        roll = rng.random()
        if roll < 0.05:
            return list(items)
        if roll < 0.08:
            return set(items) if all(_hashable(v) for v in items) else items
        return tuple(items)
    if not dataclasses.is_dataclass(value) or isinstance(value, type) or depth >= 4:
        return value
    changes: dict[str, object] = {}
    for f in dataclasses.fields(value):
        current = getattr(value, f.name)
        if rng.random() < 0.12:
            changes[f.name] = rng.choice(pool)
        elif isinstance(current, tuple) or dataclasses.is_dataclass(current):
            changes[f.name] = _twisted(current, rng, pool, depth + 1)
    if isinstance(value, HostSnapshot) and rng.random() < 0.1:
        fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        return NotedHost(**{**fields, **changes}, note=rng.choice(pool))
    return dataclasses.replace(value, **changes)


def _hashable(value: object) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


@st.composite
def odd_inputs(draw: st.DrawFn) -> tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy]:
    profiles, snapshot, policy = draw(planning_inputs(max_hosts=5, max_models=4))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    pool = [*LEAVES, *draw(st.lists(ODD_VALUES, min_size=1, max_size=6))]
    twisted = [_twisted(p, rng, pool) for p in profiles]
    fleet = _twisted(snapshot, rng, pool)
    if rng.random() < 0.3:
        fleet = dataclasses.replace(fleet, extras={"loose": Loose(rng.choice(pool)), 7: pool[-1]})
    return twisted, fleet, _twisted(policy, rng, pool)  # type: ignore[return-value]


@ODD
@given(odd_inputs())
def test_canonical_text_is_the_sorted_json_of_odd_inputs(
    inputs: tuple[list[ModelProfile], FleetSnapshot, ControllerPolicy],
) -> None:
    profiles, snapshot, policy = inputs
    hosts = snapshot.hosts if isinstance(snapshot.hosts, (tuple, list)) else ()
    for value in (snapshot, policy, list(profiles), tuple(profiles), *hosts):
        assert canonical_text(value) == dumps(canonical(value))
    whole = {"policy": policy, "profiles": list(profiles), "snapshot": snapshot}
    expected = hashlib.sha256(dumps(canonical(whole)).encode("ascii")).hexdigest()
    assert input_digest(profiles, snapshot, policy) == expected
    texts = InputTexts()
    assert input_digest(profiles, snapshot, policy, texts) == expected
    assert input_digest(tuple(profiles), snapshot, policy, texts) == expected  # remembered


@ODD
@given(ODD_VALUES)
def test_canonical_text_of_odd_values(value: object) -> None:
    assert canonical_text(value) == dumps(canonical(value))
    assert InputTexts().text(value) == dumps(canonical(value))


def test_every_field_of_every_input_type_takes_every_odd_value() -> None:
    from gridctl.domain import (
        CachedArtifact,
        DataTier,
        HostResources,
        LearnedOnHost,
        ModelDemand,
        Residency,
        ResidencyState,
    )
    from gridctl.domain.profiles import Artifact

    resources = HostResources(capacity_mb=1024)
    bases: tuple[object, ...] = (
        resources,
        HostSnapshot("h", resources),
        Residency("m", 1024, ResidencyState.READY),
        CachedArtifact("m"),
        LearnedOnHost("m"),
        ModelDemand("m"),
        FleetSnapshot(now=1.0),
        ModelProfile("m", 1024),
        Artifact(),
        ControllerPolicy(),
    )
    tiers = tuple(DataTier)
    odd = (
        *(*LEAVES, [], ["b", "a"], {"b", "a"}, (), ("b", "a"), {}, {1: 2, "1": 3}, Loose()),
        *(("x",), (Name("x"),), (1,), (True,), (Tone.SOFT,), (Level.LOW,), (NAN,)),
        *(tiers, tuple(reversed(tiers)), tiers[:3], (*tiers[:3], Name("restricted"))),
        tuple(t.value for t in tiers),  # equal to the members, not them
    )
    for base in bases:
        for f in dataclasses.fields(base):  # type: ignore[arg-type]
            for value in odd:
                changed = dataclasses.replace(base, **{f.name: value})  # type: ignore[type-var]
                assert canonical_text(changed) == dumps(canonical(changed)), (f.name, value)
