"""Named builders for reconciler tests: hosts, residencies, profiles, plans."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from gridctl.domain import (
    Action,
    ActionKind,
    Artifact,
    Assignment,
    CachedArtifact,
    ControllerPolicy,
    DemandClass,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    Mode,
    ModelProfile,
    Ownership,
    Plan,
    Preemption,
    ReceiptStatus,
    Residency,
    ResidencyState,
)
from gridctl.reconcile import (
    ActionKey,
    ControllerMemory,
    HistoryEntry,
    PendingAction,
    ReconcileResult,
    derive_action_id,
    reconcile,
)

NOW = 1_800_000_000.0
SHA_A = "a" * 64
SHA_B = "b" * 64
SHA_C = "c" * 64


def profile(
    name: str,
    *,
    sha: str | None = None,
    priority: int = 50,
    min_replicas: int = 0,
    min_residency: float = 0.0,
    source: str | None = None,
    load_seconds: float = 30.0,
    warm_seconds: float = 10.0,
) -> ModelProfile:
    return ModelProfile(
        name=name,
        memory_mb=1000,
        artifact=Artifact(sha256=sha, source=source, size_mb=100 if source else None),
        priority=priority,
        min_replicas=min_replicas,
        min_residency_seconds=min_residency,
        load_seconds=load_seconds,
        warm_seconds=warm_seconds,
    )


def profiles(*items: ModelProfile) -> dict[str, ModelProfile]:
    return {p.name: p for p in items}


def res(
    model: str,
    state: ResidencyState = ResidencyState.READY,
    *,
    sha: str | None = None,
    ownership: Ownership = Ownership.MANAGED,
    pinned: bool = False,
    active: int = 0,
    loaded_at: float | None = NOW - 3600,
) -> Residency:
    return Residency(
        model_id=model,
        memory_mb=1000,
        state=state,
        artifact_sha256=sha,
        loaded_at=loaded_at,
        ownership=ownership,
        pinned=pinned,
        active_requests=active,
    )


def host(
    host_id: str,
    *residencies: Residency,
    cached: Iterable[tuple[str, str | None]] = (),
    state: HostState = HostState.ACCEPTING,
    seen: float | None = NOW,
) -> HostSnapshot:
    return HostSnapshot(
        host_id=host_id,
        resources=HostResources(capacity_mb=16000),
        state=state,
        last_heartbeat=seen,
        residencies=tuple(residencies),
        cached=tuple(CachedArtifact(m, s) for m, s in cached),
    )


def fleet(*hosts: HostSnapshot, now: float = NOW) -> FleetSnapshot:
    return FleetSnapshot(now=now, hosts=tuple(hosts))


def assign(
    model: str,
    host_id: str,
    *,
    cls: DemandClass = DemandClass.BASELINE,
    priority: int = 50,
) -> Assignment:
    return Assignment(
        model_id=model,
        host_id=host_id,
        runtime="llama.cpp",
        memory_mb=1000,
        reason=f"{cls.value} demand",
        demand_class=cls,
        priority=priority,
    )


def plan(
    *assignments: Assignment,
    preemptions: Sequence[Preemption] = (),
    targets: dict[str, int] | None = None,
) -> Plan:
    if targets is None:
        counts: dict[str, int] = {}
        for a in assignments:
            counts[a.model_id] = counts.get(a.model_id, 0) + 1
        targets = counts
    return Plan(
        input_digest="d" * 16,
        now=NOW,
        targets=tuple(sorted(targets.items())),
        assignments=tuple(assignments),
        preemptions=tuple(preemptions),
        unsatisfied=(),
        explanations=(),
    )


def policy(**changes: object) -> ControllerPolicy:
    defaults: dict[str, object] = {"mode": Mode.AUTOMATIC, "max_concurrent_mutations": 8}
    defaults.update(changes)
    return ControllerPolicy(**defaults)  # type: ignore[arg-type]


def pending_of(
    kind: ActionKind,
    host_id: str,
    model: str,
    *,
    sha: str | None = None,
    delivered: bool = False,
    cls: DemandClass | None = DemandClass.BASELINE,
    priority: int = 50,
    attempt: int = 0,
    restored: bool = False,
    queued: int = 0,
    depends_on: tuple[str, ...] = (),
) -> PendingAction:
    key = ActionKey(kind, host_id, model, sha)
    return PendingAction(
        action=Action(
            action_id=derive_action_id(key, attempt),
            kind=kind,
            host_id=host_id,
            model_id=model,
            artifact_sha256=sha,
            attempt=attempt,
            executable=True,
            priority=priority,
            depends_on=depends_on,
            created_at=NOW - 5,
        ),
        delivered=delivered,
        delivered_at=NOW - 4 if delivered else None,
        demand_class=cls,
        restored=restored,
        queued=queued,
    )


def done(
    kind: ActionKind,
    host_id: str,
    model: str,
    status: ReceiptStatus = ReceiptStatus.SUCCEEDED,
    *,
    at: float,
    sha: str | None = None,
    attempt: int = 0,
    acknowledged: bool = True,
) -> HistoryEntry:
    key = ActionKey(kind, host_id, model, sha)
    return HistoryEntry(
        action_id=derive_action_id(key, attempt),
        kind=kind,
        host_id=host_id,
        model_id=model,
        artifact_sha256=sha,
        attempt=attempt,
        status=status,
        finished_at=at,
        acknowledged=acknowledged,
    )


def run(
    the_plan: Plan,
    snapshot: FleetSnapshot,
    profs: dict[str, ModelProfile],
    *,
    mode: Mode = Mode.AUTOMATIC,
    pol: ControllerPolicy | None = None,
    pending: Sequence[PendingAction] = (),
    history: Sequence[HistoryEntry] = (),
    now: float = NOW,
    memory: ControllerMemory | None = None,
) -> ReconcileResult:
    return reconcile(
        the_plan,
        snapshot,
        profs,
        pol or policy(),
        mode,
        pending,
        history,
        now,
        memory=memory,
    )


def find(result: ReconcileResult, kind: ActionKind, host_id: str, model: str) -> Action:
    for a in result.actions:
        if a.kind is kind and a.host_id == host_id and a.model_id == model:
            return a
    raise AssertionError(f"no {kind.value} {model}@{host_id} in {summary(result)}")


def summary(result: ReconcileResult) -> list[tuple[str, str, str, bool, str | None]]:
    return [(a.kind.value, a.model_id, a.host_id, a.executable, a.blocked) for a in result.actions]
