"""The lab plans with the router's last-use watermark, as the live registry does.

A request any replica of a model took (served or failed) marks the model used; the
planner's snapshot raises every residency of that model to the mark
(``planned_last_use``), so the scale-down cooldown's hysteresis sees in the lab what it
sees in production. A refusal reached no replica and marks nothing.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gridctl.demand.intake import RequestObservation
from gridctl.domain.fleet import planned_last_use
from gridctl.lab.control import LabController
from gridctl.lab.strategies import Strategy
from tests.lab.worlds import small_world
from tests.reconcile.builders import NOW, host, res

stamps = st.none() | st.floats(min_value=0.0, max_value=4e9, allow_nan=False)


@given(stamps, stamps)
def test_the_planned_last_use_is_the_later_of_report_and_watermark(
    reported: float | None, watermark: float | None
) -> None:
    used = planned_last_use(reported, watermark)
    known = [t for t in (reported, watermark) if t]
    assert used == (max(known) if known else None)


def _observation(model: str, t: float, outcome: str) -> RequestObservation:
    return RequestObservation(
        t=t,
        endpoint="chat",
        model=None,
        served_model=None if outcome == "rejected" else model,
        host_id=None if outcome == "rejected" else "mini-01",
        outcome=outcome,
        status={"ok": 200, "error": 502, "rejected": 503}[outcome],
        service_seconds=0.5,
    )


def test_a_request_a_replica_took_marks_every_replica_of_its_model_used() -> None:
    world = small_world(models=4)
    lab = LabController(world.desired, Strategy.SMART, world.mix)
    lab.observe_all(
        [
            _observation("general-8b", NOW - 120, "ok"),
            _observation("general-8b", NOW - 60, "error"),  # overloaded: it still took it
            _observation("coder-14b", NOW - 30, "rejected"),  # reached no replica
        ]
    )
    hosts = (
        host("mini-01", res("general-8b"), res("coder-14b")),
        host("mini-02", res("general-8b")),
    )
    outcome = lab.tick(NOW, hosts, {}, {}).outcome
    used = {
        (h.host_id, r.model_id): r.last_used_at
        for h in outcome.snapshot.hosts
        for r in h.residencies
    }
    assert used == {
        ("mini-01", "general-8b"): NOW - 60,
        ("mini-02", "general-8b"): NOW - 60,
        ("mini-01", "coder-14b"): None,
    }
