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

from gridctl.controller.control import APPLIED_PLAN_KEY, Controller
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
        "saved plans applied in recommend mode: gridctl apply",
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
    applied = ctl.store.overrides().get(APPLIED_PLAN_KEY)
    if isinstance(applied, dict):
        ids = applied.get("action_ids") or []
        found.append(
            {
                "field": "actions",
                "owner": "operator",
                "git": "recommend: proposals only",
                "value": f"{len(ids)} action(s) of an applied plan executable",
                "how": "gridctl apply",
            }
        )
    return found


def ownership_document(ctl: Controller) -> dict[str, Any]:
    """The ``ownership`` block of the status document."""
    override = ctl.steering.override()
    return {
        "owners": OWNERS,
        "overrides": overrides(ctl, override.mode if override else None, ctl.policy().mode),
    }


__all__ = ["NODE_LOCAL", "OWNERS", "overrides", "ownership_document"]
