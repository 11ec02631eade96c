"""The lab plans with the live controller's demand path, never a forecast of its own."""

from __future__ import annotations

from dataclasses import replace

from gridctl.controller.demandbook import DemandBook, with_correlation
from gridctl.demand.intake import RequestObservation
from gridctl.domain import Action, ActionKind, Mode, Preemption
from gridctl.lab.control import LabController, last_replica_removals
from gridctl.lab.serving import Classifier, Replica, serve_minute
from gridctl.lab.strategies import Strategy
from gridctl.reconcile import PendingAction
from gridctl.tick import DeliveryFacts, Withheld, delivery_gate, routes_from_hosts
from tests.lab.worlds import small_world
from tests.reconcile.builders import NOW, assign, host, plan, res


def _observations(minutes: int) -> tuple[list[RequestObservation], float]:
    """What the lab's simulated router reports for the world's first minutes."""
    world = small_world(models=4, users=40, minutes=minutes)
    profiles = world.profiles
    classify, sessions = Classifier(world.desired.catalog), {}
    found: list[RequestObservation] = []
    for arrivals in world.arrivals:
        pool = {
            m: [Replica("gpu-server-01", m, p.expected_service_seconds, 4.0)]
            for m, p in sorted(profiles.items())
        }
        _, observed = serve_minute(arrivals, pool, {}, profiles, classify, sessions)
        found.extend(observed)
    return found, max(o.t for o in found)


def test_the_lab_forecast_is_the_live_demand_books_forecast() -> None:
    world = small_world(models=4, users=40)
    observations, now = _observations(12)
    assert {o.outcome for o in observations} >= {"ok", "error"}  # overload is reported too
    lab = LabController(world.desired, Strategy.SMART, world.mix)
    book = DemandBook()
    book.configure_learning(world.desired.policy, world.desired.catalog, world.desired.profiles)
    book.configure(world.profiles)
    for observation in observations:
        lab.observe(observation)
        book.observe(observation)
    picture, forecast = lab.forecast(now)
    live_picture = book.picture(now)
    live = with_correlation(book.forecast(now, world.desired.policy), live_picture, world.profiles)
    assert forecast == live
    assert picture == live_picture
    assert any(d.requests_per_minute > 0 for d in forecast)  # a model crossed the gate


def test_a_model_under_the_evidence_gate_gets_no_forecast() -> None:
    world = small_world(models=4)
    lab = LabController(world.desired, Strategy.SMART, world.mix)
    one = RequestObservation(
        t=100.0,
        endpoint="chat",
        model="general-8b",
        served_model="general-8b",
        host_id="gpu-server-01",
        outcome="ok",
        status=200,
        service_seconds=0.2,
    )
    gate = world.desired.policy.portfolio_min_observations
    for i in range(gate - 1):
        lab.observe(replace(one, t=one.t + i))
    _, forecast = lab.forecast(100.0 + gate)
    assert "general-8b" not in {d.model_id for d in forecast}
    lab.observe(replace(one, t=one.t + gate))
    _, forecast = lab.forecast(100.0 + gate)
    assert "general-8b" in {d.model_id for d in forecast}


def test_an_explicit_preemption_of_a_last_replica_is_delivered_and_not_a_violation() -> None:
    hosts = (host("mini-01", res("research-32b")),)
    drain = Action("d1", ActionKind.DRAIN, "mini-01", "research-32b", executable=True)
    wanted = plan(assign("general-8b", "mini-01"), targets={"research-32b": 1, "general-8b": 1})
    assert last_replica_removals((drain,), wanted, hosts) == [
        "drain of the last ready research-32b on mini-01"
    ]

    def gate(p: object) -> Withheld | None:
        facts = DeliveryFacts(
            now=NOW,
            mode=Mode.AUTOMATIC,
            issuing=True,
            plan=p,  # type: ignore[arg-type]
            min_route_lease_seconds=30.0,
            routes=routes_from_hosts(hosts, NOW, 60.0),
        )
        return delivery_gate(PendingAction(drain), facts).withheld

    assert gate(wanted) is Withheld.LAST_REPLICA
    staged = replace(
        wanted, preemptions=(Preemption("mini-01", "research-32b", "general-8b", "priority"),)
    )
    assert last_replica_removals((drain,), staged, hosts) == []
    assert gate(staged) is None
