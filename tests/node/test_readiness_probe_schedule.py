"""The llama.cpp adapter's readiness probe: every 50 ms while a small model's engine is
expected to become ready, then backing off to two probes a second for a long load."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gridctl.node.runtimes.llamacpp import (
    READY_PROBE_FAST_SECONDS,
    READY_PROBE_FIRST_SECONDS,
    READY_PROBE_LONGEST_SECONDS,
    next_probe_delay,
)


def schedule(until: float) -> list[tuple[float, float]]:
    """(seconds after the spawn, pause before the next probe) as ``wait_ready`` runs it."""
    waited, delay, steps = 0.0, READY_PROBE_FIRST_SECONDS, []
    while waited < until:
        steps.append((waited, delay))
        waited += delay
        delay = next_probe_delay(waited, delay)
    return steps


def test_the_first_seconds_are_probed_every_50_ms() -> None:
    fast = [delay for at, delay in schedule(60.0) if at < READY_PROBE_FAST_SECONDS]
    assert set(fast) == {READY_PROBE_FIRST_SECONDS}
    assert abs(len(fast) - READY_PROBE_FAST_SECONDS / READY_PROBE_FIRST_SECONDS) <= 1


def test_a_long_load_is_probed_twice_a_second() -> None:
    late = [delay for at, delay in schedule(120.0) if at > READY_PROBE_FAST_SECONDS + 5]
    assert set(late) == {READY_PROBE_LONGEST_SECONDS}
    assert len(schedule(120.0)) < 300  # a two-minute load: about 40 + 2 x 118 probes


@given(
    st.floats(min_value=0.0, max_value=3600.0),
    st.floats(min_value=0.0, max_value=READY_PROBE_LONGEST_SECONDS),
)
def test_the_pause_stays_between_50_ms_and_half_a_second(waited: float, delay: float) -> None:
    after = next_probe_delay(waited, delay)
    assert READY_PROBE_FIRST_SECONDS <= after <= READY_PROBE_LONGEST_SECONDS
    if waited >= READY_PROBE_FAST_SECONDS:
        assert after >= min(delay, READY_PROBE_LONGEST_SECONDS)  # never shorter again
