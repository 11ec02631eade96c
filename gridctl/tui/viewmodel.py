"""The dashboard's view-model: what every panel shows, built by one pure function.

``build_view`` turns a status document (``GET /allocator/status``, schema
``schemas/wire/status.schema.json``) into frozen rows. Widgets only render these
rows; they never read the raw JSON. Ages are measured against the document's own
``now``, so the same document always renders the same screen, whether it came
from a live controller or a saved file. The function tolerates missing optional
fields (older controllers, hand-trimmed post-mortem files) by showing them as
unknown rather than failing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gridctl.domain import ActionKind
from gridctl.errors import issue_json_text
from gridctl.tui.plan_diff import PlanLine, plan_lines

HOST_STATES = ("accepting", "throttled", "draining", "paused", "unhealthy", "quarantined")
RECEIPT_LIMIT = 25


@dataclass(frozen=True)
class ResidencyCell:
    model_id: str
    state: str
    memory_mb: int
    ownership: str
    routable: bool | None
    active_requests: int


@dataclass(frozen=True)
class TransferCell:
    """One artifact download running on a host."""

    model_id: str
    bytes_done: int
    bytes_total: int | None
    rate_bytes_per_second: float

    @property
    def fraction(self) -> float | None:
        if not self.bytes_total:
            return None
        return min(1.0, max(0.0, self.bytes_done / self.bytes_total))


@dataclass(frozen=True)
class HostRow:
    host_id: str
    state: str
    reported_state: str | None
    stale: bool
    unhealthy_reasons: tuple[str, ...]
    capacity_mb: int
    reserved_mb: int
    external_mb: int
    used_mb: int
    free_mb: int
    failure_domain: str
    heartbeat_age_seconds: float | None
    residencies: tuple[ResidencyCell, ...]
    cached_models: tuple[str, ...]
    tags: tuple[str, ...]
    runtimes: tuple[str, ...]
    role: str
    transfers: tuple[TransferCell, ...] = ()

    @property
    def search_text(self) -> str:
        parts = [self.host_id, self.state, self.failure_domain, self.role, *self.tags]
        parts.extend(f"{r.model_id} {r.state}" for r in self.residencies)
        return " ".join(parts).lower()


@dataclass(frozen=True)
class AdmissionRow:
    workload: str
    state: str
    model_id: str | None
    offered_concurrency: float | None
    desired: int
    planned: int
    ready: int
    missing: int
    eligible_hosts: int | None
    startup_estimate_seconds: float | None
    reason: str
    # the chosen model's outcome evidence and a proactive admission's learned edge
    evidence: tuple[str, ...] = ()

    @property
    def search_text(self) -> str:
        return f"{self.workload} {self.state} {self.model_id or ''} {self.reason}".lower()


@dataclass(frozen=True)
class ModelRow:
    model_id: str
    desired: int
    planned: int
    ready: int
    missing: int
    health: str
    sync: str
    reason: str
    unmet: tuple[str, ...]
    retiring: bool

    @property
    def search_text(self) -> str:
        return " ".join([self.model_id, self.health, self.sync, self.reason, *self.unmet]).lower()


@dataclass(frozen=True)
class CommandRow:
    """A pending, delivered or withdrawn command, or a recent receipt."""

    group: str  # pending | delivered | withdrawn | receipt
    action_id: str
    kind: str
    host_id: str
    model_id: str
    status: str
    blocked: str | None
    reason: str
    age_seconds: float | None
    duration_seconds: float | None

    @property
    def search_text(self) -> str:
        fields = [self.group, self.action_id, self.kind, self.host_id, self.model_id]
        return " ".join([*fields, self.status, self.blocked or "", self.reason]).lower()


@dataclass(frozen=True)
class HistoryRow:
    age_seconds: float
    event: str
    host_id: str | None
    model_id: str | None
    action_id: str | None
    message: str
    duration_seconds: float | None

    @property
    def search_text(self) -> str:
        fields = [self.event, self.host_id or "", self.model_id or "", self.action_id or ""]
        return " ".join([*fields, self.message]).lower()


@dataclass(frozen=True)
class RejectedRevision:
    revision: str
    age_seconds: float
    errors: tuple[str, ...]


@dataclass(frozen=True)
class ModeView:
    effective: str
    desired: str
    override_mode: str | None
    override_reason: str
    override_source: str
    override_age_seconds: float | None
    refused_automatic: str | None

    @property
    def drifted(self) -> bool:
        """True when an operator override (not git) decides the mode."""
        return self.override_mode is not None


@dataclass(frozen=True)
class DesiredView:
    source: str
    directory: str | None
    revision: str | None
    dirty: bool | None
    last_good_revision: str | None
    latest_seen_revision: str | None
    rejected: tuple[RejectedRevision, ...]
    warnings: tuple[str, ...]
    where: str = ""  # repository, ref and path of a git source
    note: str = ""  # "dirty working tree, not applied", the worktree label, a source error
    uncommitted: tuple[str, ...] = ()
    overrides: tuple[str, ...] = ()  # operator values overriding git (docs/ownership.md)


@dataclass(frozen=True)
class ControllerView:
    controller_id: str
    term: int
    holds_authority: bool
    plan_generation: str | None
    version: str


@dataclass(frozen=True)
class DashboardView:
    now: float
    controller: ControllerView
    mode: ModeView
    desired: DesiredView
    hosts: tuple[HostRow, ...]
    admission: tuple[AdmissionRow, ...]
    models: tuple[ModelRow, ...]
    plan: tuple[PlanLine, ...]
    plan_exists: bool
    commands: tuple[CommandRow, ...]
    history: tuple[HistoryRow, ...]
    unmet: tuple[str, ...]
    warnings: tuple[str, ...]
    revisions: Mapping[str, int]
    last_tick: str
    delivery_safety_error: str | None
    executable_actions: int

    def host_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(HOST_STATES, 0)
        for host in self.hosts:
            counts[host.state] = counts.get(host.state, 0) + 1
        return counts


def _str(value: Any, default: str = "") -> str:
    return default if value is None else str(value)


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) else 0


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _age(now: float, at: Any) -> float | None:
    stamp = _num(at)
    return None if stamp is None else max(0.0, now - stamp)


def _items(value: Any) -> Sequence[Mapping[str, Any]]:
    if not isinstance(value, list):
        return ()
    return [item for item in value if isinstance(item, Mapping)]


def render_issue(issue: Mapping[str, Any]) -> str:
    """An error in the same ``FILE:LINE:COL: Kind/name: /pointer: message`` form as validate."""
    return issue_json_text(issue)


def host_rows(status: Mapping[str, Any]) -> tuple[HostRow, ...]:
    rows = []
    for host in _items(status.get("hosts")):
        residencies = tuple(
            ResidencyCell(
                model_id=_str(r.get("model_id")),
                state=_str(r.get("state"), "unknown"),
                memory_mb=_int(r.get("memory_mb")),
                ownership=_str(r.get("ownership"), "managed"),
                routable=r.get("routable") if isinstance(r.get("routable"), bool) else None,
                active_requests=_int(r.get("active_requests")),
            )
            for r in sorted(_items(host.get("residencies")), key=lambda r: _str(r.get("model_id")))
        )
        capacity = _int(host.get("capacity_mb"))
        reserved = _int(host.get("reserved_mb"))
        external = _int(host.get("external_mb"))
        used = _int(host.get("used_mb"))
        free = host.get("free_mb")
        rows.append(
            HostRow(
                host_id=_str(host.get("host_id")),
                state=_str(host.get("state"), "unknown"),
                reported_state=host.get("reported_state"),
                stale=bool(host.get("stale")),
                unhealthy_reasons=tuple(map(str, host.get("unhealthy_reasons") or ())),
                capacity_mb=capacity,
                reserved_mb=reserved,
                external_mb=external,
                used_mb=used,
                free_mb=_int(free) if free is not None else capacity - reserved - external - used,
                failure_domain=_str(host.get("failure_domain"), "-"),
                heartbeat_age_seconds=_num(host.get("heartbeat_age_seconds")),
                residencies=residencies,
                cached_models=tuple(sorted(map(str, host.get("cached_models") or ()))),
                tags=tuple(map(str, host.get("tags") or ())),
                runtimes=tuple(map(str, host.get("runtimes") or ())),
                role=_str(host.get("role")),
                transfers=tuple(
                    TransferCell(
                        model_id=_str(t.get("model_id")),
                        bytes_done=_int(t.get("bytes_done")),
                        bytes_total=_int(t.get("bytes_total")) or None,
                        rate_bytes_per_second=_num(t.get("rate_bytes_per_second")) or 0.0,
                    )
                    for t in sorted(
                        _items(host.get("transfers")), key=lambda t: _str(t.get("model_id"))
                    )
                ),
            )
        )
    return tuple(sorted(rows, key=lambda row: row.host_id))


def _evidence_lines(status: Mapping[str, Any], workload: str, model: object) -> tuple[str, ...]:
    """Status's evidence for the workload's chosen model, and the edge behind a
    proactive admission (both from the portfolio section)."""
    portfolio = status.get("portfolio")
    if not isinstance(portfolio, Mapping):
        return ()
    lines: list[str] = []
    for gate in _items(portfolio.get("gates")):
        if gate.get("workload") == workload and gate.get("workload_edge"):
            confidence = _num(gate.get("edge_confidence"))
            shown = "-" if confidence is None else f"{confidence:.2f}"
            lines.append(f"learned edge: {gate['workload_edge']} (confidence {shown})")
    for row in _items(portfolio.get("candidates")):
        if row.get("workload") != workload or row.get("model") != model:
            continue
        age = _num(row.get("evidence_age_seconds"))
        lines.append(
            f"evidence: {_num(row.get('effective_samples')) or 0:.1f} samples, "
            f"confidence {_num(row.get('confidence')) or 0:.2f}, "
            f"quality confidence {_num(row.get('quality_confidence')) or 0:.2f}, "
            f"age {'-' if age is None else f'{age:.0f}s'}, "
            f"freshness {_num(row.get('evidence_freshness')) or 0:.2f}, "
            f"exploration bonus {_num(row.get('exploration_bonus')) or 0:.2f}"
        )
    return tuple(lines)


def admission_rows(status: Mapping[str, Any]) -> tuple[AdmissionRow, ...]:
    rows = [
        AdmissionRow(
            workload=_str(row.get("workload")),
            state=_str(row.get("state"), "awaiting-plan"),
            model_id=row.get("model_id"),
            offered_concurrency=_num(row.get("offered_concurrency")),
            desired=_int(row.get("desired")),
            planned=_int(row.get("planned")),
            ready=_int(row.get("ready")),
            missing=_int(row.get("missing")),
            eligible_hosts=row.get("eligible_hosts") if "eligible_hosts" in row else None,
            startup_estimate_seconds=_num(row.get("startup_estimate_seconds")),
            reason=_str(row.get("reason")),
            evidence=_evidence_lines(status, _str(row.get("workload")), row.get("model_id")),
        )
        for row in _items(status.get("admission"))
    ]
    return tuple(sorted(rows, key=lambda row: row.workload))


def model_rows(status: Mapping[str, Any]) -> tuple[ModelRow, ...]:
    unmet_by_model: dict[str, list[str]] = {}
    for item in _items(status.get("unmet_constraints")):
        unmet_by_model.setdefault(_str(item.get("model_id")), []).append(_str(item.get("code")))
    rows = []
    for row in _items(status.get("models")):
        model_id = _str(row.get("model_id"))
        unmet = list(map(str, row.get("unmet") or ()))
        unmet.extend(
            code
            for code in unmet_by_model.get(model_id, ())
            if not any(entry.split(":", 1)[0] == code for entry in unmet)
        )
        rows.append(
            ModelRow(
                model_id=model_id,
                desired=_int(row.get("desired")),
                planned=_int(row.get("planned")),
                ready=_int(row.get("ready")),
                missing=_int(row.get("missing")),
                health=_str(row.get("health"), "Unknown"),
                sync=_str(row.get("sync"), "OutOfSync"),
                reason=_str(row.get("reason")),
                unmet=tuple(unmet),
                retiring=bool(row.get("retiring")),
            )
        )
    return tuple(sorted(rows, key=lambda row: row.model_id))


def _command(group: str, action: Mapping[str, Any], now: float) -> CommandRow:
    return CommandRow(
        group=group,
        action_id=_str(action.get("action_id")),
        kind=_str(action.get("kind")),
        host_id=_str(action.get("host_id")),
        model_id=_str(action.get("model_id")),
        status=_str(action.get("status"), "delivered" if group == "delivered" else "queued"),
        blocked=action.get("blocked"),
        reason=_str(action.get("reason")),
        age_seconds=_age(now, action.get("delivered_at") or action.get("created_at")),
        duration_seconds=None,
    )


def receipt_kind(event: str) -> tuple[str, str]:
    """(kind, outcome) of a receipt event the controller names ``KIND_STATUS``
    (``warm_succeeded``); ("-", event) for any other name."""
    kind, _, outcome = event.partition("_")
    if kind in {k.value for k in ActionKind} and outcome:
        return kind, outcome
    return "-", event


def command_rows(status: Mapping[str, Any], now: float) -> tuple[CommandRow, ...]:
    """Pending (split by delivery), withdrawn destructive, then the newest receipts."""
    delivered = set(map(str, status.get("delivered_pending_action_ids") or ()))
    rows = [
        _command("delivered" if _str(a.get("action_id")) in delivered else "pending", a, now)
        for a in _items(status.get("pending_commands"))
    ]
    rows.sort(key=lambda row: (row.group != "pending", row.action_id))
    rows.extend(
        sorted(
            (_command("withdrawn", a, now) for a in _items(status.get("withdrawn_destructive"))),
            key=lambda row: row.action_id,
        )
    )
    receipts = [e for e in _items(status.get("history")) if e.get("action_id")]
    receipts = [e for e in receipts if e.get("duration_seconds") is not None]
    receipts.sort(key=lambda e: (-float(e.get("at", 0)), _str(e.get("action_id"))))
    for event in receipts[:RECEIPT_LIMIT]:
        kind, outcome = receipt_kind(_str(event.get("event")))
        rows.append(
            CommandRow(
                group="receipt",
                action_id=_str(event.get("action_id")),
                kind=_str(event.get("kind"), kind),
                host_id=_str(event.get("host_id")),
                model_id=_str(event.get("model_id")),
                status=outcome,
                blocked=None,
                reason=_str(event.get("message")),
                age_seconds=_age(now, event.get("at")),
                duration_seconds=_num(event.get("duration_seconds")),
            )
        )
    return tuple(rows)


def history_rows(status: Mapping[str, Any], now: float) -> tuple[HistoryRow, ...]:
    """Newest first; ties keep the document's order so equal timestamps stay stable."""
    events = list(enumerate(_items(status.get("history"))))
    events.sort(key=lambda pair: (-float(pair[1].get("at", 0)), pair[0]))
    return tuple(
        HistoryRow(
            age_seconds=_age(now, event.get("at")) or 0.0,
            event=_str(event.get("event")),
            host_id=event.get("host_id"),
            model_id=event.get("model_id"),
            action_id=event.get("action_id"),
            message=_str(event.get("message")),
            duration_seconds=_num(event.get("duration_seconds")),
        )
        for _, event in events
    )


def mode_view(status: Mapping[str, Any], now: float) -> ModeView:
    mode = status.get("mode") or {}
    override = mode.get("override") or {}
    return ModeView(
        effective=_str(mode.get("effective"), "unknown"),
        desired=_str(mode.get("desired"), "unknown"),
        override_mode=override.get("mode"),
        override_reason=_str(override.get("reason")),
        override_source=_str(override.get("source")),
        override_age_seconds=_age(now, override.get("set_at")),
        refused_automatic=mode.get("refused_automatic"),
    )


def desired_view(status: Mapping[str, Any], now: float) -> DesiredView:
    desired = status.get("desired") or {}
    rejected = tuple(
        RejectedRevision(
            revision=_str(item.get("revision")),
            age_seconds=_age(now, item.get("at")) or 0.0,
            errors=tuple(render_issue(issue) for issue in _items(item.get("errors"))),
        )
        for item in _items(desired.get("rejected"))
    )
    return DesiredView(
        source=_str(desired.get("source"), "unknown"),
        directory=desired.get("directory"),
        revision=desired.get("revision"),
        dirty=desired.get("dirty"),
        last_good_revision=desired.get("last_good_revision"),
        latest_seen_revision=desired.get("latest_seen_revision"),
        rejected=rejected,
        warnings=tuple(render_issue(issue) for issue in _items(desired.get("warnings"))),
        overrides=tuple(
            f"{o.get('field')}: {o.get('owner')} {o.get('value')} (git: {o.get('git')})"
            for o in _items((status.get("ownership") or {}).get("overrides"))
            if o.get("field") != "mode"  # the mode line draws its own drift
        ),
        **_source_fields(desired),
    )


def _source_fields(desired: Mapping[str, Any]) -> dict[str, Any]:
    """Where a git source reads from and what the working tree holds beyond the commit."""
    tree = desired.get("working_tree")
    tree = tree if isinstance(tree, Mapping) else {}
    dirty = bool(tree.get("dirty"))
    where = ""
    if desired.get("source") == "git":
        where = f"{desired.get('repository')} {desired.get('ref')} path {desired.get('path')}"
    note = _str(desired.get("error")) or (
        _str(tree.get("note")) if dirty else _str(desired.get("note"))
    )
    paths = tree.get("paths") if dirty else ()
    return {
        "where": where,
        "note": note,
        "uncommitted": tuple(str(p) for p in paths or ()),
    }


def _last_tick(status: Mapping[str, Any], now: float) -> str:
    tick = status.get("last_tick")
    if not isinstance(tick, Mapping):
        return "no tick yet"
    age = _age(now, tick.get("at"))
    when = "?" if age is None else f"{age:.0f}s ago"
    outcome = "ok" if tick.get("ok", True) else f"failed: {tick.get('error') or '?'}"
    duration = _num(tick.get("duration_ms"))
    took = "" if duration is None else f" in {duration:.0f} ms"
    return f"{when}{took}, {outcome}"


def build_view(status: Mapping[str, Any]) -> DashboardView:
    """The whole dashboard for one status document. Pure: no clock, no I/O."""
    now = float(status.get("now") or 0.0)
    controller = status.get("controller") or {}
    revisions = status.get("revisions") or {}
    reconciliation = status.get("reconciliation") or {}
    actions = _items(reconciliation.get("actions"))
    plan = status.get("plan")
    return DashboardView(
        now=now,
        controller=ControllerView(
            controller_id=_str(controller.get("controller_id"), "?"),
            term=_int(controller.get("term")),
            holds_authority=bool(controller.get("holds_authority")),
            plan_generation=controller.get("plan_generation"),
            version=_str(controller.get("version")),
        ),
        mode=mode_view(status, now),
        desired=desired_view(status, now),
        hosts=host_rows(status),
        admission=admission_rows(status),
        models=model_rows(status),
        plan=plan_lines(plan if isinstance(plan, Mapping) else None, status.get("hosts"), actions),
        plan_exists=isinstance(plan, Mapping),
        commands=command_rows(status, now),
        history=history_rows(status, now),
        unmet=tuple(
            f"{u.get('model_id')}: {u.get('code')}: {u.get('message')}"
            for u in _items(status.get("unmet_constraints"))
        ),
        warnings=tuple(map(str, status.get("warnings") or ())),
        revisions={
            key: _int(revisions.get(key)) for key in ("dirty", "processed", "success", "safety")
        },
        last_tick=_last_tick(status, now),
        delivery_safety_error=status.get("delivery_safety_error"),
        executable_actions=sum(1 for a in actions if a.get("executable")),
    )
