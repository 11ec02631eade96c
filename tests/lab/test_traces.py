"""Workload traces: accepted and mapped, or refused with the line that is wrong."""

from __future__ import annotations

import math

import pytest

from gridctl.lab.traces import MAX_TRACE_ROWS, TraceError, parse_trace, trace_curve
from gridctl.lab.workday import builtin_curve

LIMIT = 5 * 1024 * 1024


def test_a_burst_is_accepted_and_its_mean_normalised_to_the_builtin_curve() -> None:
    rows = [f"{t},{100.0 if 40 <= t < 50 else 1.0},ignored" for t in range(0, 120)]
    trace = parse_trace("coding", "burst.csv", "\n".join(rows).encode(), LIMIT)
    builtin = builtin_curve("coding", 60)
    curve = trace_curve(trace, builtin)
    assert len(curve) == 60
    assert math.isclose(sum(curve) / 60, sum(builtin) / 60)
    peak = max(range(60), key=lambda m: curve[m])
    assert 18 <= peak <= 26  # the burst sits a third of the way into the day, as in the trace
    assert max(curve) > 10 * min(curve)


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("0,1\n10,2\n10,3\n", 3, "not after"),
        ("0,1\n10,2\n5,3\n", 3, "not after"),
        ("0,1\n10,-2\n", 2, "negative"),
        ("0,1\n10,nan\n", 2, "not finite"),
        ("0,1\n10,inf\n", 2, "not finite"),
        ("0,1\nabc,1\n", 2, "not a number"),
        ("0,1\n10\n", 2, "timestamp and a rate"),
    ],
)
def test_bad_rows_are_refused_with_their_line(text: str, line: int, words: str) -> None:
    with pytest.raises(TraceError) as info:
        parse_trace("coding", "bad.csv", text.encode(), LIMIT)
    assert info.value.line == line
    assert words in info.value.message
    assert str(info.value).startswith(f"bad.csv:{line}:")


def test_more_than_the_row_limit_is_refused_at_the_first_extra_row() -> None:
    text = "\n".join(f"{t},1" for t in range(MAX_TRACE_ROWS + 1))
    with pytest.raises(TraceError) as info:
        parse_trace("coding", "long.csv", text.encode(), 10 * LIMIT)
    assert info.value.line == MAX_TRACE_ROWS + 1
    assert parse_trace(
        "coding", "ok.csv", "\n".join(f"{t},1" for t in range(MAX_TRACE_ROWS)).encode(), 10 * LIMIT
    )


def test_more_than_the_byte_limit_is_refused() -> None:
    with pytest.raises(TraceError, match="limit is 64"):
        parse_trace("coding", "big.csv", b"0,1\n" * 100, 64)


def test_an_empty_or_all_zero_trace_is_refused() -> None:
    with pytest.raises(TraceError, match="no rows"):
        parse_trace("coding", "empty.csv", b"\n\n", LIMIT)
    with pytest.raises(TraceError, match="every rate is zero"):
        parse_trace("coding", "zero.csv", b"0,0\n1,0\n", LIMIT)
