"""Bounded body reading and strict JSON parsing (``gridctl.bodies``)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.bodies import (
    MAX_INTEGER_DIGITS,
    MAX_JSON_DEPTH,
    _decode_strictly,
    nested_deeper_than,
    parse_json,
)
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


@pytest.mark.parametrize(
    "literal",
    [b"1" + b"0" * MAX_INTEGER_DIGITS, b"-" + b"9" * 400, b"1" * 4301, b"7" * 100_000],
)
def test_integer_literals_past_the_limit_are_refused(literal: bytes) -> None:
    with pytest.raises(WireError, match="integer literal"):
        parse_json(b'{"capacity_mb": ' + literal + b"}")
    assert parse_json(b"[" + b"9" * MAX_INTEGER_DIGITS + b"]") == [int("9" * MAX_INTEGER_DIGITS)]


@pytest.mark.parametrize("literal", [b"1e400", b"-1e400", b"1" + b"0" * 400 + b".0", b"2e308"])
def test_float_literals_that_overflow_are_refused(literal: bytes) -> None:
    with pytest.raises(WireError, match="out of range"):
        parse_json(b"[" + literal + b"]")
    assert parse_json(b"[1e308, 5e-324, 1e-400]") == [1e308, 5e-324, 0.0]


@pytest.mark.parametrize(
    "text", [b'"\\ud800"', b'"a\\uDFFF"', b'{"\\udbff": 1}', b'"\\ude00\\ud83d"']
)
def test_lone_surrogates_are_refused_and_pairs_are_text(text: bytes) -> None:
    with pytest.raises(WireError, match="lone surrogate"):
        parse_json(b"[" + text + b"]")
    assert parse_json(b'["\\ud83d\\ude00"]') == ["\U0001f600"]
    with pytest.raises(WireError, match="not valid JSON"):
        parse_json(b'["\xed\xa0\x80"]')  # a surrogate encoded as raw bytes is not UTF-8


def test_empty_body_is_the_callers_default_and_garbage_names_the_problem() -> None:
    assert parse_json(b"", empty={}) == {}
    with pytest.raises(WireError, match="not valid JSON"):
        parse_json(b"\xff\xfe{")


def depth_of(value: Any) -> int:
    """Nesting depth by plain recursion (the values here are shallow)."""
    if isinstance(value, dict):
        return 1 + max((depth_of(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth_of(v) for v in value), default=0)
    return 0


json_values = st.recursive(
    st.none()
    | st.integers(-(10**MAX_INTEGER_DIGITS) + 1, 10**MAX_INTEGER_DIGITS - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet='[]{}ab"\\', max_size=6),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=30,
)


@settings(max_examples=300, deadline=None)
@given(value=json_values, limit=st.integers(min_value=0, max_value=8))
def test_depth_is_refused_exactly_past_the_limit(value: Any, limit: int) -> None:
    """Brackets inside strings count towards no depth; the walk and the parse agree with
    a plain recursive measure whatever the shape."""
    deep = depth_of(value) > limit
    assert nested_deeper_than(value, limit) is deep
    body = json.dumps(value).encode()
    if deep:
        with pytest.raises(WireError, match="deeper than"):
            parse_json(body, max_depth=limit)
    else:
        assert parse_json(body, max_depth=limit) == value


@settings(max_examples=200, deadline=None)
@given(
    value=json_values,
    encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "utf-32-be"]),
)
def test_bodies_decode_as_json_loads_does(value: Any, encoding: str) -> None:
    """Any encoding ``json.loads`` detects on bytes is read the same way."""
    body = json.dumps(value, ensure_ascii=False).encode(encoding)
    assert parse_json(body, max_depth=64) == json.loads(body)


TOKENS = [
    b"{", b"}", b"[", b"]", b'"', b"\\", b":", b",", b"0", b"1", b"9", b"-", b".", b"e",
    b"E", b"+", b"a", b"u", b"d", b"8", b" ", b"\t", b"\n", b"\r", b"\x0c", b"\x00",
    b"\x1f", b"\xff", b"\xc3\xa9", b"\xed\xa0\x80", b"\xef\xbb\xbf", b"true", b"false",
    b"null", b"NaN", b"Infinity", b"\\u", b"\\ud800", b"\\udc00", b"\\u0000", b"9" * 18,
    b"1" * 19, b"18446744073709551616", b"1e400", b"1e-400", b'{"a": 1}', b"[1, 2.5]",
]  # fmt: skip


def outcome(decode: Any, body: bytes) -> tuple[str, Any]:
    try:
        return ("value", decode(body))
    except WireError as exc:
        return ("refused", str(exc))


@settings(max_examples=3000, deadline=None)
@given(
    body=st.one_of(
        st.lists(st.sampled_from(TOKENS), max_size=24).map(b"".join),
        json_values.map(lambda v: json.dumps(v, ensure_ascii=False).encode()),
        st.integers(-(10**25), 10**25).map(lambda n: str(n).encode()),
        st.floats(allow_nan=False).map(lambda f: repr(f).encode()),
    )
)
def test_the_fast_decoder_answers_as_the_strict_one_does(body: bytes) -> None:
    """Whatever orjson takes, it reads as the strict decoder does: the same value, or
    the same refusal (the strict decoder's own words)."""
    fast = outcome(parse_json, body)
    if not body:
        assert fast == ("value", None)  # no body: the caller's default
        return
    strict = outcome(lambda b: _decode_strictly(b, "deeper"), body)
    if strict[0] == "refused":
        assert fast[0] == "refused", (body, fast)
        return
    if fast[0] == "refused":  # a check after decoding (a lone surrogate), both paths
        assert not any(
            word in fast[1] for word in ("not valid JSON", "not a JSON number", "out of range")
        ), (body, fast)
        return
    assert fast == strict, body
    assert type(fast[1]) is type(strict[1]), body
