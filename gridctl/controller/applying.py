"""Saved plans (``gridctl plan --out``) and applying exactly one, or refusing.

A saved plan carries the candidate desired state, the actions the controller's
dry run returned for it, and that dry run's inputs (``gridctl.controller.
previewing``: readable lines and a digest per input, everything the tick reads
but the clock). ``POST /allocator/apply`` runs the same dry run again on the
live inputs and compares decisions, not numbers (``gridctl.controller.
staleness``): when the actions it would take differ, the apply is refused as
``stale plan:`` naming each changed action and the inputs that moved under
it; drift that changes no action is accepted with a note.

Otherwise, in recommend mode the plan's action ids — and nothing else — become
executable (the tick decides them as in automatic mode, through every safety
gate and the governor; every other proposal stays held as
``not_in_applied_plan``) until they have run, been superseded or been
cancelled (``gridctl.controller.appliedplans``); in automatic mode the plan's
revision is pinned as the one in force (adopted by a controller without a
watched source; a watched source keeps its own revision). Applying never
issues a command itself: the tick that follows does.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from gridctl.config import check_directory
from gridctl.config.loading import YAML_SUFFIXES
from gridctl.config.revision import content_digest
from gridctl.config.schemas import fill_defaults
from gridctl.config.yamlsource import parse_yaml
from gridctl.controller.appliedplans import APPLIED_PLAN_KEY, AppliedPlan, applied_plan
from gridctl.controller.desired import ApiDesired
from gridctl.controller.documents import ExplainQuery, check_known
from gridctl.controller.snapshotting import snapshot_document
from gridctl.controller.staleness import (
    STALE,
    action_changes,
    drift_notes,
    moved_inputs,
    stale_message,
)
from gridctl.domain import DesiredState, Mode
from gridctl.errors import WireError
from gridctl.reconcile import PendingAction, action_to_json
from gridctl.reconcile.records import HistoryEntry
from gridctl.tick.previewing import outcome_document

if TYPE_CHECKING:
    from gridctl.controller.control import Controller

PLAN_FORMAT = "gridctl.plan/v1"
MAX_FILES = 512


# -- the controller side -------------------------------------------------------------


def _pending_row(held: PendingAction) -> dict[str, Any]:
    row = action_to_json(held.action)
    row.update(
        runtime=held.action.runtime,
        created_at=held.action.created_at,
        delivered=held.delivered,
        delivered_at=held.delivered_at,
        demand_class=held.demand_class.value if held.demand_class else None,
        restored=held.restored,
        queued=held.queued,
    )
    return row


def _history_row(entry: HistoryEntry) -> dict[str, Any]:
    return {
        "action_id": entry.action_id,
        "kind": entry.kind.value,
        "host_id": entry.host_id,
        "model_id": entry.model_id,
        "artifact_sha256": entry.artifact_sha256,
        "attempt": entry.attempt,
        "status": entry.status.value,
        "finished_at": entry.finished_at,
        "observed_at": entry.observed_at,
        "acknowledged": entry.acknowledged,
    }


def dry_run_document(
    ctl: Controller, candidate: DesiredState | None = None, explain: ExplainQuery | None = None
) -> dict[str, Any]:
    """The tick's decision for ``candidate`` (default: the revision in force), unpersisted;
    every host's row only for the models ``explain`` asks for."""
    inputs, outcome = ctl.dry_run(candidate)
    query = explain or ExplainQuery()
    check_known(query, [p.name for p in inputs.desired.profiles])
    document = outcome_document(inputs, outcome, query.models, explain_all=query.every)
    document["source"] = ctl.desired.status().get("source")
    override = ctl.steering.override()
    document["mode_override"] = override.mode.value if override else None
    return document


def candidate_from_body(ctl: Controller, body: Any) -> DesiredState | None:
    """``POST /allocator/dry-run``'s candidate: ``desired.files`` loaded all or nothing
    (``WireError`` naming the first problem), or None for the revision in force."""
    if body is None:
        return None
    if not isinstance(body, dict):
        raise WireError('body must be an object: {} or {"desired": {"files": ...}}')
    desired = body.get("desired")
    if desired is None:
        return None
    if not isinstance(desired, dict):
        raise WireError("desired must be an object", "/desired")
    revision = desired.get("revision")
    if revision is not None and not isinstance(revision, str):
        raise WireError("desired.revision must be a string", "/desired/revision")
    files = _checked_files(desired.get("files"))
    state, _ = desired_from_files(files, revision or "", bool(desired.get("dirty", True)))
    if not revision:
        state = replace(state, revision=content_digest(sorted(files.items())))
    return state


def plan_inputs_document(ctl: Controller, history_limit: int = 500) -> dict[str, Any]:
    """``GET /allocator/snapshot``: the observation plus what a dry run needs to be exact."""
    document = snapshot_document(ctl)
    override = ctl.steering.override()
    mode, _ = ctl.effective_mode()
    desired = ctl.current_desired()
    document["pending_actions"] = [_pending_row(p) for p in ctl.store.pending()]
    document["history"] = [_history_row(h) for h in ctl.store.history(limit=history_limit)]
    document["inputs"] = dry_run_document(ctl)["inputs"] if desired is not None else None
    document["controller"] = {
        "desired_revision": desired.revision if desired else None,
        "watch": not isinstance(ctl.desired, ApiDesired),
        "effective_mode": mode.value,
        "mode_override": override.mode.value if override else None,
    }
    return document


def _checked_files(files: Any) -> dict[str, str]:
    if not isinstance(files, dict) or not files or len(files) > MAX_FILES:
        raise WireError(
            "desired.files must map 1-512 relative YAML paths to text", "/desired/files"
        )
    for name, text in files.items():
        path = PurePosixPath(name)
        bad = path.is_absolute() or ".." in path.parts or path.suffix not in YAML_SUFFIXES
        if bad or not isinstance(text, str):
            raise WireError(f"bad desired file {name!r}", "/desired/files")
    return files


def desired_from_files(
    files: dict[str, str], revision: str, dirty: bool
) -> tuple[DesiredState, dict[str, dict[str, Any]]]:
    """Load a saved plan's YAML exactly as a watched directory would (all or nothing)."""
    with tempfile.TemporaryDirectory(prefix="gridctl-apply-") as tmp:
        root = Path(tmp)
        for name, text in files.items():
            target = root / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        report = check_directory(root)
    if report.state is None:
        first = report.errors[0] if report.errors else None
        problem = first.render() if first else "no document could be loaded"
        raise WireError(f"the plan's desired state is invalid: {problem}")
    profiles: dict[str, dict[str, Any]] = {}
    for name, text in sorted(files.items()):
        documents, _ = parse_yaml(text, name)
        for doc in documents:
            data = doc.data
            if isinstance(data, dict) and data.get("kind") == "ModelProfile":
                filled = fill_defaults(data, "model-profile.schema.json")
                profiles[filled["metadata"]["name"]] = filled
    state = DesiredState(
        revision=revision,
        dirty=dirty,
        profiles=report.state.profiles,
        policy=report.state.policy,
        catalog=report.state.catalog,
        fleets=report.state.fleets,
        documents=report.state.documents,
    )
    return state, profiles


def _plan_fields(body: Any) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    if not isinstance(body, dict) or body.get("format") != PLAN_FORMAT:
        raise WireError(f"not a saved plan: format must be {PLAN_FORMAT!r}", "/format")
    desired = body.get("desired")
    if not isinstance(desired, dict) or not isinstance(desired.get("revision"), str):
        raise WireError("desired.revision is required", "/desired/revision")
    actions = body.get("actions")
    if not isinstance(actions, list):
        raise WireError("actions must be a list", "/actions")
    inputs = body.get("inputs")
    if inputs is not None and not isinstance(inputs, dict):
        raise WireError("inputs must be an object", "/inputs")
    return desired, inputs or {}, actions


def check_saved_plan(ctl: Controller, body: Any) -> tuple[int, dict[str, Any]]:
    """Accept (200) or refuse (409 ``stale plan: ...``) a saved plan.

    The controller re-plans on its current inputs; the plan is accepted while
    that re-plan takes exactly its actions, whatever else drifted (reported as
    notes). The caller runs a tick afterwards; nothing here issues a command.
    """
    desired, recorded, actions = _plan_fields(body)
    if not recorded.get("digests"):
        return 409, _refusal(
            f"{STALE} it was made against a snapshot file, not this controller; "
            "plan again with --against the controller URL"
        )
    source = ctl.desired
    revision = desired["revision"]
    documents: dict[str, dict[str, Any]] = {}
    revision_note = ""
    if isinstance(source, ApiDesired):
        files = _checked_files(desired.get("files"))
        candidate, documents = desired_from_files(files, revision, bool(desired.get("dirty")))
    else:
        in_force = ctl.current_desired()
        if in_force is None:
            return 409, _refusal(
                f"{STALE} this controller holds no valid desired state yet; plan again once "
                "it has synced"
            )
        if in_force.revision != revision:
            revision_note = (
                f"revision {in_force.revision[:12]} is in force (the plan was made for "
                f"{revision[:12]}) and "
            )
        candidate = in_force
    now = dry_run_document(ctl, candidate)
    moved = moved_inputs(recorded, now["inputs"])
    saved_rows = [r for r in [*actions, *(body.get("deferred") or [])] if isinstance(r, dict)]
    changes = action_changes(saved_rows, [*now["actions"], *now["deferred"]])
    if changes:
        detail = {
            "added": list(changes.added),
            "removed": list(changes.removed),
            "changed": list(changes.changed),
        }
        return 409, _refusal(
            stale_message(changes, moved, revision_note), moved=moved, actions=detail
        )
    notes = drift_notes(moved)
    if revision_note:
        notes.insert(0, f"{revision_note.removesuffix(' and ')}; no action changed")
    revision = candidate.revision
    if isinstance(source, ApiDesired):
        source.adopt(candidate, documents)
    mode = Mode(now["mode"])
    approved = sorted(str(r.get("action_id")) for r in saved_rows)
    if mode is Mode.RECOMMEND:  # replaces any earlier approval; one with no action is none
        record = AppliedPlan(revision, frozenset(approved), ctl.clock())
        ctl.store.set_override(APPLIED_PLAN_KEY, record.to_json() if approved else None)
    ctl.event(
        "plan_applied",
        message=f"revision {revision[:12]}, inputs {str(recorded.get('digest'))[:12]}, "
        f"{len(approved)} action(s), mode {mode.value}",
    )
    ctl.mark_dirty(safety=True)
    return 200, {
        "applied": True,
        "revision": revision,
        "inputs_digest": recorded.get("digest"),
        "current_inputs_digest": now["inputs"]["digest"],
        "notes": notes,
        "mode": mode.value,
        "approved_action_ids": approved if mode is Mode.RECOMMEND else [],
    }


def cancel_applied_plan(ctl: Controller) -> dict[str, Any]:
    """Withdraw the approval of an applied plan (``gridctl apply --cancel``).

    Its actions not yet delivered stay proposals again; ones already delivered
    finish on their hosts (a command in flight cannot be called back).
    """
    plan = applied_plan(ctl.store.overrides())
    if plan is None:
        return {"cancelled": False, "message": "no applied plan is in force"}
    ctl.store.set_override(APPLIED_PLAN_KEY, None)
    ctl.event(
        "applied_plan_cancelled",
        message=f"revision {plan.revision[:12]}, {len(plan.action_ids)} action(s) withdrawn",
    )
    ctl.mark_dirty(safety=True)
    return {
        "cancelled": True,
        "revision": plan.revision,
        "action_ids": sorted(plan.action_ids),
        "message": f"withdrew the plan applied at revision {plan.revision[:12]} "
        f"({len(plan.action_ids)} action(s)); its undelivered actions are proposals again",
    }


def _refusal(
    message: str,
    moved: list[dict[str, Any]] | None = None,
    actions: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    body: dict[str, Any] = {"error": {"message": message}}
    if moved is not None:
        body["error"]["moved"] = moved
    if actions is not None:
        body["error"]["actions"] = actions
    return body


def applied_summary(ctl: Controller, planned: list[dict[str, Any]]) -> dict[str, Any]:
    """After the tick: the controller's own actions beside the plan's (ids are stable)."""
    result = ctl.view.result
    mode, refused = ctl.effective_mode()
    now_rows = [action_to_json(a) for a in result.actions] if result else []
    held_rows = [action_to_json(a) for a in result.deferred] if result else []
    ours = {r["action_id"] for r in now_rows + held_rows}
    theirs = {str(r.get("action_id")) for r in planned if isinstance(r, dict)}
    pending = {p.action_id for p in ctl.store.pending()}
    return {
        "effective_mode": mode.value,
        "refused_automatic": refused,
        "actions": now_rows,
        "deferred": held_rows,
        "pending_action_ids": sorted(pending),
        "issued_not_in_plan": sorted(pending - theirs),
        "not_in_plan": sorted(ours - theirs - pending),
        "planned_but_absent": sorted(theirs - ours - pending),
    }
