"""Hypothesis properties of the reconciler over random plans, observations and queues.

Each property re-derives its safety fact from the inputs with a small oracle of
its own, rather than trusting the reconciler's internal indexes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.domain import (
    ActionKind,
    ControllerPolicy,
    DemandClass,
    FleetSnapshot,
    HostState,
    Mode,
    ModelProfile,
    Ownership,
    Plan,
    Preemption,
    ReceiptStatus,
    ResidencyState,
)
from gridctl.reconcile import (
    ActionKey,
    PendingAction,
    ReconcileResult,
    action_key,
    reconcile,
)
from gridctl.reconcile.seeding import fetched_remotely

from .builders import NOW, SHA_A, SHA_B, assign, done, host, pending_of, plan, profile, res

MODELS = ("a", "b", "c")
HOSTS = ("h1", "h2", "h3", "h4")
SETTINGS = settings(max_examples=300, deadline=None)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[object, ...]:
    profs: dict[str, ModelProfile] = {}
    for m in MODELS:
        profs[m] = profile(
            m,
            sha=draw(st.sampled_from([None, SHA_A, SHA_B])),
            priority=draw(st.sampled_from([10, 50, 90])),
            min_replicas=draw(st.integers(0, 1)),
            min_residency=draw(st.sampled_from([0.0, 300.0])),
        )
    hosts = []
    for h in HOSTS:
        residencies = []
        cached = []
        for m in MODELS:
            if draw(st.booleans()):
                residencies.append(
                    res(
                        m,
                        draw(st.sampled_from(list(ResidencyState))),
                        sha=draw(st.sampled_from([profs[m].artifact_sha256, SHA_B, None])),
                        ownership=draw(st.sampled_from([Ownership.MANAGED] * 3 + list(Ownership))),
                        pinned=draw(st.booleans()) and draw(st.booleans()),
                        active=draw(st.sampled_from([0, 0, 1, 3])),
                        loaded_at=draw(st.sampled_from([None, NOW - 10, NOW - 1000])),
                    )
                )
            if draw(st.booleans()):
                cached.append((m, profs[m].artifact_sha256))
        hosts.append(
            host(
                h,
                *residencies,
                cached=cached,
                state=draw(st.sampled_from([HostState.ACCEPTING] * 8 + list(HostState))),
                seen=NOW - draw(st.sampled_from([0.0, 0.0, 0.0, 10.0, 100.0])),
            )
        )
    pairs = [(m, h) for m in MODELS for h in HOSTS]
    chosen = draw(st.lists(st.sampled_from(pairs), unique=True, max_size=6))
    assignments = [
        assign(
            m,
            h,
            cls=draw(st.sampled_from(list(DemandClass))),
            priority=profs[m].priority,
        )
        for m, h in chosen
    ]
    targets = {m: sum(1 for x, _ in chosen if x == m) + draw(st.integers(0, 1)) for m in MODELS}
    preemptions = [
        Preemption(h, m, draw(st.sampled_from(MODELS)), "capacity")
        for h, m in draw(
            st.lists(st.sampled_from([(h, m) for m, h in pairs]), unique=True, max_size=2)
        )
    ]
    the_plan = plan(*assignments, preemptions=preemptions, targets=targets)
    pol = ControllerPolicy(
        mode=Mode.AUTOMATIC,
        max_concurrent_mutations=draw(st.integers(1, 4)),
        max_concurrent_mutations_per_host=draw(st.integers(1, 2)),
        artifact_fanout=draw(st.integers(1, 2)),
    )
    pending = []
    for i, (kind, h, m) in enumerate(
        draw(
            st.lists(
                st.tuples(
                    st.sampled_from(list(ActionKind)[:4]),
                    st.sampled_from(HOSTS),
                    st.sampled_from(MODELS),
                ),
                unique=True,
                max_size=3,
            )
        )
    ):
        pending.append(
            pending_of(
                kind,
                h,
                m,
                sha=profs[m].artifact_sha256,
                delivered=draw(st.booleans()),
                cls=None if kind.destructive else draw(st.sampled_from(list(DemandClass))),
                queued=i,
            )
        )
    history = [
        done(
            kind,
            h,
            m,
            draw(st.sampled_from([ReceiptStatus.SUCCEEDED, ReceiptStatus.FAILED])),
            at=NOW - draw(st.sampled_from([1.0, 50.0, 500.0])),
            sha=profs[m].artifact_sha256,
            attempt=5 + i,
        )
        for i, (kind, h, m) in enumerate(
            draw(
                st.lists(
                    st.tuples(
                        st.sampled_from(list(ActionKind)[:4]),
                        st.sampled_from(HOSTS),
                        st.sampled_from(MODELS),
                    ),
                    max_size=3,
                )
            )
        )
    ]
    snapshot = FleetSnapshot(now=NOW, hosts=tuple(hosts))
    return the_plan, snapshot, profs, pol, tuple(pending), tuple(history)


def _run(s: tuple[object, ...], mode: Mode = Mode.AUTOMATIC) -> ReconcileResult:
    the_plan, snapshot, profs, pol, pending, history = s
    return reconcile(the_plan, snapshot, profs, pol, mode, pending, history, NOW)  # type: ignore[arg-type]


def _routable(snapshot: FleetSnapshot, host_id: str) -> bool:
    h = snapshot.host(host_id)
    if h is None or not h.state.admits_new_work or h.last_heartbeat is None:
        return False
    return 0 <= NOW - h.last_heartbeat <= 30


def _fresh(snapshot: FleetSnapshot, host_id: str) -> bool:
    h = snapshot.host(host_id)
    return h is not None and h.last_heartbeat is not None and NOW - h.last_heartbeat <= 30


def _holds(snapshot: FleetSnapshot, sha: str | None) -> bool:
    """Some fresh host shows a verified copy of ``sha`` (cached, or a live residency)."""
    live = {ResidencyState.CACHED, ResidencyState.WARMING, ResidencyState.READY}
    live.add(ResidencyState.DRAINING)
    return any(
        _fresh(snapshot, h.host_id)
        and (
            any(c.artifact_sha256 == sha for c in h.cached)
            or any(r.artifact_sha256 == sha and r.state in live for r in h.residencies)
        )
        for h in snapshot.hosts
    )


def _ready_elsewhere(
    snapshot: FleetSnapshot, profs: dict[str, ModelProfile], model: str, host_id: str
) -> set[str]:
    sha = profs[model].artifact_sha256
    return {
        h.host_id
        for h in snapshot.hosts
        if h.host_id != host_id
        and _routable(snapshot, h.host_id)
        and any(
            r.model_id == model
            and r.state is ResidencyState.READY
            and (sha is None or r.artifact_sha256 == sha)
            for r in h.residencies
        )
    }


@SETTINGS
@given(scenarios())
def test_no_drain_of_a_required_replica_before_its_replacement_is_ready(
    s: tuple[object, ...],
) -> None:
    the_plan, snapshot, profs, *_ = s
    assert isinstance(the_plan, Plan) and isinstance(snapshot, FleetSnapshot)
    result = _run(s)
    preempted = {(p.host_id, p.model_id) for p in the_plan.preemptions}
    for a in result.actions:
        if a.kind is not ActionKind.DRAIN or not a.executable:
            continue
        if (a.host_id, a.model_id) in preempted:
            continue  # a staged preemption the plan names may take the victim's last replica
        ready = _ready_elsewhere(snapshot, profs, a.model_id, a.host_id)  # type: ignore[arg-type]
        for x in the_plan.assignments_for(a.model_id):
            assert x.host_id == a.host_id or x.host_id in ready, (a, ready)
        floor = max(dict(the_plan.targets).get(a.model_id, 0), profs[a.model_id].min_replicas)  # type: ignore[index]
        assert len(ready) >= floor


@SETTINGS
@given(scenarios())
def test_no_unload_while_requests_are_in_flight(s: tuple[object, ...]) -> None:
    _, snapshot, *_ = s
    assert isinstance(snapshot, FleetSnapshot)
    for p in _run(s).enqueue:
        if p.action.kind is ActionKind.UNLOAD:
            h = snapshot.host(p.action.host_id)
            assert h is not None
            rows = [r for r in h.residencies if r.model_id == p.action.model_id]
            assert rows and all(r.active_requests == 0 for r in rows)


@SETTINGS
@given(scenarios())
def test_no_action_on_external_manual_or_pinned_residencies(s: tuple[object, ...]) -> None:
    _, snapshot, _, _, pending, _ = s
    assert isinstance(snapshot, FleetSnapshot)
    pending_ids = {p.action_id for p in pending}  # type: ignore[attr-defined]
    for mode in (Mode.AUTOMATIC, Mode.RECOMMEND, Mode.OBSERVE):
        result = _run(s, mode)
        for a in result.actions + result.deferred:
            if a.action_id in pending_ids:
                continue
            h = snapshot.host(a.host_id)
            rows = [r for r in (h.residencies if h else ()) if r.model_id == a.model_id]
            assert all(r.actuatable for r in rows), (a, rows)
            if a.kind.destructive:
                assert rows


@SETTINGS
@given(scenarios())
def test_never_more_executable_actions_than_the_governors_allow(s: tuple[object, ...]) -> None:
    _, snapshot, profs, pol, pending, _ = s
    assert isinstance(pol, ControllerPolicy) and isinstance(snapshot, FleetSnapshot)
    result = _run(s)
    cancelled = {c.action_id for c in result.cancellations}
    kept = [p for p in pending if p.action_id not in cancelled]  # type: ignore[attr-defined]
    new = [p.action for p in result.enqueue]
    assert len(new) <= max(0, pol.max_concurrent_mutations - len(kept))
    for h in HOSTS:
        held = sum(1 for p in kept if p.action.host_id == h)
        mine = sum(1 for a in new if a.host_id == h)
        assert mine <= max(0, pol.max_concurrent_mutations_per_host - held)
    for sha in (SHA_A, SHA_B):
        # replicas (host, model) loading this exact artifact, pending or observed running
        wants = {m for m, p in profs.items() if p.artifact_sha256 == sha}  # type: ignore[attr-defined]
        loading = {
            (p.action.host_id, p.action.model_id)
            for p in kept
            if p.action.kind is ActionKind.LOAD and p.action.artifact_sha256 == sha
        }
        loading |= {
            (h.host_id, r.model_id)
            for h in snapshot.hosts
            for r in h.residencies
            if r.state is ResidencyState.LOADING
            and r.ownership is Ownership.MANAGED
            and (r.artifact_sha256 == sha or (r.artifact_sha256 is None and r.model_id in wants))
        }
        starting = {
            (a.host_id, a.model_id)
            for a in new
            if a.kind is ActionKind.LOAD and a.artifact_sha256 == sha
        } - loading
        assert len(starting) <= max(0, pol.artifact_fanout - len(loading))
    assert all(a.executable for a in new)


@SETTINGS
@given(scenarios())
def test_ids_are_stable_and_a_rerun_tick_issues_nothing_new(s: tuple[object, ...]) -> None:
    first = _run(s)
    assert _run(s) == first
    the_plan, snapshot, profs, pol, pending, history = s
    cancelled = {c.action_id for c in first.cancellations}
    carried: list[PendingAction] = [p for p in pending if p.action_id not in cancelled]  # type: ignore[attr-defined]
    queue = tuple(carried) + first.enqueue
    second = reconcile(
        the_plan, snapshot, profs, pol, Mode.AUTOMATIC, queue, history, NOW + 1, memory=first.memory
    )  # type: ignore[arg-type]
    assert second.enqueue == ()
    assert second.cancellations == ()
    by_key: dict[ActionKey, str] = {action_key(a): a.action_id for a in first.actions}
    for a in second.actions:
        if action_key(a) in by_key:
            assert a.action_id == by_key[action_key(a)]


@SETTINGS
@given(scenarios())
def test_progress_an_unmet_target_with_a_free_host_and_slots_gets_an_action(
    s: tuple[object, ...],
) -> None:
    the_plan, snapshot, profs, pol, _, _ = s
    assert isinstance(the_plan, Plan) and isinstance(snapshot, FleetSnapshot)
    assert isinstance(pol, ControllerPolicy)
    quiet = (the_plan, snapshot, profs, pol, (), ())
    result = _run(quiet)

    def free(m: str, host_id: str) -> bool:
        h = snapshot.host(host_id)
        if h is None or not _routable(snapshot, host_id):
            return False
        if any(r.model_id == m for r in h.residencies):
            return False
        sha = profs[m].artifact_sha256  # type: ignore[index]
        # a managed load reporting no digest counts toward its model's declared artifact
        running = {
            (x.host_id, r.model_id)
            for x in snapshot.hosts
            for r in x.residencies
            if r.state is ResidencyState.LOADING
            and r.ownership is Ownership.MANAGED
            and sha
            and (
                r.artifact_sha256 == sha
                or (r.artifact_sha256 is None and profs[r.model_id].artifact_sha256 == sha)  # type: ignore[index]
            )
        }
        seeded = sha and fetched_remotely(profs[m].artifact.source)  # type: ignore[index]
        alive = any(_fresh(snapshot, x) for x, _ in running)
        if seeded and alive and not _holds(snapshot, sha):
            return False  # one origin fetch at a time until a verified copy exists
        return len(running) < pol.artifact_fanout

    if any(free(a.model_id, a.host_id) for a in the_plan.assignments):
        assert any(a.executable for a in result.actions)
