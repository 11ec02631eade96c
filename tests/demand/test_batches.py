"""Folding a batch of requests at once gives exactly what folding them one by one gives."""

from __future__ import annotations

from functools import reduce

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.demand import BucketSeries, DemandLearner, Observation, features_of, workflow_key
from gridctl.demand.features import RequestFeatures
from gridctl.demand.intake import RequestObservation, observation_features
from gridctl.domain import ControllerPolicy, WorkloadCatalog

T0 = 1_800_000_000.0
POLICY = ControllerPolicy()
CATALOG = WorkloadCatalog()

observation = st.builds(
    Observation,
    model_id=st.just("m"),
    # out of order, inside one bucket, across several, and far enough to leave the window
    at=st.one_of(
        st.floats(min_value=T0 - 600, max_value=T0 + 600, allow_nan=False),
        st.sampled_from([T0, T0 + 59.999, T0 + 60, T0 - 1e-6, T0 + 3_600, T0 - 3_600]),
    ),
    service_seconds=st.one_of(
        st.floats(min_value=-1.0, max_value=1e4, allow_nan=False),
        st.sampled_from([float("nan"), float("inf"), 0.1, 0.2, 0.3]),
    ),
    latency_ms=st.one_of(
        st.floats(min_value=0.0, max_value=1e7, allow_nan=False),
        st.sampled_from([float("nan"), 100.0, 1e9]),
    ),
    ok=st.booleans(),
    queue_depth=st.floats(min_value=0.0, max_value=50.0),
    refused=st.booleans(),
)


def one_by_one(series: BucketSeries, observations: list[Observation]) -> BucketSeries:
    return reduce(BucketSeries.fold, observations, series)


@settings(max_examples=400, deadline=None)
@given(
    st.integers(1, 6),
    st.sampled_from([60.0, 30.0, 7.5, 60]),
    st.lists(observation, max_size=12),
    st.lists(st.lists(observation, max_size=30), max_size=4),
)
def test_a_batch_fold_equals_folding_one_by_one(
    window: int, width: float, history: list[Observation], batches: list[list[Observation]]
) -> None:
    start = one_by_one(BucketSeries("m", width, window), history)
    batched = reference = start
    for batch in batches:
        batched = batched.fold_many(batch)
        reference = one_by_one(reference, batch)
        assert batched == reference
        assert [type(b.start) for b in batched.buckets] == [
            type(b.start) for b in reference.buckets
        ]


def learner() -> DemandLearner:
    book = DemandLearner(POLICY, CATALOG)
    book.configure({"coder": "a" * 64, "general": None, "old": None}, retiring=["old"])
    return book


request = st.builds(
    features_of,
    t=st.floats(min_value=T0 - 120, max_value=T0 + 900, allow_nan=False),
    endpoint=st.sampled_from(["chat", "embeddings", "image"]),
    model=st.sampled_from([None, "auto", "coder", "general", "old", "stranger"]),
    served_model=st.sampled_from([None, "coder", "general", "old"]),
    workload=st.sampled_from(["coding", "general", "research", "not-in-catalog"]),
    service_seconds=st.floats(min_value=0.0, max_value=120.0, allow_nan=False),
    queue_depth=st.integers(0, 8),
    outcome=st.sampled_from(["ok", "error", "rejected"]),
    session_hash=st.sampled_from([None, "s1", "s2", "s3"]),
    artifact_sha256=st.sampled_from([None, "a" * 64, "b" * 64]),
    evaluation=st.booleans(),
)


def everything(book: DemandLearner) -> object:
    """The learner's state with every dict's order, and its picture."""
    return (
        book.state(),
        book.revision,
        list(book.direct),
        list(book.unbound),
        list(book.sequences.cursors.items()),
        list(book.sequences.transitions.items()),
        list(book.outcomes.service.items()),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(request, max_size=40), max_size=5))
def test_observe_all_equals_observing_one_by_one(batches: list[list[RequestFeatures]]) -> None:
    batched, reference = learner(), learner()
    for batch in batches:
        batched.observe_all(batch)
        for features in batch:
            reference.observe(features)
        assert everything(batched) == everything(reference)
    now = T0 + 960
    assert batched.picture(now) == reference.picture(now)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.builds(
            RequestObservation,
            t=st.floats(min_value=T0, max_value=T0 + 600, allow_nan=False),
            endpoint=st.sampled_from(["chat", "embeddings", "nonsense"]),
            model=st.sampled_from([None, "auto", "coder"]),
            served_model=st.sampled_from([None, "coder"]),
            host_id=st.just("h1"),
            outcome=st.sampled_from(["ok", "error", "rejected"]),
            status=st.just(200),
            service_seconds=st.floats(min_value=0.0, max_value=60.0),
            session=st.sampled_from([None, "", "s1", "s2"]),
        ),
        max_size=20,
    )
)
def test_remembered_session_keys_give_the_same_features(
    observations: list[RequestObservation],
) -> None:
    keys: dict[str, str] = {}
    for observation in observations:
        assert observation_features(observation, keys) == observation_features(observation)
    assert keys == {s: workflow_key(s) for s in {o.session for o in observations} if s}
