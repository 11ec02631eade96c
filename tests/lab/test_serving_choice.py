"""The simulated router sends each request to the least loaded ready replica (ties by host)."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.lab.serving import Classifier, Replica, serve_minute
from tests.lab.worlds import small_world


@settings(max_examples=80, deadline=None)
@given(
    capacities=st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0, 7.5, 40.0]), min_size=1, max_size=6),
    requests=st.integers(1, 60),
)
def test_each_request_takes_the_least_loaded_replica(
    capacities: list[float], requests: int
) -> None:
    world = small_world(models=4, users=40, minutes=12)
    profiles = world.profiles
    model = sorted(profiles)[0]
    arrivals = [replace(a, model=model) for minute in world.arrivals for a in minute][:requests]
    hosts = [f"host-{i % 4}-{i}" for i in range(len(capacities))]  # not in load order
    pool = {model: [Replica(h, model, 1.5, c) for h, c in zip(hosts, capacities, strict=True)]}
    log, observations = serve_minute(
        arrivals, pool, {}, profiles, Classifier(world.desired.catalog), {}
    )
    used = dict.fromkeys(hosts, 0)
    for served, observation in zip(log.served, observations, strict=True):
        # the reference rule: min over (used / capacity, host) before this request
        best = min(zip(hosts, capacities, strict=True), key=lambda hc: (used[hc[0]] / hc[1], hc[0]))
        assert served.host_id == observation.host_id == best[0]
        used[best[0]] += 1
        load = used[best[0]] / best[1]
        assert observation.outcome == ("error" if load > 1.0 else "ok")
    assert [r.used for r in pool[model]] == [used[h] for h in hosts]
