"""``Assignment`` defines its own ``__init__`` (a frozen dataclass's generated one is slow):
it must take exactly the dataclass fields, in order, with their defaults, set every one,
and leave the instance as frozen, comparable and hashable as the generated one would."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from gridctl.domain import Assignment, DemandClass


def test_init_takes_exactly_the_fields_in_order_with_their_defaults() -> None:
    parameters = list(inspect.signature(Assignment.__init__).parameters.values())[1:]
    fields = dataclasses.fields(Assignment)
    assert [p.name for p in parameters] == [f.name for f in fields]
    for parameter, field in zip(parameters, fields, strict=True):
        default = field.default
        expected = inspect.Parameter.empty if default is dataclasses.MISSING else default
        assert parameter.default == expected, field.name


FIELDS: dict[str, object] = {
    "model_id": "m",
    "host_id": "h",
    "runtime": "llama.cpp",
    "memory_mb": 512,
    "reason": "baseline replica 1 of 1",
    "demand_class": DemandClass.BASELINE,
    "priority": 3,
    "existing": True,
}


def _one(**changes: object) -> Assignment:
    return Assignment(**{**FIELDS, **changes})  # type: ignore[arg-type]


def test_every_field_is_set_and_the_instance_stays_frozen() -> None:
    a = _one()
    assert dataclasses.asdict(a) == FIELDS
    assert Assignment("m", "h", "r", 1, "x", DemandClass.DIRECT, 0).existing is False
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.memory_mb = 1  # type: ignore[misc]


def test_equality_hash_and_replace_behave_as_a_frozen_dataclass() -> None:
    a = _one()
    assert a == _one() and hash(a) == hash(_one())
    assert a != _one(priority=4)
    moved = dataclasses.replace(a, host_id="other")
    assert moved.host_id == "other" and moved.model_id == "m" and a.host_id == "h"
