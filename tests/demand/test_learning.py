"""The demand learner: direct vs unbound demand, configured ids only, privacy and bounds."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.demand import DemandLearner, affinity_hash, classify_workload, features_of
from gridctl.domain import ControllerPolicy, WorkloadCatalog

POLICY = ControllerPolicy()
CATALOG = WorkloadCatalog()
T0 = 1_800_000_000.0


def learner() -> DemandLearner:
    book = DemandLearner(POLICY, CATALOG)
    book.configure({"coder": "a" * 64, "general": None, "old": None}, retiring=["old"])
    return book


def test_unbound_requests_are_workload_demand_and_outcome_evidence_only() -> None:
    book = learner()
    for i in range(3):
        book.observe(
            features_of(
                t=T0 + i,
                endpoint="chat",
                model="auto",
                served_model="coder",
                workload="coding",
                service_seconds=2.0,
            )
        )
    picture = book.picture(T0 + 10)
    assert picture.models == ()  # no direct demand for the model that happened to serve
    (coding,) = picture.workloads
    assert coding.workload == "coding" and coding.requests == 3
    (outcome,) = picture.outcomes
    assert (outcome.model_id, outcome.workload) == ("coder", "coding")
    assert round(outcome.samples, 3) == 3.0


def test_named_requests_are_direct_demand() -> None:
    book = learner()
    book.observe(
        features_of(t=T0, endpoint="chat", model="coder", served_model="coder", workload="coding")
    )
    picture = book.picture(T0 + 1)
    assert [d.model_id for d in picture.models] == ["coder"] and picture.workloads == ()


def test_only_configured_non_retiring_models_create_series() -> None:
    book = learner()
    for model in ("stranger", "old", "coder"):
        book.observe(
            features_of(t=T0, endpoint="chat", model=model, served_model=model, workload="general")
        )
    assert sorted(book.direct) == ["coder"]


def test_evaluation_traffic_is_never_demand() -> None:
    book = learner()
    book.observe(
        features_of(
            t=T0,
            endpoint="chat",
            model="coder",
            served_model="coder",
            workload="coding",
            evaluation=True,
        )
    )
    book.observe(
        features_of(
            t=T0,
            endpoint="chat",
            model=None,
            served_model="coder",
            workload="coding",
            evaluation=True,
        )
    )
    assert book.direct == {} and book.unbound == {}


def test_a_late_response_from_a_previous_artifact_does_not_update_evidence() -> None:
    book = learner()
    book.observe(
        features_of(
            t=T0,
            endpoint="chat",
            model=None,
            served_model="coder",
            workload="coding",
            artifact_sha256="b" * 64,
        )
    )
    assert book.picture(T0).outcomes == ()


def test_unknown_workloads_fold_into_the_default() -> None:
    book = learner()
    book.observe(
        features_of(t=T0, endpoint="chat", model=None, served_model=None, workload="astrology")
    )
    assert list(book.unbound) == ["general"]


text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ", min_size=12, max_size=40)
request = st.tuples(
    st.sampled_from([None, "auto", "coder", "general", "stranger", "old"]),
    st.sampled_from(["chat", "embeddings", "image"]),
    st.floats(0, 20_000),
    st.floats(0, 120),
    st.sampled_from(["ok", "error", "rejected"]),
    st.integers(0, 30),
    st.booleans(),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(request, text, st.text(min_size=8, max_size=20)), max_size=40))
def test_no_raw_key_first_hash_or_text_is_reachable_from_learner_state(
    stream: list[tuple[tuple[str | None, str, float, float, str, int, bool], str, str]],
) -> None:
    book = learner()
    secrets: list[str] = []
    for (model, endpoint, t, service, outcome, session, evaluation), prompt, raw in sorted(
        stream, key=lambda r: r[0][2]
    ):
        raw_key = f"key-{raw}-{session}"
        first = affinity_hash(raw_key)
        prompt = f"zqprompt {prompt} python"
        secrets += [raw_key, first, prompt]
        workload = classify_workload(CATALOG, endpoint, "text", prompt)
        book.observe(
            features_of(
                t=T0 + t,
                endpoint=endpoint,
                model=model,
                served_model=model,
                workload=workload,
                service_seconds=service,
                outcome=outcome,
                session_hash=first,
                evaluation=evaluation,
            )
        )
    serialised = json.dumps(book.state()) + repr(book.picture(T0 + 20_000.0))
    for secret in secrets:
        assert secret not in serialised
    assert "zqprompt" not in serialised


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(request, st.integers(0, 60)), max_size=150))
def test_learner_memory_stays_within_caps(
    stream: list[tuple[tuple[str | None, str, float, float, str, int, bool], int]],
) -> None:
    policy = replace(
        POLICY, affinity_max_workflows=6, affinity_max_transitions=5, demand_window_buckets=4
    )
    book = DemandLearner(policy, CATALOG)
    book.configure({"coder": None, "general": None})
    workloads = CATALOG.names
    for (model, endpoint, t, service, outcome, session, _), w in sorted(
        stream, key=lambda r: r[0][2]
    ):
        book.observe(
            features_of(
                t=T0 + t,
                endpoint=endpoint,
                model=model,
                served_model=model,
                workload=workloads[w % len(workloads)],
                service_seconds=service,
                outcome=outcome,
                session_hash=f"h{session}",
            )
        )
        assert set(book.direct) <= {"coder", "general"}
        assert set(book.unbound) <= set(workloads)
        assert set(book.arrivals) <= set(workloads)
        assert all(len(a) <= 4 for a in book.arrivals.values())
        assert all(len(s.buckets) <= 4 for s in (*book.direct.values(), *book.unbound.values()))
        assert len(book.sequences.cursors) <= 6
        assert len(book.sequences.transitions) <= 5
        assert len(book.outcomes.service) <= 2 * len(workloads)


def _served_and_refused(
    book: DemandLearner, model: str | None, served: list[float], refused: list[float]
) -> None:
    """Requests for ``model`` (None: unbound coding work) spread over one minute: each of
    ``served`` answered in that many seconds, each of ``refused`` turned away after it."""
    rows = [(s, "ok") for s in served] + [(s, "rejected") for s in refused]
    for i, (seconds, outcome) in enumerate(rows):
        book.observe(
            features_of(
                t=T0 + 60.0 * i / max(1, len(rows)),
                endpoint="chat",
                model=model,
                served_model=model if outcome == "ok" else None,
                workload="coding",
                service_seconds=seconds,
                outcome=outcome,
            )
        )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.05, 120), min_size=1, max_size=30),
    st.lists(st.floats(0, 5), max_size=30),
)
def test_refusals_count_as_arrivals_but_never_as_service_time(
    served: list[float], refused: list[float]
) -> None:
    """Offered concurrency is arrivals x the measured service time of the requests an
    engine served: quick refusals (no free replica) must not pull that time down, or a
    saturated model would look less loaded the more it refuses."""
    book, alone = learner(), learner()
    _served_and_refused(book, "coder", served, refused)
    _served_and_refused(alone, "coder", served, [])
    now = T0 + 61.0
    (demand,) = book.picture(now).models
    (without,) = alone.picture(now).models
    mean = sum(served) / len(served)
    assert demand.sample_count == len(served) + len(refused)
    assert demand.requests_per_minute >= without.requests_per_minute
    per_request = demand.offered_concurrency / (demand.requests_per_minute / 60.0)
    assert abs(per_request - mean) <= 1e-9 * max(1.0, mean)
    assert demand.error_rate == len(refused) / (len(served) + len(refused))
    # the unbound workloads' concurrency (portfolio admission) reads the same measurement
    book = learner()
    _served_and_refused(book, None, served, refused)
    (coding,) = book.picture(now).workloads
    assert abs(coding.mean_service_seconds - mean) <= 1e-9 * max(1.0, mean)


def test_a_model_that_only_refused_has_no_measured_service_time() -> None:
    """Every request refused: no service was measured, so the learner reports no offered
    concurrency of its own and the planner takes the profile's expected service time."""
    from gridctl.domain import ModelProfile
    from gridctl.planner.targets import direct_concurrency

    book = learner()
    _served_and_refused(book, "coder", [], [0.01] * 30)
    (demand,) = book.picture(T0 + 61.0).models
    assert demand.sample_count == 30 and demand.requests_per_minute > 0
    assert demand.offered_concurrency == 0.0
    profile = ModelProfile(name="coder", memory_mb=1024, expected_service_seconds=6.0)
    expected = demand.requests_per_minute / 60.0 * 6.0 + demand.queue_depth
    assert direct_concurrency(profile, demand) == expected


def test_unbound_requests_no_model_took_are_the_workloads_queued_work() -> None:
    """An unbound request that found no model waits for one, so it is the workload's
    queued work (offered concurrency) for the current and the previous bucket: a long
    video job can earn its canary at once. Served requests are not queued work, and a
    refusal older than the previous bucket is no longer current."""
    book = learner()
    for outcome in ("rejected", "ok"):
        book.observe(
            features_of(
                t=T0,
                endpoint="chat",
                model=None,
                served_model="general" if outcome == "ok" else None,
                workload="coding",
                service_seconds=0.0 if outcome == "rejected" else 2.0,
                outcome=outcome,
            )
        )
    (now,) = book.picture(T0 + 1.0).workloads
    assert now.queue_depth == 1.0
    assert now.offered_concurrency >= 1.0
    (later,) = book.picture(T0 + 2 * POLICY.demand_bucket_seconds + 1.0).workloads
    assert later.queue_depth == 0.0
