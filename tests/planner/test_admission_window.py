"""Admission rows never fall back while the workload's model is ready and serving it.

Replays the real-process timeline of unbound coding traffic through the demand
learner and the portfolio planner, with every time an argument: refusals about
once a second while nothing serves coding, the coder planned, warming and ready,
then one answer that takes longer than the demand window to come back (a loaded
machine). While that answer is in flight the refusals that admitted the workload
leave the 20-second window, so the evidence gate closes; the row must still say
ready, because the router keeps serving coding from the ready coder.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.demand import DemandLearner
from gridctl.demand.features import features_of
from gridctl.domain import (
    ControllerPolicy,
    FleetSnapshot,
    HostResources,
    HostSnapshot,
    HostState,
    ModelProfile,
    Residency,
    ResidencyState,
    WorkloadCatalog,
)
from gridctl.domain.profiles import Artifact
from gridctl.planner.portfolio import inputs_from_picture, plan_portfolio
from gridctl.planner.portfolio_types import AdmissionRow, AdmissionState

T0 = 1_800_000_000.3
SHA = "c" * 64
POLICY = replace(ControllerPolicy(), demand_bucket_seconds=2.0, demand_window_buckets=10)
CATALOG = WorkloadCatalog()
PROFILES = (
    ModelProfile(
        name="gemma-coder",
        memory_mb=1024,
        workload_scores={"coding": 1.0},
        max_replicas=1,
        artifact=Artifact(sha256=SHA),
    ),
    ModelProfile(
        name="gemma-general",
        memory_mb=1024,
        workload_scores={"general": 1.0},
        max_replicas=1,
        artifact=Artifact(sha256=SHA),
    ),
)
ORDER = {
    AdmissionState.AWAITING_PLAN: 0,
    AdmissionState.PLANNED: 1,
    AdmissionState.STARTING: 2,
    AdmissionState.READY: 3,
}
REFUSAL_GAP = 1.02  # one request, a one-second pause, the next request
REFUSALS = 12
ANSWER_SECONDS = 24.0  # longer than the 20-second demand window


def learner() -> DemandLearner:
    result = DemandLearner(POLICY, CATALOG)
    result.configure({p.name: p.artifact.sha256 for p in PROFILES})
    return result


def refused(learner: DemandLearner, t: float) -> None:
    learner.observe(
        features_of(
            t=t,
            endpoint="chat",
            model="auto",
            served_model=None,
            workload="coding",
            service_seconds=0.01,
            outcome="rejected",
        )
    )


def answered(learner: DemandLearner, t: float, seconds: float) -> None:
    learner.observe(
        features_of(
            t=t,
            endpoint="chat",
            model="auto",
            served_model="gemma-coder",
            workload="coding",
            service_seconds=seconds,
            outcome="ok",
            artifact_sha256=SHA,
        )
    )


def fleet(now: float, coder: ResidencyState | None) -> FleetSnapshot:
    residencies = (
        ()
        if coder is None
        else (
            Residency(
                "gemma-coder",
                1024,
                coder,
                artifact_sha256=SHA,
                runtime="llama.cpp",
                loaded_at=now - 5,
            ),
        )
    )
    host = HostSnapshot(
        host_id="local-1",
        resources=HostResources(
            capacity_mb=16384, reserved_mb=1024, max_models=2, disk_free_mb=100_000
        ),
        state=HostState.ACCEPTING,
        residencies=residencies,
        last_heartbeat=now - 0.5,
    )
    return FleetSnapshot(now, (host,), ())


def coding_row(learner: DemandLearner, now: float, coder: ResidencyState | None) -> AdmissionRow:
    picture = learner.picture(now)
    result = plan_portfolio(
        inputs_from_picture(PROFILES, fleet(now, coder), POLICY, picture, CATALOG)
    )
    (row,) = [r for r in result.admission if r.workload == "coding"]
    return row


def test_a_slow_answer_outliving_the_window_never_sends_the_row_back() -> None:
    book = learner()
    rows: list[tuple[float, AdmissionRow]] = []
    coder_at = {2: None, 3: None, 5: ResidencyState.WARMING, REFUSALS: ResidencyState.READY}
    state: ResidencyState | None = None
    for i in range(REFUSALS):
        t = T0 + i * REFUSAL_GAP
        refused(book, t)
        state = coder_at.get(i + 1, state)
        rows.append((t, coding_row(book, t + 0.1, state)))
    started = T0 + REFUSALS * REFUSAL_GAP
    for waited in (5.0, 10.0, 15.0, 18.0, 19.0, 20.0):  # the answer still in flight
        picture = book.picture(started + waited)
        coding = picture.workload("coding")
        if coding is not None:
            rows.append((started + waited, coding_row(book, started + waited, state)))
    answered(book, started + ANSWER_SECONDS, ANSWER_SECONDS)
    done = started + ANSWER_SECONDS + 0.2
    rows.append((done, coding_row(book, done, ResidencyState.READY)))

    states = [row.state for _, row in rows]
    assert states[0] is AdmissionState.AWAITING_PLAN and states[-1] is AdmissionState.READY
    assert {AdmissionState.PLANNED, AdmissionState.STARTING} <= set(states)
    seen = [ORDER[s] for s in states]
    assert seen == sorted(seen), [(round(t - T0, 2), r.state.value, r.reason) for t, r in rows]
    # the regression itself: mid-flight, fewer than three observations are left in the
    # window and no concurrency gate applies, yet the ready coder serves coding
    held = [row for t, row in rows if started < t < started + ANSWER_SECONDS and row.requests < 3]
    assert held, "the replay never reached the moment the evidence gate closes"
    for row in held:
        assert (row.state, row.model_id) == (AdmissionState.READY, "gemma-coder")
        assert "below the evidence gate" in row.reason and "of 3 observations" in row.reason
        assert row.ready == 1


def test_below_the_gate_with_nothing_ready_still_awaits_the_plan() -> None:
    book = learner()
    refused(book, T0)
    for coder in (None, ResidencyState.WARMING, ResidencyState.DRAINING):
        row = coding_row(book, T0 + 0.1, coder)
        assert (row.state, row.model_id) == (AdmissionState.AWAITING_PLAN, None), coder
        # the refused request waits for a model: one unit of the workload's queued work
        assert row.reason == "1 of 3 observations, offered concurrency 1.00 < 1.5"


def test_a_ready_copy_on_a_host_that_takes_no_new_work_serves_nothing() -> None:
    book = learner()
    refused(book, T0)
    now = T0 + 0.1
    snapshot = fleet(now, ResidencyState.READY)
    for host in (
        replace(snapshot.hosts[0], state=HostState.DRAINING),
        replace(snapshot.hosts[0], last_heartbeat=now - POLICY.heartbeat_stale_seconds - 1),
    ):
        inputs = inputs_from_picture(
            PROFILES, replace(snapshot, hosts=(host,)), POLICY, book.picture(now), CATALOG
        )
        (row,) = plan_portfolio(inputs).admission
        assert row.state is AdmissionState.AWAITING_PLAN, host.state
