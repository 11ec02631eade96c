"""Who owns which field: git, the controller, or the operator's overrides.

Git owns everything a commit declares (profiles, policy, catalog). The
controller owns what it decides within those bounds: replica counts between
``min_replicas`` and ``max_replicas``, placement, lifecycle actions,
retirement tombstones. The operator owns the mode kill switch, node-local
overrides (drain, pause, quarantine a host), saved plans applied in recommend
mode, and engines gridctl does not manage (pinned, manual, external). Every
operator value that overrides what git declares is listed in ``overrides`` of
the status document, and ``gridctl diff`` and the dashboard show each one as
drift. ``docs/ownership.md`` is the prose version of this table.
"""

from __future__ import annotations

from typing import Any

from gridctl.controller.appliedplans import CANCEL_HOW, applied_plan, override_row
from gridctl.controller.control import Controller
from gridctl.domain import Mode

OWNERS: dict[str, list[str]] = {
    "git": [
        "ModelProfile: every field (memory, artifact, replica bounds, priority, pins, tags, "
        "cooldowns, workload scores)",
        "ControllerPolicy: mode and every tunable",
        "WorkloadCatalog",
    ],
    "controller": [
        "replica counts within min_replicas..max_replicas",
        "placement: which host holds which replica",
        "lifecycle actions, their order and ids",
        "retirement tombstones for removed profiles",
    ],
    "operator": [
        "mode override (the kill switch): gridctl mode",
        "node-local overrides: gridctl node drain|pause|quarantine",
        f"saved plans applied in recommend mode: gridctl apply (withdraw: {CANCEL_HOW})",
        "engines gridctl never actuates: pinned, manual and external residencies",
    ],
}
NODE_LOCAL = ("draining", "paused", "quarantined")


def overrides(ctl: Controller, mode_override: Mode | None, git_mode: Mode) -> list[dict[str, Any]]:
    """Each operator value in force that differs from what git declares."""
    found: list[dict[str, Any]] = []
    if mode_override is not None and mode_override is not git_mode:
        found.append(
            {
                "field": "mode",
                "owner": "operator",
                "git": git_mode.value,
                "value": mode_override.value,
                "how": "gridctl mode",
            }
        )
    for record in ctl.registry.hosts():
        if record.reported_state in NODE_LOCAL:
            found.append(
                {
                    "field": f"hosts/{record.host_id}/state",
                    "owner": "node-local override",
                    "git": "accepting",
                    "value": record.reported_state,
                    "how": f"gridctl node resume on {record.host_id}",
                }
            )
    desired = ctl.current_desired()
    mode, _ = ctl.effective_mode()
    applied = override_row(
        applied_plan(ctl.store.overrides()), desired.revision if desired else None, mode
    )
    if applied:  # only an approval in force: one the next tick would drop is not shown
        found.append(applied)
    return found


def ownership_document(ctl: Controller) -> dict[str, Any]:
    """The ``ownership`` block of the status document."""
    override = ctl.steering.override()
    return {
        "owners": OWNERS,
        "overrides": overrides(ctl, override.mode if override else None, ctl.policy().mode),
    }


__all__ = ["NODE_LOCAL", "OWNERS", "overrides", "ownership_document"]
