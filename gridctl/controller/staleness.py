"""Whether a saved plan still holds: its actions against a re-plan on the live inputs.

A saved plan records what it decided (its actions) and the inputs those
decisions rest on (``gridctl.tick.previewing``). Inputs drift all the
time on a fleet nobody touches: learned request rates decay, timings are
re-measured. Refusing a plan for any drift would make a review loop impossible
(an operator reading a plan for two minutes would always be refused), so the
plan is judged by its decisions: ``gridctl apply`` re-plans on the current
inputs and refuses only when the resulting actions differ, naming each added,
removed or changed action and the inputs that moved under it. Drift that
changes no action is reported as a note. Every refusal begins ``stale plan:``
and says to plan again.

Pure: rows and input blocks in, words out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gridctl.tick.previewing import INPUT_NAMES

MAX_MOVED_ITEMS = 6
MAX_NAMED_ACTIONS = 12
STALE = "stale plan:"
PLAN_AGAIN = "plan again (`gridctl plan --out`) and apply the new plan"

Row = Mapping[str, Any]


def _text(row: Row) -> str:
    return f"{row.get('kind')} {row.get('model_id')} on {row.get('host_id')}"


def _state(row: Row) -> str:
    if row.get("executable"):
        return "executable"
    if row.get("blocked"):
        return f"held: {row['blocked']}"
    return "proposed"


@dataclass(frozen=True)
class ActionChanges:
    """How the re-planned actions differ from the saved plan's, action by action."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    touched: frozenset[str] = field(default_factory=frozenset)  # hosts and models involved

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)

    def lines(self) -> list[str]:
        out = [f"+ {a}" for a in self.added] + [f"- {r}" for r in self.removed]
        out += [f"~ {c}" for c in self.changed]
        if len(out) > MAX_NAMED_ACTIONS:
            out = [*out[:MAX_NAMED_ACTIONS], f"... and {len(out) - MAX_NAMED_ACTIONS} more"]
        return out


def action_changes(saved: Iterable[Row], current: Iterable[Row]) -> ActionChanges:
    """Added, removed and changed actions. An action is matched by id first, then by
    (kind, model, host); a match whose id or state differs is changed."""
    before = {str(r.get("action_id")): r for r in saved}
    after = {str(r.get("action_id")): r for r in current}
    added, removed, changed = [], [], []
    touched: set[str] = set()
    by_work = {_text(r): i for i, r in after.items() if i not in before}
    matched_new: set[str] = set()
    for action_id, old in sorted(before.items(), key=lambda kv: _text(kv[1])):
        new = after.get(action_id)
        if new is None and _text(old) in by_work:
            new_id = by_work[_text(old)]
            new = after[new_id]
            matched_new.add(new_id)
            changed.append(f"{_text(old)}: id {action_id[:12]} is now {new_id[:12]}")
        elif new is None:
            removed.append(f"{_text(old)} ({_state(old)})")
        elif _state(old) != _state(new):
            changed.append(f"{_text(old)}: {_state(old)} -> {_state(new)}")
        else:
            continue
        touched.update((str(old.get("host_id")), str(old.get("model_id"))))
    for action_id, new in sorted(after.items(), key=lambda kv: _text(kv[1])):
        if action_id in before or action_id in matched_new:
            continue
        added.append(f"{_text(new)} ({_state(new)}): {new.get('reason') or 'no reason given'}")
        touched.update((str(new.get("host_id")), str(new.get("model_id"))))
    return ActionChanges(tuple(added), tuple(removed), tuple(changed), frozenset(touched))


def moved_inputs(recorded: Mapping[str, Any], current: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What moved between two ``inputs`` blocks, input by input, with a few lines each."""
    moved = []
    old_lines = recorded.get("lines") or {}
    for name in INPUT_NAMES:
        if (recorded.get("digests") or {}).get(name) == current["digests"][name]:
            continue
        before = set(old_lines.get(name) or [])
        after = set(current["lines"][name])
        moved.append(
            {
                "input": name,
                "added": sorted(after - before)[:MAX_MOVED_ITEMS],
                "removed": sorted(before - after)[:MAX_MOVED_ITEMS],
            }
        )
    return moved


def describe_moved(moved: Sequence[Mapping[str, Any]]) -> list[str]:
    """One line per moved input: ``residencies: +local-1/gemma ready ...; -...``."""
    out = []
    for row in moved:
        parts = [f"+{x}" for x in row.get("added", [])] + [f"-{x}" for x in row.get("removed", [])]
        out.append(f"{row['input']}: {'; '.join(parts) or 'changed'}")
    return out


def moved_under(changes: ActionChanges, moved: Sequence[Mapping[str, Any]]) -> list[str]:
    """The moved inputs that mention a host or model of a changed action (all moved
    inputs when none does: the decision read them as a whole)."""
    named = [
        str(row["input"])
        for row in moved
        if any(
            word in changes.touched
            for line in [*row.get("added", []), *row.get("removed", [])]
            for word in str(line).replace("/", " ").split()
        )
    ]
    return named or [str(row["input"]) for row in moved]


def stale_message(
    changes: ActionChanges, moved: Sequence[Mapping[str, Any]], revision_note: str = ""
) -> str:
    """The refusal: ``stale plan: ...`` naming each changed action and what moved."""
    inputs = moved_under(changes, moved)
    why = f" after {', '.join(inputs)} moved" if inputs else ""
    lines = [f"{STALE} {revision_note}the controller would now act differently{why}; {PLAN_AGAIN}"]
    lines += [f"  {line}" for line in changes.lines()]
    lines += [f"  moved {line}" for line in describe_moved(moved)]
    return "\n".join(lines)


def drift_notes(moved: Sequence[Mapping[str, Any]]) -> list[str]:
    """Inputs that moved without changing any action: told, not refused."""
    if not moved:
        return []
    names = ", ".join(str(row["input"]) for row in moved)
    return [f"{names} moved since the plan was made; no action changed"]


__all__ = [
    "STALE",
    "ActionChanges",
    "action_changes",
    "describe_moved",
    "drift_notes",
    "moved_inputs",
    "moved_under",
    "stale_message",
]
