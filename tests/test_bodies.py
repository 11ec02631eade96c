"""Bounded body reading and strict JSON parsing (``gridctl.bodies``)."""

from __future__ import annotations

import pytest

from gridctl.bodies import MAX_JSON_DEPTH, nested_deeper_than, parse_json
from gridctl.errors import WireError


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def test_depth_at_the_limit_parses_and_one_more_is_refused() -> None:
    assert nested_deeper_than(parse_json(nested(MAX_JSON_DEPTH)), MAX_JSON_DEPTH) is False
    with pytest.raises(WireError, match=f"deeper than {MAX_JSON_DEPTH}"):
        parse_json(nested(MAX_JSON_DEPTH + 1))


def test_nesting_past_the_interpreter_limit_is_a_wire_error_not_recursion() -> None:
    with pytest.raises(WireError, match="deeper than"):
        parse_json(b'{"a":' * 200_000 + b"1" + b"}" * 200_000)


def test_objects_and_arrays_both_count_towards_depth() -> None:
    body = b'{"a":[{"b":[1]}]}'
    assert parse_json(body, max_depth=4) == {"a": [{"b": [1]}]}
    with pytest.raises(WireError):
        parse_json(body, max_depth=3)


@pytest.mark.parametrize("constant", [b"NaN", b"Infinity", b"-Infinity"])
def test_non_json_numbers_are_refused(constant: bytes) -> None:
    with pytest.raises(WireError, match="not a JSON number"):
        parse_json(b'{"x": ' + constant + b"}")


def test_empty_body_is_the_callers_default_and_garbage_names_the_problem() -> None:
    assert parse_json(b"", empty={}) == {}
    with pytest.raises(WireError, match="not valid JSON"):
        parse_json(b"\xff\xfe{")
