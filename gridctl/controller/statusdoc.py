"""The status document (``schemas/wire/status.schema.json``) assembled from controller state.

Secrets never enter it: engine keys stay in the registry, credentials in files.
Per-model health uses Argo CD's words so operators read drift at a glance.
"""

from __future__ import annotations

from typing import Any

from gridctl import __version__
from gridctl.config.splitstages import stage_json
from gridctl.controller.control import Controller
from gridctl.controller.ownership import ownership_document
from gridctl.controller.snapshotting import demand_json
from gridctl.controller.tickview import PortfolioBundle, PortfolioKey
from gridctl.demand.direct import with_correlation
from gridctl.domain import FleetSnapshot, HostState, Mode, Plan, ResidencyState
from gridctl.domain.profiles import ModelProfile
from gridctl.planner.plan_document import plan_document, split_json
from gridctl.planner.portfolio import admission_row_json, plan_portfolio, portfolio_to_json
from gridctl.planner.portfolio_inputs import portfolio_inputs
from gridctl.planner.portfolio_types import PortfolioResult
from gridctl.reconcile import PendingAction, action_to_json

IN_PROGRESS = (ResidencyState.LOADING, ResidencyState.WARMING)
STATUS_SECONDS = 1.0  # the longest a cached status document is served


def _pending_json(held: PendingAction) -> dict[str, Any]:
    row = action_to_json(held.action)
    row["delivered_at"] = held.delivered_at
    row["status"] = (
        held.status.value if held.status else ("delivered" if held.delivered else "pending")
    )
    return row


def _hosts(ctl: Controller, now: float) -> list[dict[str, Any]]:
    policy = ctl.policy()
    rows = []
    planned = ctl.view.snapshot
    # the tick's view of each host, by id (a lookup per host: linear in the fleet)
    planned_hosts = {h.host_id: h for h in planned.hosts} if planned is not None else {}
    for record in ctl.registry.hosts():
        res = record.resources
        routable = {r.model_id: r.endpoint for r in ctl.registry.routable_on(record.host_id, now)}
        residencies = []
        used = res.external_mb
        snapshot_states = {}
        snap_host = planned_hosts.get(record.host_id)
        if snap_host is not None:
            snapshot_states = {r.model_id: r.state.value for r in snap_host.residencies}
        for r in record.residencies:
            if r.state.occupies_memory:
                used += r.memory_mb
            residencies.append(
                {
                    "model_id": r.model_id,
                    "state": snapshot_states.get(r.model_id, r.state.value),
                    "reported_state": r.state.value,
                    "memory_mb": r.memory_mb,
                    "ownership": r.ownership.value,
                    "artifact_sha256": r.artifact_sha256,
                    "active_requests": ctl.registry.active_requests(record.host_id, r.model_id),
                    "routable": r.model_id in routable,
                    "endpoint": routable.get(r.model_id),
                    "not_routable_reason": None
                    if r.model_id in routable
                    else ctl.registry.not_routable_reason(record.host_id, r.model_id),
                    "loaded_at": r.loaded_at,
                    "last_used_at": r.last_used_at,
                    **({} if r.split_term is None else {"split_term": r.split_term}),
                }
            )
        age = max(0.0, now - record.last_heartbeat)
        rows.append(
            {
                "host_id": record.host_id,
                "role": record.role,
                "state": record.state.value,
                "reported_state": record.reported_state,
                "unhealthy_reasons": list(record.unhealthy_reasons),
                "stale": age > policy.heartbeat_stale_seconds,
                "capacity_mb": res.capacity_mb,
                "gpu_count": res.gpu_count,  # null: the host cannot tell
                "gpu_memory_mb": res.gpu_memory_mb,
                "advertise": record.network.get("advertise"),
                "address_family": record.network.get("address_family", "loopback"),
                "reserved_mb": res.reserved_mb,
                "external_mb": res.external_mb,
                "used_mb": used,
                "free_mb": max(0, res.capacity_mb - res.reserved_mb - used),
                "failure_domain": res.failure_domain,
                "tags": list(res.tags),
                "runtimes": list(res.runtimes),
                "max_models": res.max_models,
                "disk_free_mb": res.disk_free_mb,
                "last_heartbeat": record.last_heartbeat,
                "heartbeat_age_seconds": round(age, 3),
                "residencies": residencies,
                "cached_models": sorted({c.model_id for c in record.cached}),
                "artifacts": [artifact_summary(a) for a in record.artifacts],
                "transfers": [transfer_summary(t) for t in record.transfers],
                **(
                    {}
                    if record.split_stages is None
                    else {"split_stages": [stage_json(st) for st in record.split_stages]}
                ),
            }
        )
    return rows


def transfer_summary(row: dict[str, Any]) -> dict[str, Any]:
    """A running transfer with its percentage (None while the total is unknown)."""
    done, total = row.get("bytes_done", 0), row.get("bytes_total")
    percent = round(100.0 * done / total, 1) if isinstance(total, int) and total > 0 else None
    return {
        "model_id": row.get("model_id"),
        "artifact_sha256": row.get("artifact_sha256"),
        "source": row.get("source"),
        "bytes_done": done,
        "bytes_total": total,
        "rate_bytes_per_second": row.get("rate_bytes_per_second", 0.0),
        "percent": percent,
    }


def artifact_summary(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("model_id", "artifact_sha256", "size_bytes", "provenance", "last_used_age_seconds")
    summary = {k: row.get(k) for k in keys}
    summary["gguf"] = row.get("gguf")
    return summary


def _models(ctl: Controller, now: float, mode: Mode) -> list[dict[str, Any]]:
    desired = ctl.current_desired()
    plan: Plan | None = ctl.view.plan
    targets = dict(plan.targets) if plan else {}
    pending_models = {p.action.model_id for p in ctl.store.pending()}
    proposed_models = (
        {a.model_id for a in (ctl.view.result.actions + ctl.view.result.deferred)}
        if ctl.view.result
        else set()
    )
    unmet: dict[str, list[str]] = {}
    for u in plan.unsatisfied if plan else ():
        unmet.setdefault(u.model_id, []).append(f"{u.code.value}: {u.message}")
    rows = []
    tombstoned = {t.model_id for t in ctl.store.memory().tombstones}
    for model_id in sorted(({p.name for p in desired.profiles} if desired else set()) | tombstoned):
        retiring = model_id in tombstoned
        want = 0 if retiring else targets.get(model_id, 0)
        split = next((s for s in plan.splits if s.model_id == model_id), None) if plan else None
        # a planned split is one replica, across its stages
        planned = (len(plan.assignments_for(model_id)) + (split is not None)) if plan else 0
        ready = len(ctl.registry.routable(model_id, now))
        present = sum(
            1
            for record in ctl.registry.hosts()
            for r in record.residencies
            if r.model_id == model_id and r.state is not ResidencyState.CACHED
        )
        progressing = (
            any(
                r.model_id == model_id and r.state in IN_PROGRESS
                for record in ctl.registry.hosts()
                for r in record.residencies
            )
            or model_id in pending_models
        )
        missing = max(0, want - ready)
        drift = missing > 0 or present > want or model_id in proposed_models
        if plan is None:
            health, reason = "Unknown", "no plan yet"
        elif drift and mode is not Mode.AUTOMATIC:
            health, reason = "Suspended", f"mode is {mode.value}: changes are not executed"
        elif progressing:
            health, reason = "Progressing", "lifecycle actions in progress"
        elif missing and present == 0:
            health, reason = "Missing", "no replica anywhere"
        elif missing or model_id in unmet:
            health, reason = (
                "Degraded",
                "; ".join(unmet.get(model_id, [])) or (f"{ready} of {want} replicas ready"),
            )
        elif retiring and present:
            health, reason = "Progressing", "retiring: draining and unloading"
        else:
            health, reason = "Healthy", f"{ready} of {want} replicas ready"
        if split is not None:
            reason = f"{reason}; {split.summary()}"
        rows.append(
            {
                "model_id": model_id,
                "desired": want,
                "planned": planned,
                "ready": ready,
                "missing": missing,
                "health": health,
                "sync": "OutOfSync" if drift else "Synced",
                "reason": reason,
                "unmet": unmet.get(model_id, []),
                "retiring": retiring,
                **({"split": split_json(split)} if split is not None else {}),
                **artifact_facts(ctl, desired.profile(model_id) if desired else None),
            }
        )
    return rows


def model_rows(ctl: Controller) -> list[dict[str, Any]]:
    """The status document's per-model rows alone (no portfolio solve)."""
    mode, _ = ctl.effective_mode()
    return _models(ctl, ctl.clock(), mode)


NO_TEMPLATE_WARNING = (
    "the GGUF carries no chat template and the profile names none: llama-server falls back "
    "to ChatML; set spec.chat_template"
)


def artifact_facts(ctl: Controller, profile: ModelProfile | None) -> dict[str, Any]:
    """The GGUF header a node reported for the profile's artifact, and what it implies."""
    if profile is None:
        return {"gguf": None, "chat_template": None, "warnings": []}
    header: dict[str, Any] | None = None
    for record in ctl.registry.hosts():
        for row in record.artifacts:
            same = row.get("artifact_sha256") == profile.artifact_sha256
            if row.get("model_id") == profile.name and same and isinstance(row.get("gguf"), dict):
                header = row["gguf"]
    warnings = []
    if header is not None and header.get("chat_template") is False and not profile.chat_template:
        warnings.append(NO_TEMPLATE_WARNING)
    return {"gguf": header, "chat_template": profile.chat_template, "warnings": warnings}


def portfolio_status(portfolio: PortfolioResult | None) -> dict[str, Any] | None:
    """The joint mapping, selected models and exploration slot (workload intelligence)."""
    if portfolio is None:
        return None
    document = portfolio_to_json(portfolio)
    document.pop("admission")
    return document


def status_revision(ctl: Controller) -> tuple[object, ...]:
    """What the status document depends on: the last semantic input, the safety and
    telemetry revisions, the last tick, the latest event, delivery holds, and the clock's
    second (a cached status is never more than ``STATUS_SECONDS`` old)."""
    return (
        int(ctl.clock() // STATUS_SECONDS),
        ctl.demand.revision,
        ctl.revisions.semantic,
        ctl.revisions["safety"],
        ctl.view.ticks,
        ctl.events.count,
        len(ctl.delivery.uncertain_markers),
        ctl.delivery.safety_error,
    )


def status_portfolio(ctl: Controller) -> tuple[PortfolioBundle | None, bool]:
    """The portfolio bundle a read-only status query shows, and whether it was reused.

    The tick's bundle is reused only when timestamp, node snapshots, model profiles and
    the telemetry revision are all identical; otherwise the portfolio is solved afresh
    on the current inputs (read-only: the plan and commands stay the tick's) and kept
    for the next status query on the same inputs.
    """
    desired = ctl.current_desired()
    if desired is None:
        return None, False
    now = ctl.clock()
    picture = ctl.demand.picture(now)
    hosts = ctl.registry.snapshot(now).hosts
    key: PortfolioKey = (now, hosts, tuple(desired.profiles), picture.revision)
    for bundle in (ctl.view.bundle, ctl.status_bundle):
        if bundle is not None and bundle.key == key:
            return bundle, True
    configured = [p.name for p in desired.profiles]
    forecast = with_correlation(ctl.demand.forecast(now, desired.policy), picture, configured)
    snapshot = FleetSnapshot(now=now, hosts=hosts, demand=forecast)
    bundle = PortfolioBundle(key, plan_portfolio(portfolio_inputs(desired, snapshot, picture)))
    ctl.status_bundle = bundle
    return bundle, False


def build_status(ctl: Controller) -> dict[str, Any]:
    now = ctl.clock()
    mode, refused = ctl.effective_mode()
    desired = ctl.current_desired()
    override = ctl.steering.override()
    memory = ctl.store.memory()
    view = ctl.view
    plan = view.plan
    bundle, reused = status_portfolio(ctl)
    portfolio = bundle.portfolio if bundle is not None else view.portfolio
    sources = view.correlation_sources
    result = view.result
    pending = sorted(ctl.store.pending(), key=lambda p: (p.queued, p.action_id))
    pending_rows = [_pending_json(p) for p in pending]
    delivered_ids = sorted(p.action_id for p in pending if p.delivered)
    withdrawn = [
        {
            "action_id": w.action_id,
            "kind": w.kind.value,
            "host_id": w.host_id,
            "model_id": w.model_id,
            "executable": False,
            "blocked": "withdrawn_destructive",
            "reason": f"withdrawn at {w.withdrawn_at:.0f}",
            "created_at": w.withdrawn_at,
        }
        for w in memory.withdrawn
    ]
    history = ctl.events.rows()[-200:]
    revisions = ctl.revisions.snapshot()
    tombstones = [
        {
            "model_id": t.model_id,
            "created_at": t.retired_at,
            "reason": "profile removed; target zero replicas",
        }
        for t in memory.tombstones
    ]
    hosts = _hosts(ctl, now)
    models = _models(ctl, now, mode)
    plan_json = plan_document(plan) if plan else None  # host rows: ``with_explanations``
    if plan_json is not None:
        plan_json["generation"] = str(view.generation) if view.generation else None
    warnings = ctl.all_warnings()
    if refused:
        warnings.append(refused)
    return {
        "schema_version": 1,
        "now": now,
        "controller": {
            "controller_id": ctl.authority.controller_id,
            "term": ctl.authority.term,
            "holds_authority": ctl.steering.holds_authority(),
            "leader_url": ctl.steering.leader_url(),
            "lease_expires_at": ctl.authority.lease_expires_at,
            "plan_generation": str(view.generation) if view.generation else None,
            "started_at": ctl.started_at,
            "version": __version__,
        },
        "mode": {
            "effective": mode.value,
            "desired": ctl.policy().mode.value,
            "override": None
            if override is None
            else {
                "mode": override.mode.value,
                "reason": override.reason,
                "set_at": override.set_at,
                "source": override.source,
            },
            "refused_automatic": refused,
        },
        "desired": ctl.desired.status(),
        "ownership": ownership_document(ctl),
        "hosts": hosts,
        "host_states": {s.value: sum(1 for h in hosts if h["state"] == s.value) for s in HostState},
        "profiles": [
            {
                "name": p.name,
                "memory_mb": p.memory_mb,
                "min_replicas": p.min_replicas,
                "max_replicas": p.max_replicas,
                "priority": p.priority,
                "artifact_sha256": p.artifact.sha256,
                "workload_scores": dict(p.workload_scores),
            }
            for p in (desired.profiles if desired else ())
        ],
        "model_count": len(desired.profiles) if desired else 0,
        "models": models,
        "tombstones": tombstones,
        "forecasts": [
            {**demand_json(d), "sources": list(sources.get(d.model_id, ()))}
            for d in (ctl.view.snapshot.demand if ctl.view.snapshot else ())
        ],
        "plan": plan_json,
        "reconciliation": None
        if result is None
        else {
            "mode": mode.value,
            "actions": [action_to_json(a) for a in result.actions],
            "deferred": [action_to_json(a) for a in result.deferred],
            "cancellations": [
                {"action_id": c.action_id, "reason": c.reason.value, "delivered": c.delivered}
                for c in result.cancellations
            ],
        },
        "pending_commands": pending_rows,
        "delivered_pending_action_ids": delivered_ids,
        "withdrawn_destructive": withdrawn,
        "unmet_constraints": [
            {
                "model_id": u.model_id,
                "code": u.code.value,
                "message": u.message,
                "missing_replicas": u.missing_replicas,
            }
            for u in (plan.unsatisfied if plan else ())
        ],
        "revisions": revisions,
        "last_tick": None
        if view.tick is None
        else {
            "at": view.tick.at,
            "duration_ms": round(view.tick.duration_ms, 3),
            "ok": view.tick.ok,
            "error": view.tick.error,
            "phases_ms": {phase: round(spent, 3) for phase, spent in view.tick.phases},
        },
        "last_successful_tick_duration_ms": (
            round(view.success_ms, 3) if view.success_ms is not None else None
        ),
        "delivery_safety_error": ctl.delivery.safety_error,
        "uncertain_delivery_markers": dict(sorted(ctl.delivery.uncertain_markers.items())),
        "warnings": warnings,
        "history": history,
        "admission": [admission_row_json(r) for r in portfolio.admission] if portfolio else [],
        "portfolio": portfolio_status(portfolio),
        "portfolio_bundle": {
            "reused": reused,
            "telemetry_revision": bundle.telemetry_revision if bundle is not None else None,
        },
    }
