"""Model correlation: every threshold and cap with boundary cases on both sides."""

from __future__ import annotations

from dataclasses import replace

from gridctl.demand import BucketSeries, Observation, forecast, infer
from gridctl.demand.correlation import learn_relations
from gridctl.domain import ControllerPolicy

T0 = 1_800_000_000.0
POLICY = ControllerPolicy()
NOW = T0 + 10 * 60 + 30  # the middle of bucket 10; buckets 0..9 are complete


def series(model: str, per_bucket: dict[int, int], queue: float = 0.0) -> BucketSeries:
    rows = [
        Observation(model, T0 + b * 60 + 1 + i * 0.01, 1.0, 100.0, True, queue)
        for b, n in per_bucket.items()
        for i in range(n)
    ]
    return BucketSeries(model).fold_all(rows)


def active(buckets: list[int], n: int = 1) -> dict[int, int]:
    return dict.fromkeys(buckets, n)


def kinds(book: dict[str, BucketSeries]) -> set[tuple[str, str, str]]:
    return {(r.kind, r.source, r.target) for r in learn_relations(book, NOW, POLICY)}


def test_group_needs_three_shared_buckets() -> None:
    two = {"a": series("a", active([0, 1])), "b": series("b", active([0, 1]))}
    three = {"a": series("a", active([0, 1, 2])), "b": series("b", active([0, 1, 2]))}
    assert ("group", "a", "b") not in kinds(two)
    assert ("group", "a", "b") in kinds(three)


def test_group_association_threshold_070() -> None:
    a = series("a", active(list(range(10))))
    at_threshold = {"a": a, "b": series("b", active(list(range(7))))}  # 7/10 = 0.70
    below = {"a": a, "b": series("b", active(list(range(6))))}  # 0.60
    assert ("group", "a", "b") in kinds(at_threshold)
    assert ("group", "a", "b") not in kinds(below)


def test_transition_needs_three_supporting_buckets() -> None:
    two = {"a": series("a", active([0, 2])), "b": series("b", active([1, 3]))}
    three = {"a": series("a", active([0, 2, 4])), "b": series("b", active([1, 3, 5]))}
    assert ("transition", "a", "b") not in kinds(two)
    assert ("transition", "a", "b") in kinds(three)


def test_transition_excludes_the_incomplete_future_bucket() -> None:
    # a at 1,3,5,7,9 and b at 2,4,8: 3 of 4 judged (bucket 9's successor is incomplete);
    # counting 9 as a failure would make it 3/5 = 0.6 and immature.
    book = {"a": series("a", active([1, 3, 5, 7, 9])), "b": series("b", active([2, 4, 8]))}
    relation = next(
        r for r in learn_relations(book, NOW, POLICY) if r.kind == "transition" and r.source == "a"
    )
    assert relation.support == 3 and relation.confidence == 0.75


def test_transition_confidence_threshold_both_sides() -> None:
    # 7 of 10 judged a-buckets followed by b: 0.70 mature; 6 of 10 is not
    a = series("a", active([0, 2, 4, 6, 8, 10, 12, 14, 16, 18]))
    now = T0 + 25 * 60 + 30
    yes = {"a": a, "b": series("b", active([1, 3, 5, 7, 9, 11, 13]))}
    no = {"a": a, "b": series("b", active([1, 3, 5, 7, 9, 11]))}
    edges = lambda book: {(r.kind, r.source, r.target) for r in learn_relations(book, now, POLICY)}  # noqa: E731
    assert ("transition", "a", "b") in edges(yes)
    assert ("transition", "a", "b") not in edges(no)


def test_inferred_demand_is_capped_at_twice_the_target_peak() -> None:
    book = {"a": series("a", {0: 1, 1: 1, 2: 1, 9: 50}), "b": series("b", {0: 1, 1: 1, 2: 1})}
    # group a-b: shared 0,1,2 of union 0,1,2,9 = 0.75; ratio 1; current a = 50/min
    inference = infer(book, NOW, POLICY).inference_for("b")
    assert inference is not None
    assert inference.requests_per_minute == 2.0  # 2 x peak of 1/min, not 50 x 0.75
    loose = replace(POLICY, inferred_demand_peak_multiplier=100.0)
    unbounded = infer(book, NOW, loose).inference_for("b")
    assert unbounded is not None and unbounded.requests_per_minute == 37.5


def test_sources_combine_by_maximum_not_sum() -> None:
    target = series("t", {b: 10 for b in range(10)})
    book = {
        "t": target,
        "a": series("a", {b: 10 for b in range(10)}),
        "b": series("b", {b: 10 for b in range(10)}),
    }
    inference = infer(book, NOW, POLICY).inference_for("t")
    assert inference is not None
    assert inference.requests_per_minute == 10.0
    assert inference.sources == ("a", "b")


def test_at_most_32_sources_are_considered() -> None:
    # 32 busy sources infer ~6.4/min; a 33rd (lowest current rate) would infer the 20/min cap
    def build(count: int) -> dict[str, BucketSeries]:
        book = {"t": series("t", {b: 10 for b in range(10)})}
        for i in range(count):
            book[f"s{i:02d}"] = series(f"s{i:02d}", {**{b: 10 for b in range(9)}, 9: 6})
        book["weak"] = series("weak", {**{b: 1 for b in range(9)}, 9: 5})
        return book

    capped = infer(build(32), NOW, POLICY).inference_for("t")
    roomy = infer(build(31), NOW, POLICY).inference_for("t")
    assert capped is not None and roomy is not None
    assert "weak" not in capped.sources and capped.requests_per_minute < 7.0
    assert "weak" in roomy.sources and roomy.requests_per_minute == 20.0


def test_inference_is_never_transitive() -> None:
    # a -> b -> c -> a one bucket apart; only a is active now: b is inferred, c is not
    book = {
        "a": series("a", active([0, 3, 6, 9])),
        "b": series("b", active([1, 4, 7])),
        "c": series("c", active([2, 5, 8])),
    }
    report = infer(book, NOW, POLICY)
    assert {("transition", "a", "b"), ("transition", "b", "c")} <= kinds(book)
    assert report.inference_for("b") is not None
    assert report.inference_for("c") is None


def test_association_does_not_refresh_target_local_evidence() -> None:
    from gridctl.demand import DemandLearner
    from gridctl.demand.features import features_of
    from gridctl.domain import WorkloadCatalog

    learner = DemandLearner(POLICY, WorkloadCatalog())
    learner.configure({"a": None, "b": None})
    for b in range(10):
        learner.observe(
            features_of(
                t=T0 + b * 60 + 5,
                endpoint="chat",
                model="a",
                served_model="a",
                workload="general",
                service_seconds=1.0,
            )
        )
        if b < 4:
            learner.observe(
                features_of(
                    t=T0 + b * 60 + 6,
                    endpoint="chat",
                    model="b",
                    served_model="b",
                    workload="general",
                    queue_depth=7,
                    service_seconds=1.0,
                    outcome="error",
                )
            )
    for b in range(4, 10):
        learner.observe(
            features_of(
                t=T0 + b * 60 + 6,
                endpoint="chat",
                model="b",
                served_model="b",
                workload="general",
                service_seconds=1.0,
            )
        )
    picture = learner.picture(NOW)
    demand_b = next(d for d in picture.models if d.model_id == "b")
    plain = forecast(learner.direct["b"], NOW, POLICY)
    assert demand_b.correlated_requests_per_minute > 0
    assert demand_b.queue_depth == plain.queue_depth
    assert demand_b.error_rate == plain.error_rate
    assert demand_b.p95_latency_ms == plain.p95_latency_ms
