"""``gridctl status``, ``gridctl mode`` and ``gridctl tick``: the operator's controls.

The human status table carries the same Argo words as ``gridctl diff``: per
model SYNC and HEALTH with the reason, and a closing drift summary (operator
overrides of git, a rejected revision, models out of sync).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from gridctl.cli.diff_cmd import drift_report
from gridctl.cli.drain_check import stuck_replicas
from gridctl.cli.reasons import explain
from gridctl.client import ControllerClient, ControllerError, add_ca_file_argument
from gridctl.errors import issue_json_text
from gridctl.printable import one_line


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--controller",
        metavar="URL",
        help="controller base URL (default $GRIDCTL_CONTROLLER, else the current context, "
        "else http://127.0.0.1:22100)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help="operator token file (default $GRIDCTL_TOKEN_FILE, else the current context's)",
    )
    add_ca_file_argument(parser)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = sub.add_parser(
        "status",
        help="hosts, models, pending commands and drift of a running controller",
        description="Show host lifecycle and capacity, per-model health and sync, pending and "
        "withdrawn commands, unmet constraints, revisions and warnings.",
    )
    _common(status)
    status.add_argument("--json", action="store_true", help="print the full status document")
    status.set_defaults(func=run_status)

    mode = sub.add_parser(
        "mode",
        help="set or clear the operator override of git's mode (the kill switch)",
        description="Override the mode declared in git until cleared. `gridctl mode recommend` "
        "is the kill switch for new automatic work; leaving automatic cancels "
        "pending commands. `--clear` returns to the mode git declares.",
    )
    _common(mode)
    mode.add_argument(
        "mode",
        nargs="?",
        choices=["observe", "recommend", "automatic"],
        help="the mode to set (without it and --clear: print the mode in force)",
    )
    mode.add_argument("--clear", action="store_true", help="remove the override")
    mode.add_argument("--reason", default="", help="why (shown in status)")
    mode.add_argument("--json", action="store_true", help="print the resulting mode document")
    mode.set_defaults(func=run_mode)

    tick = sub.add_parser("tick", help="request an immediate reconciliation pass")
    _common(tick)
    tick.add_argument("--json", action="store_true", help="print the tick result")
    tick.set_defaults(func=run_tick)


def _client(args: argparse.Namespace) -> ControllerClient:
    return ControllerClient(
        args.controller, token_file=args.token_file, ca_file=getattr(args, "ca_file", None)
    )


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    return f"{seconds:.0f}s" if seconds < 120 else f"{seconds / 60:.0f}m"


def source_lines(desired: dict[str, Any]) -> list[str]:
    """Where desired state comes from, and what is on disk but not applied."""
    source = desired.get("source")
    if source == "worktree":
        return [f"source: worktree {desired.get('directory')} ({desired.get('note')})"]
    if source != "git":
        return [f"source: {source}"] if source else []
    out = [
        f"source: git {desired.get('repository')} {desired.get('ref')} path {desired.get('path')}"
        + ("  (signed commits only)" if desired.get("verify_commits") else "")
    ]
    if desired.get("error"):
        out.append(f"  source error: {desired['error']}")
    tree = desired.get("working_tree") or {}
    if tree.get("dirty"):
        paths = tree.get("paths") or []
        out.append(
            f"  {tree.get('note')}: {', '.join(paths[:6])}" + (" ..." if len(paths) > 6 else "")
        )
    return out


def issue_line(issue: dict[str, Any]) -> str:
    """``FILE:LINE:COL: Kind/name: /pointer: message``, as `gridctl validate` prints."""
    return issue_json_text(issue)


def rejection_lines(desired: dict[str, Any]) -> list[str]:
    """The rejected revision still waiting for a fix, with every error as validate prints it."""
    pending = desired.get("rejected_revision")
    if not pending:
        return []
    rows = [r for r in desired.get("rejected") or [] if r.get("revision") == pending]
    out = [
        f"revision {pending} rejected; {desired.get('last_good_revision') or 'nothing'} "
        "stays in force. Fix and commit:"
    ]
    for row in rows[-1:]:
        out.extend(f"  {issue_line(e)}" for e in row.get("errors") or [])
    return out


def held_lines(doc: dict[str, Any]) -> list[str]:
    """Proposed actions held back this tick, with their rule in plain words."""
    reconciliation = doc.get("reconciliation") or {}
    rows = [a for a in reconciliation.get("actions") or [] if a.get("blocked")]
    rows += [a for a in reconciliation.get("deferred") or [] if a.get("blocked")]
    out = []
    for a in rows[:20]:
        code = str(a["blocked"])
        out.append(
            f"  held: {a['kind']} {a['model_id']} on {a['host_id']}: {code} ({explain(code)})"
        )
    return out


def admission_lines(doc: dict[str, Any]) -> list[str]:
    rows = doc.get("admission") or []
    if not rows:
        return []
    out = ["", f"{'WORKLOAD':<16} {'STATE':<20} {'MODEL':<24} REASON"]
    for row in rows:
        out.append(
            f"{row['workload']:<16} {row['state']:<20} {row.get('model_id') or '-':<24} "
            f"{row.get('reason') or ''}"
        )
    return out


def residency_word(row: dict[str, Any]) -> str:
    """``model:state``, and the term of a split the engine coordinates."""
    term = row.get("split_term")
    return f"{row['model_id']}:{row['state']}" + ("" if term is None else f" (split term {term})")


def split_stage_lines(host: dict[str, Any]) -> list[str]:
    """One line per split stage a host serves: model, term, stage (counted from 1),
    layers (inclusive, as ``gridctl plan`` prints them) and the tunnel it is reached on."""
    return [
        f"  split stage of {s['model_id']} term {s['coordinator_term']} "
        f"(coordinator {s['coordinator_id']}): stage {s['stage_index'] + 1}/{s['stage_count']}, "
        f"layers {s['layer_start']}-{s['layer_end'] - 1}, via {s['endpoint']}"
        for s in host.get("split_stages", [])
    ]


def render_status(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    desired = doc["desired"]
    lines.append(mode_line(doc["mode"]))
    lines.append(
        f"desired revision: {desired.get('revision') or '-'}"
        f"  last good: {desired.get('last_good_revision') or '-'}"
        + (
            f"  (rejected: {desired['rejected_revision']})"
            if desired.get("rejected_revision")
            else ""
        )
    )
    lines.extend(rejection_lines(desired))
    lines.extend(source_lines(desired))
    lines.append("")
    lines.append(f"{'HOST':<18} {'STATE':<12} {'USED/CAP MB':>14} {'HB':>5}  RESIDENCIES")
    for host in doc["hosts"]:
        res = ", ".join(residency_word(r) for r in host["residencies"]) or "-"
        used = f"{host['used_mb']}/{host['capacity_mb'] - host['reserved_mb']}"
        lines.append(
            f"{host['host_id']:<18} {host['state']:<12} {used:>14} "
            f"{_age(host['heartbeat_age_seconds']):>5}  {res}"
        )
        if host["state"] in ("draining", "paused"):
            for stuck in stuck_replicas(doc, host["host_id"]):
                lines.append(
                    f"  {host['state']} cannot complete: last ready replica of {stuck.model_id} "
                    f"stays ({stuck.why}); `gridctl node drain --host {host['host_id']} --force`"
                )
        for r in host["residencies"]:
            if r.get("not_routable_reason"):
                lines.append(f"  {r['model_id']} not routable: {r['not_routable_reason']}")
        lines.extend(split_stage_lines(host))
        for t in host.get("transfers", []):
            percent = "?" if t.get("percent") is None else f"{t['percent']:.1f}"
            lines.append(
                f"  fetching {t.get('model_id')}: {percent}% of "
                f"{(t.get('bytes_total') or 0) / (1024 * 1024):.1f} MB from {t.get('source')}"
            )
    lines.append("")
    lines.append(f"{'MODEL':<24} {'SYNC':<10} {'HEALTH':<12} {'READY':>5} {'WANT':>5}  REASON")
    for model in doc["models"]:
        lines.append(
            f"{model['model_id']:<24} {model['sync']:<10} {model['health']:<12} "
            f"{model['ready']:>5} {model['desired']:>5}  {model.get('reason', '')}"
        )
        for warning in model.get("warnings", []):
            lines.append(f"  warning: {model['model_id']}: {warning}")
    lines.append("")
    pending = doc["pending_commands"]
    lines.append(
        f"pending commands: {len(pending)} ({len(doc['delivered_pending_action_ids'])} "
        f"delivered); withdrawn destructive: {len(doc['withdrawn_destructive'])}"
    )
    for cmd in pending[:20]:
        lines.append(
            f"  {cmd['kind']:<7} {cmd['model_id']} on {cmd['host_id']} "
            f"[{cmd.get('status', '')}] {cmd.get('reason', '')}"
        )
    lines.extend(held_lines(doc))
    for unmet in doc["unmet_constraints"]:
        lines.append(
            f"! {unmet['model_id']}: {unmet['code']} ({explain(unmet['code'])}): {unmet['message']}"
        )
    lines.extend(admission_lines(doc))
    rev = doc["revisions"]
    tick = doc.get("last_tick") or {}
    lines.append("")
    lines.append(
        f"reconcile passes: {rev['dirty']} requested, {rev['processed']} run, "
        f"{rev['success']} succeeded ({rev['safety']} for safety); last pass "
        f"{tick.get('duration_ms', 0):.1f} ms {'ok' if tick.get('ok') else 'FAILED'}"
    )
    if doc.get("delivery_safety_error"):
        lines.append(f"delivery safety: {doc['delivery_safety_error']}")
    for warning in doc["warnings"]:
        lines.append(f"warning: {warning}")
    report = drift_report(doc)
    lines.append("in sync with git" if report["in_sync"] else f"drift ({len(report['drift'])}):")
    lines.extend(f"  {line}" for line in report["drift"])
    # hosts report states, messages and names: none of it may act on the terminal
    return "\n".join(one_line(line) for line in lines)


def fail(exc: ControllerError) -> int:
    """One line on stderr; exit 2 when the controller could not be reached, else 1."""
    print(f"error: {exc}", file=sys.stderr)
    return exc.exit_code


def run_status(args: argparse.Namespace) -> int:
    try:
        with _client(args) as client:
            doc = client.status()
    except ControllerError as exc:
        return fail(exc)
    print(json.dumps(doc, indent=2) if args.json else render_status(doc))
    return 0


def mode_line(mode: dict[str, Any]) -> str:
    line = f"mode: {mode['effective']}"
    override = mode.get("override")
    if override:
        line += (
            f" (operator override of git's {mode.get('desired')}: "
            f"{override.get('reason') or 'no reason given'}; `gridctl mode --clear` returns to it)"
        )
    elif mode.get("desired"):
        line += " (as git declares)"
    if mode.get("refused_automatic"):
        line += f" [{mode['refused_automatic']}]"
    return line


def run_mode(args: argparse.Namespace) -> int:
    if args.clear and args.mode is not None:
        print("error: give a mode or --clear, not both", file=sys.stderr)
        return 1
    try:
        with _client(args) as client:
            if args.mode is None and not args.clear:
                result = client.status()["mode"]
            else:
                result = client.set_mode(None if args.clear else args.mode, args.reason)
    except ControllerError as exc:
        return fail(exc)
    if args.json:
        print(json.dumps(result, indent=2))
    elif args.mode is None and not args.clear:
        print(mode_line(result))
    else:
        line = f"mode is now {result['effective']}"
        if result.get("refused_automatic"):
            line += f" ({result['refused_automatic']})"
        print(line)
    return 0


def run_tick(args: argparse.Namespace) -> int:
    try:
        with _client(args) as client:
            result = client.tick()
    except ControllerError as exc:
        return fail(exc)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"tick {'ok' if result['ok'] else 'failed'} in {result['duration_ms']:.1f} ms")
    return 0 if result["ok"] else 1
