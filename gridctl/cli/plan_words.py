"""``gridctl plan``'s words: the diff, the actions with their state, and ``--explain`` rows.

Pure rendering of a dry-run document (``gridctl.tick.previewing``): the same
lines whether it came from a controller or a snapshot file. ``gridctl apply
--dry-run`` prints its diff with these too.
"""

from __future__ import annotations

from typing import Any

__all__ = ["explanation_lines", "print_actions", "print_diff", "print_explanation", "split_lines"]


def _state(row: dict[str, Any]) -> str:
    if row.get("executable"):
        return "executable"
    if row.get("blocked"):
        return f"held: {row['blocked']}"
    return "proposed, not executed"


def print_actions(document: dict[str, Any]) -> None:
    rows = [*document["actions"], *document["deferred"]]
    if not rows:
        return
    executable = sum(1 for a in rows if a.get("executable"))
    held = sum(1 for a in rows if a.get("blocked"))
    print()
    print(
        f"Actions (mode {document['mode']}): {executable} executable, {held} held, "
        f"{len(rows) - executable - held} proposed"
    )
    for a in rows:
        after = f" after {', '.join(d[:8] for d in a['depends_on'])}" if a.get("depends_on") else ""
        print(
            f"  {a['kind']:<6} {a['model_id']} on {a['host_id']} [{_state(a)}]{after}: "
            f"{a['reason']}"
        )


def print_diff(document: dict[str, Any]) -> None:
    plan = document["plan"]
    placing = [a for a in plan["assignments"] if not a["existing"]]
    kept = len(plan["assignments"]) - len(placing)
    ms = (document.get("timings") or {}).get("plan_ms", 0.0)
    inputs = document.get("inputs") or {}
    digest = str(inputs.get("digest") or plan["input_digest"])
    print(f"gridctl plan: inputs {digest[:12]}, planned in {ms:.1f} ms")
    print(f"{kept} replica(s) already in place.")
    destroys, replacements = document["destroys"], document["replacements"]
    splits = plan.get("splits") or []
    if placing or destroys or replacements or plan["unsatisfied"] or splits:
        print()
    for a in placing:
        print(
            f"  + {a['model_id']} on {a['host_id']} ({a['runtime']}, {a['memory_mb']} MB): "
            f"{a['reason']}"
        )
    for line in split_lines(splits):
        print(line)
    for d in destroys:
        held = f" [held: {'; '.join(d['held'])}]" if d["held"] else ""
        print(
            f"  - {d['model_id']} on {d['host_id']}: {', '.join(d['kinds'])}: {d['reason']}{held}"
        )
    for r in replacements:
        print(f"  -/+ {r['model_id']} on {r['host_id']} for {r['beneficiary']}: {r['reason']}")
    for u in plan["unsatisfied"]:
        where = f" on {u['host_id']}" if u.get("host_id") else ""
        missing = f", {u['missing_replicas']} missing" if u.get("missing_replicas") else ""
        print(f"  ! {u['model_id']}{where}: {u['code']}{missing}: {u['message']}")
    print_actions(document)
    print()
    split_count = f", {len(splits)} split (not acted on yet)" if splits else ""
    print(
        f"Plan: {len(placing)} to place{split_count}, {len(destroys)} to destroy, "
        f"{len(replacements)} to replace, {len(document['held'])} held, "
        f"{len(plan['unsatisfied'])} unsatisfied."
    )


def split_lines(splits: list[dict[str, Any]]) -> list[str]:
    """``+ M split over N hosts``, then one line per stage: host, layers, memory."""
    lines: list[str] = []
    for s in splits:
        stages = s["stages"]
        lines.append(
            f"  + {s['model_id']} split over {len(stages)} hosts ({s['runtime']}, "
            f"{s['memory_mb']} MB, coordinator {s['coordinator_host_id']}, context "
            f"{s['context_length']}, {s['parallel_lanes']} lanes): {s['reason']}"
        )
        for stage in stages:
            lines.append(
                f"      stage {stage['host_id']}: layers {stage['layer_start']}-"
                f"{stage['layer_end'] - 1} of {s['layer_count']}, {stage['memory_mb']} MB"
            )
    return lines


def explanation_lines(model: str, explanation: dict[str, Any] | None) -> list[str]:
    """``--explain MODEL``'s lines for every state of a model: hosts rejected, scored,
    chosen without a search (incumbents already meeting the target), staged (a
    preemption or repack placed after release) or never evaluated."""
    if explanation is None:
        return [f"Explain {model}: the plan holds no host rows for it (not placed by this plan)"]
    demand_class = explanation.get("demand_class") or "none"
    lines = [
        f"Explain {model}: target {explanation.get('target_replicas', 0)} "
        f"({explanation.get('target_reason') or 'no reason recorded'}); class {demand_class}"
    ]
    if explanation.get("split"):
        lines.append(f"  {explanation['split']}")
    for c in explanation.get("candidates") or []:
        lines.append(_candidate_line(c))
    if len(lines) == 1:
        lines.append("  no host considered: the fleet has no hosts")
    return lines


def _candidate_line(c: dict[str, Any]) -> str:
    mark = "*" if c.get("chosen") else " "
    host, detail = c.get("host_id"), c.get("detail") or ""
    if c.get("rejection") is not None:
        return f"  {mark} {host}: rejected {c['rejection']}: {detail or 'no detail recorded'}"
    score = c.get("score")
    if score is None:  # never ranked: the incumbents already met the target
        detail = detail.removeprefix("eligible; not scored: ")
    note = f" [{detail}]" if detail else ""
    if score is None:
        state = "holds a replica, not scored" if c.get("chosen") else "eligible, not scored"
        return f"  {mark} {host}: {state}{note}"
    parts = ", ".join(f"{name} {value:+g}" for name, value in (c.get("components") or {}).items())
    return f"  {mark} {host}: score {score:g} ({parts or 'no parts'}){note}"


def print_explanation(model: str, explanation: dict[str, Any] | None) -> None:
    print()
    for line in explanation_lines(model, explanation):
        print(line)
