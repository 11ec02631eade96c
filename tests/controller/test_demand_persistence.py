"""Demand series and affinity sequences survive a controller restart, within their windows.

A controller learns named-model demand, unbound workload demand and mature
workload transitions from the router's observations, and its tick writes them
through the store boundary. A new controller process on the same state (the
SQLite file in the state directory, or the shared PostgreSQL database) forecasts
the same demand and knows the same transitions. Buckets older than the demand
window and sequences not seen within the affinity expiry are dropped on load;
a corrupt row is refused with a warning naming it, and every other row is
restored.
"""

from __future__ import annotations

from typing import Any

import pytest

from gridctl.controller.control import Controller
from gridctl.controller.desired import ApiDesired
from gridctl.controller.registry import Registry
from gridctl.domain import ControllerPolicy
from gridctl.router.telemetry import RequestObservation
from tests.controller.simnodes import GEMMA_SHA

from .conftest import StoreOpener
from .storefixtures import T0, FakeClock

WIDTH = 60.0  # the default demand bucket
TRANSITIONS = 6  # sessions that move from coding to research (mature at five)


def controller(store: Any, clock: FakeClock) -> Controller:
    """A controller process on ``store``: demand state comes only from the store."""
    desired = ApiDesired(clock)
    desired.put("gemma", {"spec": {"memory_mb": 640, "artifact": {"sha256": GEMMA_SHA}}})
    return Controller(desired=desired, registry=Registry(), store=store, clock=clock)


def observe(ctl: Controller, t: float, model: str | None, workload: str, session: str = "") -> None:
    ctl.demand.observe(
        RequestObservation(
            t=t,
            endpoint="chat",
            model=model,
            served_model=None,
            host_id=None,
            outcome="rejected",
            status=503,
            service_seconds=2.0,
            workload=workload,
            session=session or None,
        )
    )


def feed(ctl: Controller, start: float) -> None:
    """Direct demand for gemma over five buckets, and sessions coding -> research."""
    assert ctl.tick().ok  # the first tick points the learners at the configured models
    for minute in range(5):
        for i in range(4 + minute):
            observe(ctl, start + minute * WIDTH + i, "gemma", "general")
    for n in range(TRANSITIONS):
        session = f"{n:032x}"
        observe(ctl, start + 10 + n, None, "coding", session)
        observe(ctl, start + 40 + n, None, "research", session)


def learned(ctl: Controller, now: float) -> dict[str, Any]:
    picture = ctl.demand.picture(now)
    return {
        "forecast": ctl.demand.forecast(now, ctl.policy()),
        "workloads": picture.workloads,
        "transitions": picture.transitions,
        "state": {k: v for k, v in ctl.demand._learner.state().items() if k != "revision"},
    }


def test_forecast_and_transitions_are_the_same_after_a_restart(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    first = controller(open_store(), clock)
    feed(first, T0)
    clock.now = T0 + 5 * WIDTH
    assert first.tick().ok
    before = learned(first, clock.now)
    assert [d.model_id for d in before["forecast"]] == ["gemma"]
    (edge,) = before["transitions"]
    assert (edge.source, edge.target, edge.examples, edge.mature) == (
        "coding",
        "research",
        TRANSITIONS,
        True,
    )
    first.store.close()

    second = controller(open_store(), clock)  # the restarted process
    assert learned(second, clock.now) == before
    assert second.all_warnings() == []

    observe(second, clock.now, "gemma", "general")  # it keeps learning from there
    assert second.tick().ok
    second.store.close()
    third = controller(open_store(), clock)
    assert learned(third, clock.now) == learned(second, clock.now)


def test_entries_older_than_their_window_are_dropped_on_load(
    open_store: StoreOpener, clock: FakeClock
) -> None:
    policy = ControllerPolicy()  # the defaults the API-managed desired state carries
    first = controller(open_store(), clock)
    feed(first, T0)  # buckets T0 .. T0+4 min, sequences last seen at about T0+45 s
    observe(first, T0 + 20 * WIDTH, "gemma", "general")  # a later bucket, same window
    clock.now = T0 + 20 * WIDTH
    assert first.tick().ok
    assert first.demand.series_sizes() == {"gemma": 6}
    first.store.close()

    # 35 minutes on, the window (30 one-minute buckets) holds only the last bucket
    clock.now = T0 + (policy.demand_window_buckets + 5) * WIDTH
    later = controller(open_store(), clock)
    series = later.demand._learner.direct["gemma"]
    assert [b.start for b in series.buckets] == [T0 + 20 * WIDTH]
    assert len(later.demand._learner.sequences.cursors) == TRANSITIONS  # within an hour
    later.store.close()

    clock.now = T0 + policy.affinity_expiry_seconds + 60  # every session is past expiry
    expired = controller(open_store(), clock)
    assert expired.demand._learner.sequences.state() == {"cursors": {}, "transitions": []}
    assert expired.demand.picture(clock.now).transitions == ()
    assert expired.all_warnings() == []  # expiry is not an error


@pytest.mark.parametrize(
    ("key", "body", "why"),
    [
        (("direct", "gemma", T0 + WIDTH), "{not json", "body is not JSON"),
        (("direct", "gemma", T0 + WIDTH), '{"width": 60, "requests": -1}', "requests must be"),
        (("transition", '["coding"]', 0.0), '{"examples": 1}', "[source, target] pair"),
    ],
)
def test_a_corrupt_row_is_refused_and_does_not_poison_the_rest(
    open_store: StoreOpener, clock: FakeClock, key: tuple[str, str, float], body: str, why: str
) -> None:
    first = controller(open_store(), clock)
    feed(first, T0)
    clock.now = T0 + 5 * WIDTH
    assert first.tick().ok
    intact = learned(first, clock.now)
    first.store.write_demand({key: body}, [])  # damaged behind the learner's back
    first.store.close()

    second = controller(open_store(), clock)
    (warning,) = second.all_warnings()
    assert "1 persisted demand row(s) refused" in warning
    assert f"demand row {key[0]}/{key[1]}@{key[2]}" in warning and why in warning
    after = learned(second, clock.now)
    assert after["transitions"] == intact["transitions"]  # the rest is restored
    buckets = after["state"]["direct"]["gemma"]
    if key[0] == "direct":  # only the damaged bucket is missing
        assert [b[0] for b in buckets] == [T0 + m * WIDTH for m in (0, 2, 3, 4)]
    else:
        assert after == intact
    assert second.tick().ok  # the next write removes the refused row
    assert all(row[:3] != key for row in second.store.demand_rows())
