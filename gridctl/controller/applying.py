"""Saved plans (``gridctl plan --out``) and applying one only while its inputs still hold.

A saved plan records what it was made from — the controller's desired revision
and policy, the observed hosts and residencies, and the demand signal — as
short canonical lines per input plus a digest. ``POST /allocator/apply``
recomputes the same lines from the live observation; when any input moved it
refuses with "stale plan" and names what moved, Terraform-style. Otherwise the
plan's desired revision becomes the operator-approved target (controllers
without a watched directory) and the next tick reconciles towards it through
the normal governor: applying never issues a command itself.

The lines leave out what changes on every heartbeat (timestamps, measured
memory, in-flight counts) and bucket demand by powers of two, so a quiet fleet
keeps its digest while a real change — a host joining, a residency becoming
ready, traffic doubling — moves it.
"""

from __future__ import annotations

import hashlib
import json
import math
import tempfile
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from gridctl.config import check_directory
from gridctl.config.loading import YAML_SUFFIXES
from gridctl.config.schemas import fill_defaults
from gridctl.config.snapshots import snapshot_from_json
from gridctl.config.yamlsource import parse_yaml
from gridctl.controller.desired import ApiDesired
from gridctl.controller.snapshotting import snapshot_document
from gridctl.domain import ControllerPolicy, DesiredState, FleetSnapshot
from gridctl.errors import WireError
from gridctl.planner.canonical import canonical_text
from gridctl.reconcile import PendingAction, action_to_json
from gridctl.reconcile.records import HistoryEntry

if TYPE_CHECKING:
    from gridctl.controller.control import Controller

PLAN_FORMAT = "gridctl.plan/v1"
INPUT_NAMES = ("revision", "policy", "hosts", "residencies", "demand")
MAX_MOVED_ITEMS = 6
MAX_FILES = 512


# -- inputs --------------------------------------------------------------------------


def _bucket(rate: float) -> int:
    """0 below one per minute, then 1 + floor(log2(rate)): 1, 2-3, 4-7, ..."""
    return 0 if rate < 1.0 else 1 + int(math.log2(rate))


def observed_inputs(
    snapshot: FleetSnapshot, revision: str | None, policy: ControllerPolicy | None
) -> dict[str, list[str]]:
    """The inputs of a plan as sorted, human-readable lines, one list per input."""
    hosts: list[str] = []
    residencies: list[str] = []
    for host in snapshot.hosts:
        res = host.resources
        hosts.append(
            f"{host.host_id} {host.kind} {host.state.value} "
            f"{res.capacity_mb - res.reserved_mb} MB usable"
        )
        for r in host.residencies:
            sha = (r.artifact_sha256 or "-")[:12]
            extra = " pinned" if r.pinned else ""
            residencies.append(
                f"{host.host_id}/{r.model_id} {r.state.value} {r.ownership.value}{extra} {sha}"
            )
        for c in host.cached:
            residencies.append(
                f"{host.host_id}/{c.model_id} on disk {(c.artifact_sha256 or '-')[:12]}"
            )
    demand: list[str] = []
    for d in snapshot.demand:
        signal = (
            _bucket(d.requests_per_minute),
            _bucket(d.correlated_requests_per_minute),
            d.queue_depth > 0,
            d.error_rate > 0,
        )
        if any(signal):
            demand.append(
                f"{d.model_id} rate~{signal[0]} correlated~{signal[1]} "
                f"queue={'yes' if signal[2] else 'no'} errors={'yes' if signal[3] else 'no'}"
            )
    policy_line = (
        hashlib.sha256(canonical_text(policy).encode()).hexdigest()[:16] if policy else "none"
    )
    return {
        "revision": [revision or "none"],
        "policy": [policy_line],
        "hosts": sorted(hosts),
        "residencies": sorted(residencies),
        "demand": sorted(demand),
    }


def inputs_record(lines: dict[str, list[str]]) -> dict[str, Any]:
    """The ``inputs`` block of a snapshot document and a saved plan."""
    digests = {
        name: hashlib.sha256(json.dumps(lines[name]).encode()).hexdigest() for name in INPUT_NAMES
    }
    whole = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    return {"digest": whole, "digests": digests, "lines": {n: lines[n] for n in INPUT_NAMES}}


def moved_inputs(recorded: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
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


def describe_moved(moved: list[dict[str, Any]]) -> list[str]:
    """One line per moved input: ``residencies: +local-1/gemma ready ...; -...``."""
    out = []
    for row in moved:
        parts = [f"+{x}" for x in row.get("added", [])] + [f"-{x}" for x in row.get("removed", [])]
        out.append(f"{row['input']}: {'; '.join(parts) or 'changed'}")
    return out


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


def current_inputs(ctl: Controller) -> tuple[dict[str, Any], dict[str, Any]]:
    """The observation document and the ``inputs`` block computed from exactly it."""
    document = snapshot_document(ctl)
    snapshot = snapshot_from_json(document)  # the same path the CLI reads it through
    desired = ctl.current_desired()
    lines = observed_inputs(snapshot, desired.revision if desired else None, ctl.policy())
    return document, inputs_record(lines)


def plan_inputs_document(ctl: Controller, history_limit: int = 500) -> dict[str, Any]:
    """``GET /allocator/snapshot``: the observation plus what a dry run needs to be exact."""
    document, inputs = current_inputs(ctl)
    override = ctl.override()
    mode, _ = ctl.effective_mode()
    desired = ctl.current_desired()
    document["pending_actions"] = [_pending_row(p) for p in ctl.store.pending()]
    document["history"] = [_history_row(h) for h in ctl.store.history(limit=history_limit)]
    document["inputs"] = inputs
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
        raise WireError(f"the plan's desired state is invalid: {first.message if first else '?'}")
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
    """Accept (200) or refuse (409 stale / not applicable) a saved plan; adopts on accept.

    The caller runs a tick afterwards; nothing here issues a command.
    """
    desired, recorded, _actions = _plan_fields(body)
    if not recorded.get("digests"):
        return 409, _refusal(
            "the plan was made against a snapshot file, not this controller; "
            "plan again with --against the controller URL"
        )
    _document, current = current_inputs(ctl)
    moved = moved_inputs(recorded, current)
    if moved:
        names = ", ".join(row["input"] for row in moved)
        lines = "".join(f"\n  moved {line}" for line in describe_moved(moved))
        return 409, _refusal(
            f"stale plan: {names} moved since it was made; plan again{lines}", moved=moved
        )
    source = ctl.desired
    revision = desired["revision"]
    if isinstance(source, ApiDesired):
        files = _checked_files(desired.get("files"))
        state, documents = desired_from_files(files, revision, bool(desired.get("dirty")))
        source.adopt(state, documents)
    else:
        in_force = ctl.current_desired()
        if in_force is None or in_force.revision != revision:
            where = source.status().get("directory")
            return 409, _refusal(
                f"this controller watches {where}; revision "
                f"{in_force.revision if in_force else 'none'} is in force and the plan is for "
                f"{revision}: commit the change there and let the controller sync"
            )
    ctl.event(
        "plan_applied",
        message=f"revision {revision[:12]}, inputs {current['digest'][:12]}",
    )
    ctl.mark_dirty(safety=True)
    return 200, {"applied": True, "revision": revision, "inputs_digest": current["digest"]}


def _refusal(message: str, moved: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"error": {"message": message}}
    if moved is not None:
        body["error"]["moved"] = moved
    return body


def applied_summary(ctl: Controller, planned: list[dict[str, Any]]) -> dict[str, Any]:
    """After the tick: the controller's own actions beside the plan's (ids are stable)."""
    result = ctl.last_result
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
        "not_in_plan": sorted(ours - theirs - pending),
        "planned_but_absent": sorted(theirs - ours - pending),
    }
