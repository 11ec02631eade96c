"""Applied plans: what an approval covers, and when it ends.

In recommend mode ``gridctl apply PLAN.json`` approves exactly the plan's action
ids (``gridctl.controller.applying``). The approval is an operator override of
git ("recommend: proposals only"), so status, ``gridctl diff`` and the
dashboard list it while it is in force, and it must end on its own: an
override nobody can see the end of is a phantom that makes every later
``gridctl diff`` report drift.

An approval is in force only while all of these hold; the first tick that finds
one broken forgets it durably, with an event saying why:

- it approved at least one action (a plan with no actions approves nothing);
- the effective mode is still recommend (``gridctl mode``/``--clear`` supersede it);
- the revision in force is still the plan's (a new commit supersedes it);
- at least one approved action is still proposed, held or pending (otherwise
  every one has executed or been superseded by the controller's own decisions).

``gridctl apply --cancel`` withdraws it at once. The same rules decide what
status shows before a tick has run, so a restart never shows an approval the
next tick would drop.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gridctl.domain import Mode

APPLIED_PLAN_KEY = "applied_plan"  # store override: a saved plan applied in recommend mode
CANCEL_HOW = "gridctl apply --cancel"


@dataclass(frozen=True)
class AppliedPlan:
    """The stored approval of one saved plan applied in recommend mode."""

    revision: str
    action_ids: frozenset[str]
    applied_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "revision": self.revision,
            "action_ids": sorted(self.action_ids),
            "applied_at": self.applied_at,
        }


def applied_plan(overrides: Mapping[str, Any]) -> AppliedPlan | None:
    """The stored approval, or None (never stored, forgotten, or unreadable)."""
    record = overrides.get(APPLIED_PLAN_KEY)
    if not isinstance(record, dict) or not isinstance(record.get("revision"), str):
        return None
    ids = record.get("action_ids")
    applied_at = record.get("applied_at")
    return AppliedPlan(
        revision=record["revision"],
        action_ids=frozenset(str(i) for i in ids) if isinstance(ids, list) else frozenset(),
        applied_at=float(applied_at) if isinstance(applied_at, (int, float)) else None,
    )


def superseded_by(plan: AppliedPlan, revision: str | None, mode: Mode) -> str | None:
    """Why ``plan`` no longer approves anything under this revision and mode, or None."""
    if not plan.action_ids:
        return "it approved no action"
    if mode is not Mode.RECOMMEND:
        return f"superseded: the controller's mode is now {mode.value}"
    if revision != plan.revision:
        return (
            f"superseded: revision {(revision or 'none')[:12]} is in force, the plan was for "
            f"{plan.revision[:12]}"
        )
    return None


def approved_ids(plan: AppliedPlan | None, revision: str | None, mode: Mode) -> frozenset[str]:
    """The action ids an approval makes executable now (empty when none is in force)."""
    if plan is None or superseded_by(plan, revision, mode) is not None:
        return frozenset()
    return plan.action_ids


def ended_after_tick(
    plan: AppliedPlan | None,
    revision: str,
    mode: Mode,
    seen: frozenset[str],
    outstanding: Iterable[str],
    executed: Iterable[str],
) -> str | None:
    """Why the tick that just ran ends ``plan``, or None while it still has work.

    ``seen``: the ids the tick ran with (an approval stored after it gathered its
    inputs is judged by the next tick); ``outstanding``: ids the tick proposed, held
    or left pending; ``executed``: ids with a finished history entry.
    """
    if plan is None:
        return None
    superseded = superseded_by(plan, revision, mode)
    if superseded is not None:
        return superseded
    if plan.action_ids != seen:
        return None
    if plan.action_ids & set(outstanding):
        return None
    done = len(plan.action_ids & set(executed))
    rest = len(plan.action_ids) - done
    return f"every approved action finished: {done} executed, {rest} superseded or already done"


def override_row(plan: AppliedPlan | None, revision: str | None, mode: Mode) -> dict[str, Any]:
    """The ``ownership.overrides`` row of an approval in force; empty when none is."""
    ids = approved_ids(plan, revision, mode)
    if plan is None or not ids:
        return {}
    return {
        "field": "actions",
        "owner": "operator",
        "git": "recommend: proposals only",
        "value": f"{len(ids)} action(s) of the plan applied at revision "
        f"{plan.revision[:12]} executable until they run",
        "how": CANCEL_HOW,
    }


__all__ = [
    "APPLIED_PLAN_KEY",
    "CANCEL_HOW",
    "AppliedPlan",
    "applied_plan",
    "approved_ids",
    "ended_after_tick",
    "override_row",
    "superseded_by",
]
