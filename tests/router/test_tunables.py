"""The router's policy tunables change its decisions (each against its default)."""

from __future__ import annotations

from gridctl.router import affinity
from gridctl.router.attribution import Attribution, Estimate
from gridctl.router.breakers import Breakers, BreakerTunables
from gridctl.router.choosing import Candidate, choose
from tests.router.test_routing import route

KEY = ("h", "http://h", "m")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_failure_threshold_and_backoff_cap_follow_the_tunables() -> None:
    clock = Clock()
    tunables = BreakerTunables(failure_threshold=3, backoff_max_seconds=2.0)
    breakers = Breakers(clock, lambda: tunables)
    breakers.record(KEY, 500)
    breakers.record(KEY, 500)
    assert breakers.available(KEY)  # two failures: the default would have opened
    breakers.record(KEY, 500)
    assert not breakers.available(KEY)
    for _ in range(4):
        clock.now += breakers.backoff_left(KEY)
        assert breakers.admit(KEY)
        breakers.record(KEY, None)
    assert breakers.backoff_left(KEY) == 2.0  # capped at the tunable, not 30 s


def test_rate_limit_cooldown_follows_the_tunable() -> None:
    clock = Clock()
    breakers = Breakers(clock, lambda: BreakerTunables(rate_limit_open_seconds=5.0))
    breakers.record(KEY, 429)
    assert breakers.backoff_left(KEY) == 5.0
    assert Breakers(clock).backoff_left(KEY) == 0.0


def test_attribution_full_samples_sets_the_confidence_ramp() -> None:
    clock = Clock()
    default, quick = Attribution(clock), Attribution(clock)
    quick.configure(2)
    for attribution in (default, quick):
        for _ in range(2):
            attribution.record("h", "m", "a" * 64, 1.0, 10)
    assert default.estimate("h", "m", "a" * 64).throughput_confidence == 0.25
    assert quick.estimate("h", "m", "a" * 64).throughput_confidence == 1.0
    speeds = quick.model_speeds()
    assert list(speeds) == [("h", "m")] and speeds[("h", "m")].tokens_per_second == 10.0


def test_affinity_route_slack_widens_the_near_set() -> None:
    key = affinity.hash_key("s")
    assert key is not None
    home = choose([Candidate(route("fast")), Candidate(route("slow"))], affinity=key)
    assert home is not None
    other = "slow" if home.host_id == "fast" else "fast"
    candidates = [
        Candidate(route(home.host_id), estimate=Estimate(1.0, 1.0, None, 0.0)),
        Candidate(route(other), estimate=Estimate(0.5, 1.0, None, 0.0)),
    ]
    assert choose(candidates, affinity=key) == route(other)  # 2x slower: outside 20 %
    assert choose(candidates, affinity=key, affinity_slack=1.5) == route(home.host_id)


def test_affinity_key_max_bytes_bounds_the_accepted_key() -> None:
    assert affinity.hash_key("k" * 300) is None
    assert affinity.hash_key("k" * 300, max_bytes=512) is not None
