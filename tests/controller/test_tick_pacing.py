"""The tick loop rests after a tick as long as that tick took, so inputs that arrive
faster than ticks end cannot keep the tick thread (and the planning process) busy all
the time (the real service and its tick thread, in process)."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gridctl.controller.serving import tick_rest
from gridctl.tick.computing import compute_tick
from tests.controller.simnodes import sim_service
from tests.controller.test_http_flow import POLICY, profile

SLOW_SECONDS = 0.15  # what each tick's computation takes here
DEADLINE = 60.0


@given(
    took=st.floats(min_value=0, max_value=3600, allow_nan=False),
    since=st.floats(min_value=0, max_value=3600, allow_nan=False),
)
def test_the_rest_is_what_remains_of_the_last_ticks_duration(took: float, since: float) -> None:
    rest = tick_rest(took, since)
    assert rest >= 0
    assert since + rest >= took  # the next tick never starts sooner than the last one took
    assert rest == 0 or since + rest == took  # and never later than that


def test_ticks_dirtied_without_pause_still_rest_as_long_as_they_took(tmp_path: Path) -> None:
    service, _clock = sim_service(tmp_path, {"gemma.yaml": profile("gemma"), "policy.yaml": POLICY})
    service.build_app()
    ctl = service.controller
    spans: list[tuple[float, float]] = []
    enough = threading.Event()

    def slow(inputs: Any) -> Any:
        started = time.monotonic()
        time.sleep(SLOW_SECONDS)
        outcome = compute_tick(inputs)
        spans.append((started, time.monotonic()))
        ctl.mark_dirty()  # an input arrived meanwhile: the next tick is due at once
        if len(spans) >= 6:
            enough.set()
        return outcome

    ctl.compute = slow
    service.start_ticking()
    try:
        assert enough.wait(DEADLINE), f"only {len(spans)} ticks in {DEADLINE} s"
    finally:
        service.stop_ticking()
    for (start, end), (after, _) in itertools.pairwise(spans):
        assert after - end >= end - start, (after - end, end - start)
