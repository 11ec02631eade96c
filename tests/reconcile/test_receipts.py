"""Acknowledgement rules: duplicates harmless, late completion once, conflicts ignored."""

from __future__ import annotations

import pytest

from gridctl.domain import ReceiptStatus as S
from gridctl.reconcile import AckOutcome as O
from gridctl.reconcile import judge_acknowledgement


@pytest.mark.parametrize(
    ("current", "acknowledged", "incoming", "outcome", "status"),
    [
        (None, False, S.ACCEPTED, O.APPLIED, S.ACCEPTED),
        (None, False, S.SUCCEEDED, O.APPLIED, S.SUCCEEDED),
        (S.RUNNING, False, S.RUNNING, O.DUPLICATE, S.RUNNING),
        (S.RUNNING, False, S.ACCEPTED, O.DUPLICATE, S.RUNNING),
        (S.RUNNING, False, S.FAILED, O.APPLIED, S.FAILED),
        (S.SUCCEEDED, True, S.SUCCEEDED, O.DUPLICATE, S.SUCCEEDED),
        (S.SUCCEEDED, True, S.FAILED, O.CONFLICT_IGNORED, S.SUCCEEDED),
        (S.FAILED, True, S.SUCCEEDED, O.CONFLICT_IGNORED, S.FAILED),
        # a late success or failure may complete an action the controller cancelled
        (S.CANCELLED, False, S.SUCCEEDED, O.COMPLETED_LATE, S.SUCCEEDED),
        (S.CANCELLED, False, S.FAILED, O.COMPLETED_LATE, S.FAILED),
        (S.CANCELLED, False, S.RUNNING, O.DUPLICATE, S.CANCELLED),
        (S.CANCELLED, False, S.CANCELLED, O.APPLIED, S.CANCELLED),
        # once the node itself said cancelled, a later success conflicts
        (S.CANCELLED, True, S.SUCCEEDED, O.CONFLICT_IGNORED, S.CANCELLED),
    ],
)
def test_acknowledgement_table(
    current: S | None, acknowledged: bool, incoming: S, outcome: O, status: S
) -> None:
    decision = judge_acknowledgement(current, incoming, acknowledged=acknowledged)
    assert (decision.outcome, decision.status) == (outcome, status)


def test_after_a_late_completion_a_conflicting_acknowledgement_is_ignored() -> None:
    late = judge_acknowledgement(S.CANCELLED, S.SUCCEEDED, acknowledged=False)
    assert late.acknowledged
    again = judge_acknowledgement(late.status, S.FAILED, acknowledged=late.acknowledged)
    assert again.outcome is O.CONFLICT_IGNORED and not again.changed
