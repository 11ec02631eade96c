"""What an operator request will do, in words, for the confirmation dialogs. Pure.

A confirmation that only says "are you sure?" teaches operators to press y.
These texts name the consequence against the current view: the mode that
will take effect, whether it drifts from git, and how many executable actions
a tick could deliver.
"""

from __future__ import annotations

from dataclasses import dataclass

from gridctl.tui.viewmodel import DashboardView

CLEAR = "clear"
MODES = ("observe", "recommend", "automatic")
MODE_MEANINGS = {
    "observe": "plan and record drift only; no actions are proposed or executed",
    "recommend": "actions are proposed but none is executed (the kill switch for new "
    "automatic work)",
    "automatic": "the controller EXECUTES load, warm, drain and unload actions within its "
    "mutation governors",
}


@dataclass(frozen=True)
class OperatorRequest:
    """One confirmed request: ``kind`` is ``mode`` or ``tick``; ``choice`` a mode or ``clear``."""

    kind: str
    choice: str = ""
    title: str = ""
    consequence: str = ""


def mode_request(view: DashboardView | None, choice: str) -> OperatorRequest:
    desired = view.mode.desired if view else "unknown"
    current = view.mode.effective if view else "unknown"
    if choice == CLEAR:
        meaning = MODE_MEANINGS.get(desired, "as git declares")
        return OperatorRequest(
            kind="mode",
            choice=CLEAR,
            title="Clear the operator mode override?",
            consequence=(
                f"The mode returns to what git declares: {desired} (now {current}). "
                f"In {desired} mode {meaning}."
            ),
        )
    drift = (
        f"Git declares {desired}, so this is an override shown as drift until cleared; "
        "later commits will not change it."
        if choice != desired
        else "This matches git, but is still recorded as an operator override until cleared."
    )
    return OperatorRequest(
        kind="mode",
        choice=choice,
        title=f"Set the mode to {choice}?",
        consequence=f"Now {current}. In {choice} mode {MODE_MEANINGS[choice]}. {drift}",
    )


def tick_request(view: DashboardView | None) -> OperatorRequest:
    mode = view.mode.effective if view else "unknown"
    if mode == "automatic" and view is not None:
        effect = (
            f"In automatic mode this may deliver commands to hosts at once "
            f"({view.executable_actions} executable action(s) in the last reconciliation)."
        )
    else:
        effect = f"In {mode} mode nothing is executed; the plan and proposals are refreshed."
    return OperatorRequest(
        kind="tick",
        title="Run a reconciliation pass now?",
        consequence=f"The controller plans against the current fleet immediately. {effect}",
    )
