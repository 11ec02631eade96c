"""``gridctl diff``: drift between git and the fleet, Argo-style, with flux-style exit codes.

Per model: Synced or OutOfSync, and a health word (Healthy, Progressing,
Degraded, Suspended, Missing, Unknown) with the reason. Beside the models:
the desired revision in force versus the last good and the rejected one, a
dirty working tree (never applied), and every operator override of what git
declares — the mode kill switch, node-local drain/pause/quarantine, an
applied recommend-mode plan — shown as drift (``docs/ownership.md``). Exit 0
in sync, 1 drift, 2 error (like ``flux diff``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gridctl.client import ControllerClient, ControllerError, add_ca_file_argument

EXIT_IN_SYNC, EXIT_DRIFT, EXIT_ERROR = 0, 1, 2


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "diff",
        help="drift between git and the fleet: sync and health per model (exit 1 on drift)",
        description="Show, per model, Synced/OutOfSync and a health word with its reason; the "
        "desired, last good and rejected revisions; and operator overrides of git (the mode "
        "kill switch) as drift. Exit 0 in sync, 1 drift, 2 error.",
    )
    parser.add_argument(
        "--controller",
        metavar="URL",
        help="controller base URL (default $GRIDCTL_CONTROLLER or http://127.0.0.1:22100)",
    )
    parser.add_argument(
        "--token-file", type=Path, metavar="FILE", help="unused: status is a public read"
    )
    add_ca_file_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the drift report as JSON")
    parser.set_defaults(func=run)


def revisions_of(doc: dict[str, Any]) -> dict[str, Any]:
    desired = doc.get("desired") or {}
    return {
        "desired": desired.get("revision"),
        "last_good": desired.get("last_good_revision"),
        "latest_seen": desired.get("latest_seen_revision"),
        "rejected": desired.get("rejected_revision"),
        "source": desired.get("source"),
    }


def drift_report(doc: dict[str, Any]) -> dict[str, Any]:
    """The drift in a status document: what differs from git, and each model's words."""
    drift: list[str] = []
    mode = doc.get("mode") or {}
    override = mode.get("override")
    if override and override.get("mode") != mode.get("desired"):
        reason = override.get("reason") or "no reason given"
        drift.append(
            f"mode: operator override {override['mode']} (git declares {mode.get('desired')}): "
            f"{reason}"
        )
    if mode.get("refused_automatic"):
        drift.append(f"mode: {mode['refused_automatic']}")
    for row in (doc.get("ownership") or {}).get("overrides", []):
        if row.get("field") == "mode":
            continue  # the mode line above already names it
        drift.append(
            f"{row['field']}: {row['owner']} {row['value']} (git declares {row['git']})"
            + (f"; undo with {row['how']}" if row.get("how") else "")
        )
    revisions = revisions_of(doc)
    if revisions["rejected"]:
        drift.append(
            f"revision: {revisions['rejected']} rejected; {revisions['last_good'] or 'nothing'} "
            "stays in force"
        )
    tree = (doc.get("desired") or {}).get("working_tree") or {}
    if tree.get("dirty"):
        drift.append(f"working tree: {tree.get('note')}: {', '.join(tree.get('paths') or [])}")
    models = [
        {
            "model_id": m["model_id"],
            "sync": m["sync"],
            "health": m["health"],
            "reason": m.get("reason", ""),
            "ready": m.get("ready", 0),
            "desired": m.get("desired", 0),
        }
        for m in doc.get("models", [])
    ]
    for m in models:
        if m["sync"] != "Synced":
            drift.append(f"{m['model_id']}: {m['sync']}, {m['health']}: {m['reason']}")
    return {
        "in_sync": not drift,
        "mode": {
            "effective": mode.get("effective"),
            "git": mode.get("desired"),
            "override": override,
        },
        "revisions": revisions,
        "models": models,
        "drift": drift,
    }


def render_drift(report: dict[str, Any]) -> str:
    rev = report["revisions"]
    mode = report["mode"]
    lines = [
        f"desired revision: {rev['desired'] or '-'}   last good: {rev['last_good'] or '-'}   "
        f"rejected: {rev['rejected'] or '-'}",
        f"mode: {mode['effective']} (git declares {mode['git']}"
        + (f"; operator override {mode['override']['mode']})" if mode["override"] else ")"),
        "",
        f"{'MODEL':<24} {'SYNC':<10} {'HEALTH':<12} {'READY':>5} {'WANT':>5}  REASON",
    ]
    for m in report["models"]:
        lines.append(
            f"{m['model_id']:<24} {m['sync']:<10} {m['health']:<12} {m['ready']:>5} "
            f"{m['desired']:>5}  {m['reason']}"
        )
    lines.append("")
    if report["in_sync"]:
        lines.append("in sync with git")
    else:
        lines.append(f"drift ({len(report['drift'])}):")
        lines.extend(f"  {line}" for line in report["drift"])
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    try:
        with ControllerClient(
            args.controller, token_file=args.token_file, ca_file=getattr(args, "ca_file", None)
        ) as client:
            doc = client.status()
    except ControllerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    report = drift_report(doc)
    print(json.dumps(report, indent=2) if args.json else render_drift(report))
    return EXIT_IN_SYNC if report["in_sync"] else EXIT_DRIFT
