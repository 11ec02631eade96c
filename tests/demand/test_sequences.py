"""Affinity workflow sequences: 5 transitions, departures, caps, expiry and ordering."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.demand import RequestFeatures, SequenceLearner
from gridctl.domain import ControllerPolicy

POLICY = ControllerPolicy()
T0 = 1_800_000_000.0


def req(session: str | None, workload: str, t: float, service: float = 1.0) -> RequestFeatures:
    return RequestFeatures(
        t=t,
        endpoint="chat",
        model=None,
        served_model=None,
        workload=workload,
        service_seconds=service,
        session=session,
    )


def walk(learner: SequenceLearner, sessions: int, path: tuple[str, ...], t: float = T0) -> float:
    for s in range(sessions):
        for step, workload in enumerate(path):
            learner.observe(req(f"s{s}-{t}", workload, t + step * 10.0 + 1.0))
        t += 100.0
    return t


def test_five_transitions_are_required() -> None:
    four, five = SequenceLearner(POLICY), SequenceLearner(POLICY)
    walk(four, 4, ("image", "video"))
    end = walk(five, 5, ("image", "video"))
    assert four.edges(end) == ()
    (edge,) = five.edges(end)
    assert (edge.source, edge.target, edge.examples, edge.confidence) == ("image", "video", 5, 1.0)
    assert edge.lead_seconds == 10.0


def test_confidence_counts_every_departure_from_the_source() -> None:
    learner = SequenceLearner(POLICY)
    t = walk(learner, 5, ("image", "video"))
    t = walk(learner, 5, ("image", "design"), t)
    edges = {(e.source, e.target): e.confidence for e in learner.edges(t)}
    assert edges == {("image", "design"): 0.5, ("image", "video"): 0.5}


def test_staying_in_a_workload_is_not_a_departure() -> None:
    learner = SequenceLearner(POLICY)
    end = walk(learner, 5, ("image", "image", "video"))
    (edge,) = learner.edges(end)
    assert edge.confidence == 1.0 and edge.examples == 5


def test_513th_workflow_evicts_the_least_recently_seen() -> None:
    learner = SequenceLearner(POLICY)
    for s in range(512):
        learner.observe(req(f"s{s}", "image", T0 + s))
    assert len(learner.cursors) == 512 and "s0" in learner.cursors
    learner.observe(req("s512", "image", T0 + 512))
    assert len(learner.cursors) == 512 and "s0" not in learner.cursors and "s1" in learner.cursors


def test_4097th_transition_evicts_the_least_recently_seen() -> None:
    learner = SequenceLearner(POLICY)
    names = [f"w{i}" for i in range(65)]
    pairs = [(a, b) for a in names for b in names if a != b][:4097]
    for i, (a, b) in enumerate(pairs):
        t = T0 + i * 0.5
        learner.observe(req(f"p{i}", a, t, service=0.0))
        learner.observe(req(f"p{i}", b, t + 0.25, service=0.0))
        if i == 4095:
            assert len(learner.transitions) == 4096 and pairs[0] in learner.transitions
    assert len(learner.transitions) == 4096
    assert pairs[0] not in learner.transitions and pairs[4096] in learner.transitions


def test_cursors_expire_after_one_hour() -> None:
    inside, outside = SequenceLearner(POLICY), SequenceLearner(POLICY)
    for learner, gap in ((inside, 3599.0), (outside, 3601.0)):
        for s in range(5):
            base = T0 + s * 10.0
            learner.observe(req(f"s{s}", "image", base))
            learner.observe(req(f"s{s}", "video", base + gap))
    assert sum(s.examples for s in inside.transitions.values()) == 5
    assert outside.transitions == {}


def test_transitions_expire_after_one_hour() -> None:
    learner = SequenceLearner(POLICY)
    end = walk(learner, 5, ("image", "video"))
    assert learner.edges(end + 3000.0)
    assert learner.edges(end + 3700.0) == ()


def test_out_of_order_and_overlapping_completions_never_establish_order() -> None:
    learner = SequenceLearner(POLICY)
    for s in range(6):
        base = T0 + s * 100.0
        # completion callbacks arrive reversed: the video finished before the image
        learner.observe(req(f"late{s}", "image", base + 20.0, service=5.0))
        learner.observe(req(f"late{s}", "video", base + 10.0, service=5.0))
        # simultaneous completions
        learner.observe(req(f"same{s}", "image", base + 20.0))
        learner.observe(req(f"same{s}", "design", base + 20.0))
        # the second request started before the first one finished
        learner.observe(req(f"overlap{s}", "image", base + 20.0, service=5.0))
        learner.observe(req(f"overlap{s}", "coding", base + 22.0, service=5.0))
    assert learner.transitions == {}


workloads = st.sampled_from(["image", "video", "coding", "research", "design"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(workloads, st.floats(0, 7200), st.floats(0, 60)), max_size=60))
def test_interleaved_unrelated_sessions_never_yield_a_transition(
    stream: list[tuple[str, float, float]],
) -> None:
    learner = SequenceLearner(POLICY)
    for i, (workload, t, service) in enumerate(sorted(stream, key=lambda r: r[1])):
        learner.observe(req(f"user{i}", workload, T0 + t, service))
        learner.observe(req(None, workload, T0 + t, service))
    assert learner.transitions == {}
    assert learner.edges(T0 + 7200.0, mature_only=False) == ()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), workloads, st.floats(0, 9000)), max_size=120))
def test_memory_stays_within_caps(stream: list[tuple[int, str, float]]) -> None:
    policy = replace(POLICY, affinity_max_workflows=8, affinity_max_transitions=6)
    learner = SequenceLearner(policy)
    for session, workload, t in sorted(stream, key=lambda r: r[2]):
        learner.observe(req(f"s{session}", workload, T0 + t))
        assert len(learner.cursors) <= 8
        assert len(learner.transitions) <= 6
