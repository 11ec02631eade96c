"""``scoring.round6`` is ``round(value, 6)`` bit for bit, sign of zero included.

Its fast path rounds the scaled float instead of converting to decimal; these
properties hold it to ``round`` on any float, and on the values where the fast
path must give way: near halves of the sixth decimal, near zero, beyond its
range, infinities and NaN.
"""

from __future__ import annotations

import math
import struct

from hypothesis import given
from hypothesis import strategies as st

from gridctl.planner.scoring import forget_roundings, round6


def _bits(value: float) -> bytes:
    return struct.pack("<d", value)


def _same_as_round(value: float) -> None:
    forget_roundings()  # the computed path, not a rounding kept from another example
    expected = round(value, 6)
    first = round6(value)
    again = round6(value)  # the kept rounding
    if math.isnan(expected):
        assert math.isnan(first) and math.isnan(again)
    else:
        assert _bits(first) == _bits(expected) == _bits(again)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_any_float_rounds_as_round_does(value: float) -> None:
    _same_as_round(value)


@given(st.floats(min_value=-3000.0, max_value=3000.0))
def test_score_sized_floats_round_as_round_does(value: float) -> None:
    _same_as_round(value)


@given(
    st.integers(min_value=-(2**32), max_value=2**32),
    st.sampled_from((0.5, 0.0, 0.499999, 0.500001)),
    st.integers(min_value=-3, max_value=3),
)
def test_near_halves_of_the_sixth_decimal_round_as_round_does(
    whole: int, part: float, steps: int
) -> None:
    value = (whole + part) / 1e6
    for _ in range(abs(steps)):
        value = math.nextafter(value, math.copysign(math.inf, steps))
    _same_as_round(value)


def test_edge_values_round_as_round_does() -> None:
    for value in (
        0.0,
        -0.0,
        1e-7,
        -1e-7,
        5e-7,
        -5e-7,
        -4.99999e-7,
        1.5e-6,
        2.5e-6,
        -2.5e-6,
        2147.483647,
        2147.4836475,
        -2147.4836485,
        1e300,
        -1e300,
        5e-324,
        math.inf,
        -math.inf,
        math.nan,
    ):
        _same_as_round(value)


def test_ints_round_as_round_does() -> None:
    for value in (0, 1, -3, 10**20):
        forget_roundings()
        assert round6(value) == round(value, 6)
        assert type(round6(value)) is int
