"""How many planned stages must accept a claim before a split may load.

Quorum is a strict majority of the *planned* stage count, not of the stages
that happened to answer: a coordinator that reaches one of three stages must
stay out, so two partitions can never both load the same split.
"""

from __future__ import annotations


def quorum(planned_stage_count: int) -> int:
    """``planned_stage_count // 2 + 1``: 2 of 3, 3 of 4, 3 of 5."""
    if planned_stage_count < 0:
        raise ValueError(f"planned_stage_count must be >= 0, got {planned_stage_count}")
    return planned_stage_count // 2 + 1


def quorum_reached(planned_stage_count: int, accepted_count: int) -> bool:
    """Whether ``accepted_count`` accepts are enough to load the planned split."""
    return accepted_count >= quorum(planned_stage_count)
