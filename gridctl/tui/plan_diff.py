"""The plan as a Terraform-style diff: what the next tick would change, one line per change.

Signs follow ``gridctl plan``: ``+`` place a new replica, ``~`` converge an
assigned replica in place (it exists but is not ready yet), ``-`` preempt or
remove a residency the plan no longer wants, ``!`` an unsatisfied constraint.
Assignments already satisfied by a ready residency are not changes and are
omitted. Each line carries the reconciler's actions for its (host, model) and
the ``--explain`` detail for its model: every host's row when the status carries
them (the dashboard asks for the selected model's), else its hosts folded into
groups alike. Pure: plan JSON in, frozen lines out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

SIGN_ORDER = {"+": 0, "~": 1, "-": 2, "!": 3}
UNACTUATED_OWNERS = ("manual", "external")
GONE_STATES = ("cached", "failed")


@dataclass(frozen=True)
class PlanLine:
    sign: str
    model_id: str
    host_id: str | None
    summary: str
    reason: str
    actions: tuple[str, ...]
    explain: tuple[str, ...]

    @property
    def search_text(self) -> str:
        return " ".join([self.sign, self.model_id, self.host_id or "", self.summary, self.reason])


def _rows(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _explanations(plan: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """Explanations keyed by model: the plan JSON may give a mapping or a list."""
    raw = plan.get("explanations")
    if isinstance(raw, Mapping):
        return {str(k): v for k, v in raw.items() if isinstance(v, Mapping)}
    return {str(item.get("model_id")): item for item in _rows(raw)}


def _components(raw: Any) -> str:
    if isinstance(raw, Mapping):
        pairs = [(str(k), v) for k, v in raw.items()]
    else:
        pairs = [(str(c.get("name")), c.get("value")) for c in _rows(raw)]
    return " ".join(
        f"{name}={value:+.2f}" for name, value in pairs if isinstance(value, float | int)
    )


def _group_line(group: Mapping[str, Any]) -> str:
    count, example = group.get("hosts", "?"), group.get("example_host", "?")
    hosts = f"{count} host{'' if count == 1 else 's'}"
    detail = group.get("detail") or ""
    if group.get("reason"):
        words = f"{group['reason']} ({detail})" if detail else str(group["reason"])
        return f"  x {hosts}: {words}, e.g. {example}"
    return f"    {hosts}: {detail or 'eligible, scored'}, e.g. {example}"


def summary_lines(summary: Mapping[str, Any]) -> tuple[str, ...]:
    """A model's hosts folded (the status's ``plan.models`` entry): the target, the chosen
    hosts, then each group of hosts alike with a count and an example."""
    target = summary.get("target_replicas", "?")
    demand = summary.get("demand_class") or "-"
    lines = [f"target {target} replica(s), {demand}: {summary.get('target_reason', '')}"]
    chosen = summary.get("chosen")
    lines.extend(f"  * {host}: chosen" for host in (chosen if isinstance(chosen, list) else ()))
    for key in ("rejected", "eligible"):
        lines.extend(_group_line(group) for group in _rows(summary.get(key)))
    return tuple(lines)


def explain_lines(
    explanation: Mapping[str, Any] | None, summary: Mapping[str, Any] | None = None
) -> tuple[str, ...]:
    """``gridctl plan --explain MODEL`` detail: the target, then every host considered;
    the hosts folded into groups (``summary``) when the document carries no rows."""
    if explanation is None and isinstance(summary, Mapping):
        return summary_lines(summary)
    if explanation is None:
        return ("no explanation recorded for this model",)
    target = explanation.get("target_replicas", "?")
    demand = explanation.get("demand_class") or "-"
    lines = [f"target {target} replica(s), {demand}: {explanation.get('target_reason', '')}"]
    candidates = sorted(_rows(explanation.get("candidates")), key=lambda c: str(c.get("host_id")))
    for candidate in candidates:
        host = str(candidate.get("host_id"))
        if candidate.get("rejection"):
            detail = f" ({candidate['detail']})" if candidate.get("detail") else ""
            lines.append(f"  x {host}: {candidate['rejection']}{detail}")
            continue
        mark = "*" if candidate.get("chosen") else " "
        score = candidate.get("score")
        if not isinstance(score, float | int):
            lines.append(f"  {mark} {host}: {candidate.get('detail') or 'not scored'}")
            continue
        parts = _components(candidate.get("components"))
        lines.append(f"  {mark} {host}: score {score:.2f} {parts}".rstrip())
    return tuple(lines)


def _actions_by_pair(actions: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], list[str]]:
    found: dict[tuple[str, str], list[str]] = {}
    for action in actions:
        if action.get("executable"):
            label = f"{action.get('kind')}"
        elif action.get("blocked"):
            label = f"{action.get('kind')} (blocked: {action['blocked']})"
        else:
            label = f"{action.get('kind')} (proposed)"
        key = (str(action.get("host_id")), str(action.get("model_id")))
        found.setdefault(key, []).append(label)
    return found


def _residencies(hosts: Any) -> dict[tuple[str, str], Mapping[str, Any]]:
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for host in _rows(hosts):
        for residency in _rows(host.get("residencies")):
            found[(str(host.get("host_id")), str(residency.get("model_id")))] = residency
    return found


def plan_lines(
    plan: Mapping[str, Any] | None,
    hosts: Any,
    actions: Sequence[Mapping[str, Any]],
) -> tuple[PlanLine, ...]:
    """The diff between the plan and observed residencies, annotated with actions."""
    if plan is None:
        return ()
    explained = _explanations(plan)
    models = plan.get("models")
    folded = {str(k): v for k, v in models.items()} if isinstance(models, Mapping) else {}
    by_pair = _actions_by_pair(actions)
    resident = _residencies(hosts)
    lines: list[PlanLine] = []
    covered: set[tuple[str, str]] = set()

    def add(sign: str, model: str, host: str | None, summary: str, reason: str) -> None:
        pair = (str(host), model)
        covered.add(pair)
        lines.append(
            PlanLine(
                sign=sign,
                model_id=model,
                host_id=host,
                summary=summary,
                reason=reason,
                actions=tuple(by_pair.get(pair, ())),
                explain=explain_lines(explained.get(model), folded.get(model)),
            )
        )

    assigned: set[tuple[str, str]] = set()
    for item in _rows(plan.get("assignments")):
        host, model = str(item.get("host_id")), str(item.get("model_id"))
        assigned.add((host, model))
        residency = resident.get((host, model))
        state = str(residency.get("state")) if residency else None
        size = f"{item.get('runtime', '?')}, {item.get('memory_mb', '?')} MB"
        if state == "ready":
            covered.add((host, model))
        elif state is not None and state not in GONE_STATES:
            add("~", model, host, f"{state} -> ready ({size})", str(item.get("reason", "")))
        else:
            add("+", model, host, f"place ({size})", str(item.get("reason", "")))
    for item in _rows(plan.get("preemptions")):
        host, model = str(item.get("host_id")), str(item.get("model_id"))
        summary = f"preempt for {item.get('beneficiary', '?')}"
        add("-", model, host, summary, str(item.get("reason", "")))
    for (host, model), residency in sorted(resident.items()):
        if (host, model) in assigned or (host, model) in covered:
            continue
        if residency.get("ownership") in UNACTUATED_OWNERS or residency.get("state") in GONE_STATES:
            continue
        add("-", model, host, f"remove ({residency.get('state')})", "not in the plan")
    for item in _rows(plan.get("unsatisfied")):
        missing = item.get("missing_replicas")
        summary = str(item.get("code", "unsatisfied"))
        if missing:
            summary += f", {missing} missing"
        add("!", str(item.get("model_id")), item.get("host_id"), summary, str(item.get("message")))
    for (host, model), labels in sorted(by_pair.items()):
        if (host, model) not in covered:
            kinds = {label.split(" ", 1)[0] for label in labels}
            sign = "-" if kinds & {"drain", "unload", "evict", "split_release"} else "~"
            add(sign, model, host, "reconcile", "action without a plan change")
    lines.sort(key=lambda line: (SIGN_ORDER[line.sign], line.model_id, line.host_id or ""))
    return tuple(lines)
