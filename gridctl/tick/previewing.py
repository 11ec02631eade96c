"""Dry runs: the tick's own decision for a candidate desired state, as a document (pure).

``POST /allocator/dry-run`` (operator only) gathers the controller's real tick
inputs — tombstones, pending work, withdrawn batches, history, learned timings,
portfolio demand, the mode — for the candidate desired state, runs
``compute_tick`` on them and returns what the next tick would do, persisting
and issuing nothing. ``gridctl plan --against SNAPSHOT.json`` builds the same
document from a frozen snapshot with an empty memory.

The document also carries the plan's inputs as readable lines per input and a
digest of each. They cover what ``compute_tick`` reads except the clock, with
exact values and no buckets, so ``gridctl apply`` can name what moved. Three
continuously measured host quantities — free disk, measured throughput and
latency — drift on an idle fleet by amounts no decision sees, so they are judged
by their effect instead: apply re-runs the decision on the live inputs and
refuses when any action differs, which no material change can slip past.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import fields, replace
from operator import attrgetter
from typing import Any

from gridctl.domain import Action, DesiredState, FleetSnapshot, HostResources, ModelDemand
from gridctl.planner import plan_document
from gridctl.planner.canonical import canonical_text
from gridctl.reconcile import action_to_json, history_from_json, pending_from_json
from gridctl.tick.computing import TickInputs, TickOutcome, compute_tick

INPUT_NAMES = (
    "revision",
    "policy",
    "mode",
    "hosts",
    "residencies",
    "demand",
    "pending",
    "history",
    "memory",
    "timings",
    "telemetry",
)
HISTORY_LINES = 24
DESTRUCTIVE = ("drain", "unload", "evict", "split_release")
RETIRED_REASON = "profile removed"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def _demand_line(d: ModelDemand) -> str:
    return (
        f"{d.model_id} rate {_num(d.requests_per_minute)} concurrency "
        f"{_num(d.offered_concurrency)} queue {_num(d.queue_depth)} p95 {_num(d.p95_latency_ms)} "
        f"errors {_num(d.error_rate)} trend {_num(d.trend_per_minute)} confidence "
        f"{_num(d.confidence)} samples {d.sample_count} correlated "
        f"{_num(d.correlated_requests_per_minute)} peak "
        f"{_num(d.observed_peak_requests_per_minute)}"
    )


# measured quantities are judged by effect (see the docstring): left out of the digest
MEASURED = ("disk_free_mb", "measured_tokens_per_second", "measured_latency_ms")
_declared_values = attrgetter(*(f.name for f in fields(HostResources) if f.name not in MEASURED))


def _resources_digest(res: HostResources, seen: dict[tuple[object, ...], str]) -> str:
    """The digest of a host's declared resources. A fleet repeats a few machines, so equal
    declarations are digested once per call (``seen``): they are keyed by each value and
    its type, floats by their text, so two keys are equal only where the texts are."""
    values = _declared_values(res)
    key = (*(repr(v) if type(v) is float else v for v in values), *map(type, values))
    found = seen.get(key)
    if found is None:
        declared = replace(
            res, disk_free_mb=None, measured_tokens_per_second=None, measured_latency_ms=None
        )
        found = seen[key] = _digest(canonical_text(declared))
    return found


def _host_lines(snapshot: FleetSnapshot) -> tuple[list[str], list[str]]:
    hosts, residencies = [], []
    seen: dict[tuple[object, ...], str] = {}
    for host in snapshot.hosts:
        res = host.resources
        disk = "disk unknown" if res.disk_free_mb is None else "disk reported"
        hosts.append(
            f"{host.host_id} {host.kind} {host.state.value} "
            f"{res.capacity_mb - res.reserved_mb} MB usable, {disk} "
            f"(resources {_resources_digest(res, seen)}, "
            f"failures {list(host.failed_attempts)})"
        )
        for r in host.residencies:
            sha = (r.artifact_sha256 or "-")[:12]
            extra = " pinned" if r.pinned else ""
            residencies.append(
                f"{host.host_id}/{r.model_id} {r.state.value} {r.ownership.value}{extra} {sha}"
                f" {r.runtime or '-'} {r.memory_mb} MB"
            )
        for c in host.cached:
            residencies.append(
                f"{host.host_id}/{c.model_id} on disk {(c.artifact_sha256 or '-')[:12]}"
            )
    return hosts, residencies


def input_lines(inputs: TickInputs) -> dict[str, list[str]]:
    """Everything ``compute_tick`` reads but the clock, as sorted readable lines."""
    hosts, residencies = _host_lines(inputs.observed)
    previous = (
        _digest(canonical_text(tuple(sorted(inputs.previous_profiles.items()))))
        if inputs.previous_profiles is not None
        else "none"
    )
    history = [
        f"{h.action_id} {h.kind.value} {h.host_id}/{h.model_id} {h.status.value}"
        for h in inputs.history[-HISTORY_LINES:]
    ]
    history.append(
        f"{len(inputs.history)} finished action(s), all "
        f"{_digest(canonical_text(tuple(inputs.history)))}"
    )
    memory = [
        f"tombstone {t.model_id} retired at {t.retired_at:.3f}" for t in inputs.memory.tombstones
    ] + [
        f"withdrawn {w.kind.value} {w.host_id}/{w.model_id} {w.action_id}"
        for w in inputs.memory.withdrawn
    ]
    if inputs.memory.grace is not None:
        memory.append(f"restart grace from {inputs.memory.grace.restarted_at:.3f}")
    return {
        "revision": [inputs.desired.revision, f"previous profiles {previous}"],
        "policy": [_digest(canonical_text(inputs.desired.policy))],
        "mode": [inputs.mode.value, *sorted(f"applied {i}" for i in inputs.approved)],
        "hosts": sorted(hosts),
        "residencies": sorted(residencies),
        "demand": sorted(_demand_line(d) for d in inputs.observed.demand),
        "pending": sorted(
            f"{p.action_id} {p.action.kind.value} {p.action.host_id}/{p.action.model_id}"
            f"{' delivered' if p.delivered else ''} {p.status.value if p.status else '-'}"
            for p in inputs.pending
        ),
        "history": history,
        "memory": sorted(memory),
        "timings": sorted(
            f"{host}/{model} load {_num(e.load_seconds)}s warm {_num(e.warm_seconds)}s"
            for (host, model), e in inputs.startup.items()
        ),
        "telemetry": [
            f"revision {inputs.picture.revision}" if inputs.picture is not None else "none"
        ],
    }


def inputs_record(lines: Mapping[str, list[str]]) -> dict[str, Any]:
    """The ``inputs`` block of a dry run and a saved plan: lines and digests per input."""
    digests = {
        name: hashlib.sha256(json.dumps(lines[name]).encode()).hexdigest() for name in INPUT_NAMES
    }
    whole = hashlib.sha256(json.dumps(digests, sort_keys=True).encode()).hexdigest()
    return {"digest": whole, "digests": digests, "lines": {n: lines[n] for n in INPUT_NAMES}}


def destroys(actions: Iterable[Action], tombstoned: Iterable[str]) -> list[dict[str, Any]]:
    """Drain/unload/evict/split_release work grouped per (model, host), in service order,
    with why."""
    retired = set(tombstoned)
    grouped: dict[tuple[str, str], dict[str, Any]] = {}
    for a in actions:
        if a.kind.value not in DESTRUCTIVE:
            continue
        row = grouped.setdefault(
            (a.model_id, a.host_id),
            {
                "model_id": a.model_id,
                "host_id": a.host_id,
                "kinds": [],
                "reason": RETIRED_REASON if a.model_id in retired else a.reason,
                "held": [],
                "action_ids": [],
            },
        )
        row["kinds"].append(a.kind.value)
        row["action_ids"].append(a.action_id)
        if a.blocked:
            row["held"].append(f"{a.kind.value}: {a.blocked}")
    return list(grouped.values())


def outcome_document(
    inputs: TickInputs,
    outcome: TickOutcome,
    explain: Iterable[str] = (),
    *,
    explain_all: bool = False,
) -> dict[str, Any]:
    """What the tick would do, as JSON: plan, actions, destroys, held work, inputs. The
    plan's per-host rows are there only for the models in ``explain`` (or all of them
    with ``explain_all``); every model's hosts are folded in its ``models`` entry."""
    result = outcome.result
    every = [*result.actions, *result.deferred]
    held = [action_to_json(a) for a in every if a.blocked]
    plan = plan_document(outcome.plan, explain, explain_all=explain_all)
    placing = [a for a in outcome.plan.assignments if not a.existing]
    document: dict[str, Any] = {
        "revision": inputs.desired.revision,
        "dirty": inputs.desired.dirty,
        "now": inputs.now,
        "mode": inputs.mode.value,
        "plan": plan,
        "actions": [action_to_json(a) for a in result.actions],
        "deferred": [action_to_json(a) for a in result.deferred],
        "enqueue": [p.action_id for p in result.enqueue],
        "cancellations": [
            {"action_id": c.action_id, "reason": c.reason.value, "delivered": c.delivered}
            for c in result.cancellations
        ],
        "retired": list(outcome.retired),
        "tombstoned": list(outcome.tombstoned),
        "destroys": destroys(every, outcome.tombstoned),
        "replacements": [
            {
                "model_id": p.model_id,
                "host_id": p.host_id,
                "beneficiary": p.beneficiary,
                "reason": p.reason,
            }
            for p in outcome.plan.preemptions
        ],
        "held": held,
        "inputs": inputs_record(input_lines(inputs)),
    }
    document["changes"] = bool(
        placing
        or every
        or document["cancellations"]
        or document["destroys"]
        or document["replacements"]
        or held
    )
    return document


def offline_inputs(desired: DesiredState, snapshot: FleetSnapshot) -> TickInputs:
    """A snapshot file's tick inputs: its pending work and history, an empty memory, no
    previous revision (so no tombstones), no learned timings, DIR's mode."""
    pending = pending_from_json(snapshot.extras.get("pending_actions") or [])  # type: ignore[arg-type]
    history = history_from_json(snapshot.extras.get("history") or [])  # type: ignore[arg-type]
    return TickInputs(
        now=snapshot.now,
        desired=desired,
        observed=snapshot,
        mode=desired.policy.mode,
        pending=pending,
        history=history,
    )


def offline_document(
    desired: DesiredState,
    snapshot: FleetSnapshot,
    explain: Iterable[str] = (),
    *,
    explain_all: bool = False,
) -> dict[str, Any]:
    inputs = offline_inputs(desired, snapshot)
    return outcome_document(inputs, compute_tick(inputs), explain, explain_all=explain_all)


Signature = tuple[str, str, str, str, bool, str]


def action_signature(rows: Iterable[Mapping[str, Any]]) -> list[Signature]:
    """What must match for two dry runs to describe the same work."""
    return sorted(
        (
            str(r.get("action_id")),
            str(r.get("kind")),
            str(r.get("host_id")),
            str(r.get("model_id")),
            bool(r.get("executable")),
            str(r.get("blocked") or ""),
        )
        for r in rows
    )


__all__ = [
    "INPUT_NAMES",
    "action_signature",
    "destroys",
    "input_lines",
    "inputs_record",
    "offline_document",
    "offline_inputs",
    "outcome_document",
]
