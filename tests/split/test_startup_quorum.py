"""Quorum is a strict majority of the planned stage count."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.split import quorum, quorum_reached


@pytest.mark.parametrize(
    "planned, needed", [(0, 1), (1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (10, 6)]
)
def test_quorum_is_half_plus_one(planned: int, needed: int) -> None:
    assert quorum(planned) == needed


def test_documented_examples() -> None:
    assert quorum(3) == 2
    assert quorum(4) == 3


def test_negative_stage_count_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="planned_stage_count"):
        quorum(-1)


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=1000))
def test_two_disjoint_groups_can_never_both_reach_quorum(planned: int) -> None:
    for first in range(planned + 1):
        assert not (quorum_reached(planned, first) and quorum_reached(planned, planned - first))
