"""The learners' state as store rows: a lossless round trip, windows, and row-by-row refusal."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.demand import DemandLearner, features_of
from gridctl.demand.rows import learner_rows, overlay, restore_rows
from gridctl.domain import ControllerPolicy, WorkloadCatalog

POLICY = ControllerPolicy()
T0 = 1_800_000_000.0
WORKLOADS = ("coding", "research", "general")

requests = st.lists(
    st.tuples(
        st.floats(0, 1700, allow_nan=False),  # seconds after T0: within one window
        st.sampled_from(["m", "n", None]),
        st.sampled_from(WORKLOADS),
        st.sampled_from(["", "a" * 32, "b" * 32]),
        st.floats(0, 30, allow_nan=False),
        st.sampled_from(["ok", "error", "rejected"]),
    ),
    max_size=60,
)


def learn(observed: list[tuple[float, str | None, str, str, float, str]]) -> DemandLearner:
    learner = DemandLearner(POLICY, WorkloadCatalog())
    learner.configure({"m": "a" * 64, "n": None})
    for offset, model, workload, session, service, outcome in sorted(observed, key=lambda o: o[0]):
        learner.observe(
            features_of(
                t=T0 + offset,
                endpoint="chat",
                model=model,
                served_model=None,
                workload=workload,
                service_seconds=service,
                outcome=outcome,
                session_hash=session or None,
            )
        )
    return learner


def rows_of(learner: DemandLearner) -> list[tuple[str, str, float, str]]:
    found = learner_rows(learner.direct, learner.unbound, learner.sequences, learner.arrivals)
    return [(*key, body) for key, body in sorted(found.items())]


@settings(max_examples=60, deadline=None)
@given(requests)
def test_rows_restore_exactly_what_the_learners_held(
    observed: list[tuple[float, str | None, str, str, float, str]],
) -> None:
    learner = learn(observed)
    now = T0 + 1700
    restored = restore_rows(rows_of(learner), POLICY, now)
    assert restored.refused == [] and restored.expired == 0
    again = DemandLearner(POLICY, WorkloadCatalog())
    again.direct, again.unbound = restored.direct, restored.unbound
    again.arrivals = restored.arrivals
    again.sequences.restore(restored.cursors, restored.transitions)
    assert {k: v for k, v in again.state().items() if k not in ("revision", "outcomes")} == {
        k: v for k, v in learner.state().items() if k not in ("revision", "outcomes")
    }
    assert again.picture(now).models == learner.picture(now).models
    assert again.sequences.edges(now) == learner.sequences.edges(now)


def starts(*at: float) -> str:
    return json.dumps({"starts": list(at)})


def good_bucket(**changes: object) -> str:
    body = {
        "width": 60.0,
        "requests": 2,
        "errors": 0,
        "service_seconds": 1.0,
        "max_queue": 0.0,
        "latency": [[3, 2]],
    }
    body.update(changes)
    return json.dumps(body)


@pytest.mark.parametrize(
    ("row", "why"),
    [
        (("direct", "m", T0, "[1, 2]"), "body must be a JSON object"),
        (("direct", "m", T0, good_bucket(width=30.0)), "not the policy's 60 s buckets"),
        (("direct", "m", T0 + 1, good_bucket()), "is not the start of a 60 s bucket"),
        (("direct", "m", T0, good_bucket(errors=3)), "3 errors in 2 requests"),
        (("direct", "m", T0, good_bucket(errors=1, refused=2)), "2 refused requests but 1 errors"),
        (("direct", "m", T0, good_bucket(errors=1, refused=-1)), "refused must be a non-negative"),
        (("direct", "m", T0, good_bucket(service_seconds=float("nan"))), "must be finite"),
        (("direct", "m", T0, good_bucket(latency=[[3, 1]])), "latency counts 1 != requests 2"),
        (("direct", "m", T0, good_bucket(latency=[[999, 2]])), "latency index 999"),
        (("unbound", "", T0, good_bucket()), "name must be a non-empty string"),
        (("elsewhere", "m", T0, good_bucket()), "kind must be one of"),
        (("cursor", "a" * 32, 0.0, '{"workload": "coding", "started": 5}'), "completed must be"),
        (
            ("cursor", "a" * 32, 0.0, '{"workload": "x", "started": 9, "completed": 5, "seen": 9}'),
            "started <= completed <= seen",
        ),
        (("transition", '["a", "a"]', 0.0, '{"examples": 1}'), "moves to another workload"),
        (("arrivals", "video", 0.0, '{"starts": []}'), "starts must list 1..4"),
        (("arrivals", "video", 0.0, starts(T0, T0 - 60)), "increasing"),
        (("arrivals", "video", 0.0, starts(T0 + 1)), "must begin a 60 s bucket"),
        (
            ("transition", '["a", "b"]', 0.0, '{"examples": 1, "leads": [1, 2], "seen": 5}'),
            "one per example",
        ),
    ],
)
def test_an_invalid_row_is_refused_by_name_and_the_others_restored(
    row: tuple[str, str, float, str], why: str
) -> None:
    good = ("direct", "n", T0, good_bucket())
    restored = restore_rows([row, good], POLICY, T0 + 60)
    (refusal,) = restored.refused
    assert refusal.startswith(f"demand row {row[0]}/{row[1]}@{row[2]}: ") and why in refusal
    assert restored.restored == 1 and [b.start for b in restored.direct["n"].buckets] == [T0]


def test_a_row_written_before_refusals_were_counted_apart_restores_as_all_served() -> None:
    restored = restore_rows([("direct", "m", T0, good_bucket(errors=1))], POLICY, T0 + 60)
    assert restored.refused == []
    (bucket,) = restored.direct["m"].buckets
    assert (bucket.requests, bucket.errors, bucket.refused, bucket.served) == (2, 1, 0, 2)


def test_windows_are_applied_at_the_restoring_instant() -> None:
    width, window = POLICY.demand_bucket_seconds, POLICY.demand_window_buckets
    now = T0 + window * width
    old, kept, future = T0, T0 + width, now + width
    transition = '{"examples": 5, "leads": [1, 1, 1, 1, 1], "seen": %r}'
    restored = restore_rows(
        [
            ("direct", "m", old, good_bucket()),
            ("direct", "m", kept, good_bucket()),
            ("direct", "m", future, good_bucket()),
            ("transition", '["a", "b"]', 0.0, transition % (now - 3601)),
            ("transition", '["a", "c"]', 0.0, transition % (now - 3599)),
            # a rhythm is kept while half again the longest allowed gap has not passed
            ("arrivals", "video", 0.0, starts(now - 5400)),
            ("arrivals", "image", 0.0, starts(now - 5460)),
            ("arrivals", "audio", 0.0, starts(now + 60)),
        ],
        POLICY,
        now,
    )
    assert [b.start for b in restored.direct["m"].buckets] == [kept]
    assert list(restored.transitions) == [("a", "c")]
    assert restored.arrivals == {"video": (now - 5400,)}
    assert (restored.restored, restored.expired, restored.refused) == (3, 5, [])


def test_a_takeover_lays_persisted_rows_over_its_own_learning() -> None:
    local = learn([(0.0, "m", "general", "", 1.0, "ok"), (600.0, "m", "general", "", 1.0, "ok")])
    persisted = learn(
        [(600.0, "m", "general", "", 1.0, "ok"), (610.0, "m", "general", "", 1.0, "ok")]
    )
    persisted.observe(
        features_of(t=T0 + 620, endpoint="chat", model=None, served_model=None, workload="coding")
    )
    restored = restore_rows(rows_of(persisted), POLICY, T0 + 700)
    local.observe(
        features_of(t=T0 + 60, endpoint="chat", model=None, served_model=None, workload="coding")
    )
    merged = overlay(restored, local.direct, local.unbound, local.sequences, POLICY, local.arrivals)
    buckets = {b.start: b.requests for b in merged.direct["m"].buckets}
    assert buckets == {T0: 1, T0 + 600: 2}  # the persisted bucket replaces the local one
    assert list(merged.unbound) == ["coding"]
    assert merged.arrivals == {"coding": (T0 + 60, T0 + 600)}  # both processes' arrivals
