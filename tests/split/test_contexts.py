"""Context candidates: native first, then powers of two down to the (capped) 64k floor."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.split import context_candidates, context_floor
from gridctl.split.contexts import override_problem


@pytest.mark.parametrize(
    "native, expected",
    [
        (262_144, (262_144, 131_072, 65_536)),
        (200_000, (200_000, 131_072, 65_536)),
        (131_072, (131_072, 65_536)),
        (65_536, (65_536,)),
        (100_000, (100_000, 65_536)),
        (32_768, (32_768,)),  # floor capped at native
        (40_000, (40_000,)),
        (1, (1,)),
    ],
)
def test_candidates(native: int, expected: tuple[int, ...]) -> None:
    assert context_candidates(native) == expected


def test_floor_is_64k_capped_at_native() -> None:
    assert context_floor(262_144) == 65_536
    assert context_floor(8_192) == 8_192


@pytest.mark.parametrize(
    "native, requested, problem",
    [
        (262_144, 262_145, "context_exceeds_native"),
        (262_144, 65_535, "context_below_minimum"),
        (262_144, 65_536, None),
        (262_144, 100_000, None),  # overrides need not be powers of two
        (262_144, 262_144, None),
        (32_768, 32_768, None),
        (32_768, 16_384, "context_below_minimum"),
        (32_768, 65_536, "context_exceeds_native"),
    ],
)
def test_override_validation(native: int, requested: int, problem: str | None) -> None:
    assert override_problem(native, requested) == problem


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=1, max_value=4_000_000))
def test_candidates_descend_from_native_to_the_floor(native: int) -> None:
    candidates = context_candidates(native)
    assert candidates[0] == native
    assert all(high > low for high, low in pairwise(candidates))
    assert all(context_floor(native) <= c <= native for c in candidates)
    assert all(c & (c - 1) == 0 for c in candidates[1:])
    # No power of two between the floor and native is skipped.
    below = candidates[-1] // 2
    assert below < context_floor(native) or below == 0
