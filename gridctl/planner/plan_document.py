"""The plan as a document a person can read: its size follows the decisions, not the fleet.

``plan_to_json`` writes every candidate row of every model: 200,000 rows for a
cold fleet of 1,000 hosts and 200 models, 52 MB that nobody reads. The document
``gridctl plan``, the dry run and the status serve (``plan_document``) keeps
what was decided — targets, assignments, preemptions, unsatisfied constraints, and
splits (one replica across several hosts) when there are any —
and, per model, its target, the hosts it chose and its other hosts folded into
groups of hosts turned down (or left eligible) alike, with a count and one
example host each (``row_summaries``). A model's every host row comes only when
asked for (``explain``: ``gridctl plan --explain MODEL``, ``--explain-all``, the
dashboard's selected model), under ``explanations`` as ``plan_to_json`` writes
it. Equal plans give equal documents; the JSON encoders sort keys, so equal
documents give equal bytes.
"""

from __future__ import annotations

from collections.abc import Iterable

from gridctl.domain import ModelExplanation, Plan, SplitPlacement
from gridctl.domain.row_summaries import RowGroup, RowSummary

JsonObject = dict[str, object]


def decisions_json(plan: Plan) -> JsonObject:
    """What the plan decided: everything but the per-model explanation (``splits`` only
    when the plan places one, so a plan without splits reads as it always did)."""
    document: JsonObject = {
        "input_digest": plan.input_digest,
        "now": plan.now,
        "targets": {model: replicas for model, replicas in plan.targets},
        "assignments": [
            {
                "model_id": a.model_id,
                "host_id": a.host_id,
                "runtime": a.runtime,
                "memory_mb": a.memory_mb,
                "reason": a.reason,
                "demand_class": a.demand_class.value,
                "priority": a.priority,
                "existing": a.existing,
            }
            for a in plan.assignments
        ],
        "preemptions": [
            {
                "host_id": p.host_id,
                "model_id": p.model_id,
                "beneficiary": p.beneficiary,
                "reason": p.reason,
            }
            for p in plan.preemptions
        ],
        "unsatisfied": [
            {
                "model_id": u.model_id,
                "code": u.code.value,
                "message": u.message,
                "missing_replicas": u.missing_replicas,
                "host_id": u.host_id,
            }
            for u in plan.unsatisfied
        ],
    }
    if plan.splits:
        document["splits"] = [split_json(s) for s in plan.splits]
    return document


def split_json(s: SplitPlacement) -> JsonObject:
    """One split replica: topology, and each stage's host, layer range and memory."""
    return {
        "model_id": s.model_id,
        "coordinator_host_id": s.coordinator_host_id,
        "runtime": s.runtime,
        "layer_count": s.layer_count,
        "context_length": s.context_length,
        "parallel_lanes": s.parallel_lanes,
        "memory_mb": s.memory_mb,
        "reason": s.reason,
        "demand_class": s.demand_class.value,
        "priority": s.priority,
        "stages": [
            {
                "host_id": stage.host_id,
                "layer_start": stage.layer_start,
                "layer_end": stage.layer_end,
                "memory_mb": stage.memory_mb,
            }
            for stage in s.stages
        ],
    }


def _target_json(e: ModelExplanation) -> JsonObject:
    target: JsonObject = {
        "target_replicas": e.target_replicas,
        "target_reason": e.target_reason,
        "demand_class": e.demand_class.value if e.demand_class else None,
    }
    if e.split is not None:
        target["split"] = e.split
    return target


def explanation_json(e: ModelExplanation) -> JsonObject:
    """One model's target and every host's row (``--explain MODEL``)."""
    return {
        **_target_json(e),
        "candidates": [
            {
                "host_id": c.host_id,
                "rejection": c.rejection,
                "detail": c.detail,
                "score": c.score,
                "components": {s.name: s.value for s in c.components},
                "chosen": c.chosen,
            }
            for c in e.candidates
        ],
    }


def _group_json(group: RowGroup) -> JsonObject:
    row: JsonObject = {"detail": group.detail, "hosts": group.hosts}
    if group.rejection is not None:
        row["reason"] = group.rejection
    row["example_host"] = group.example_host
    return row


def summary_json(e: ModelExplanation) -> JsonObject:
    """One model's decision with its hosts folded: chosen hosts, then groups alike."""
    summary: RowSummary = e.summary()
    return {
        **_target_json(e),
        "hosts_considered": summary.hosts,
        "chosen": list(summary.chosen),
        "rejected": [_group_json(g) for g in summary.rejected],
        "eligible": [_group_json(g) for g in summary.eligible],
    }


def plan_document(
    plan: Plan, explain: Iterable[str] = (), *, explain_all: bool = False
) -> JsonObject:
    """The plan's decisions, every model's folded hosts under ``models``, and every host
    row of the models in ``explain`` (all of them with ``explain_all``) under
    ``explanations``; a model the plan does not hold is left out."""
    wanted = set(explain)
    document = decisions_json(plan)
    document["models"] = {e.model_id: summary_json(e) for e in plan.explanations}
    document["explanations"] = {
        e.model_id: explanation_json(e)
        for e in plan.explanations
        if explain_all or e.model_id in wanted
    }
    return document


__all__ = ["decisions_json", "explanation_json", "plan_document", "split_json", "summary_json"]
