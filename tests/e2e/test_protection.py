"""Local host protection on real processes: user activity takes a loaded host out of service.

Three logical hosts, two replicas. The sensor test hook (``GRIDCTL_SENSOR_OVERRIDES``)
reports a user at the keyboard of one serving host; its protection loop pauses
it, the router stops sending it work at once, the controller warms a
replacement on the spare host, and only then drains the paused host's copy.
Requests keep succeeding throughout.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from tests.e2e.harness import GEMMA, Fleet, make_fleet, profile_yaml, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(600)]


@pytest.fixture
def fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Fleet]:
    sensors = tmp_path / "sensors.json"
    sensors.write_text("{}")
    monkeypatch.setenv("GRIDCTL_SENSOR_OVERRIDES", str(sensors))
    fleet = make_fleet(tmp_path)
    fleet.repo.write("gemma.yaml", profile_yaml(GEMMA, min_replicas=2, max_replicas=2))
    fleet.repo.commit("two gemma replicas")
    yield fleet
    fleet.stop()


def host_states(status: dict[str, Any]) -> dict[str, str]:
    return {h["host_id"]: h["state"] for h in status["hosts"]}


def copies(status: dict[str, Any]) -> dict[str, str]:
    return {
        h["host_id"]: r["state"]
        for h in status["hosts"]
        for r in h["residencies"]
        if r["model_id"] == GEMMA and r["state"] != "cached"
    }


def routable(status: dict[str, Any]) -> set[str]:
    return {
        h["host_id"]
        for h in status["hosts"]
        for r in h["residencies"]
        if r["model_id"] == GEMMA and r.get("routable")
    }


def test_user_activity_moves_a_replica_make_before_break(fleet: Fleet, tmp_path: Path) -> None:
    fleet.start(machines=3)
    try:
        serving = wait_for("two routable replicas", lambda: len(fleet.routable(GEMMA)) == 2, 240)
    except AssertionError:
        print(fleet.log())
        raise
    assert serving
    hosts = fleet.routable(GEMMA)
    victim, survivor = hosts[0], hosts[1]
    spare = ({"local-1", "local-2", "local-3"} - set(hosts)).pop()
    client = OpenAI(base_url=fleet.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    failures: list[str] = []
    served = [0]
    stop = threading.Event()

    def traffic() -> None:
        while not stop.is_set():
            try:
                client.chat.completions.create(
                    model=GEMMA, messages=[{"role": "user", "content": "Hi"}], max_tokens=4
                )
                served[0] += 1
            except Exception as exc:  # any failed request fails the test
                failures.append(repr(exc))

    worker = threading.Thread(target=traffic, daemon=True)
    worker.start()
    wait_for("traffic flowing", lambda: served[0] >= 2, 60)

    injected = time.monotonic()
    (tmp_path / "sensors.json").write_text(json.dumps({victim: {"idle_seconds": 0}}))
    timeline: list[tuple[float, dict[str, str], dict[str, str], set[str]]] = []

    def observe() -> bool:
        status = fleet.status()
        timeline.append(
            (time.monotonic() - injected, host_states(status), copies(status), routable(status))
        )
        last = timeline[-1]
        return last[2].get(victim) is None and spare in last[3] and survivor in last[3]

    try:
        wait_for("replica moved off the paused host", observe, deadline=300, interval=0.2)
    except AssertionError:
        for row in timeline[-20:]:
            print(row)
        print(fleet.log())
        raise
    stop.set()
    worker.join(timeout=60)

    paused_at = next(t for t, states, _c, _r in timeline if states.get(victim) == "paused")
    unrouted_at = next(t for t, _s, _c, r in timeline if victim not in r)
    spare_ready_at = next(t for t, _s, c, r in timeline if spare in r and c.get(spare) == "ready")
    victim_drain_at = next(
        t for t, _s, c, _r in timeline if c.get(victim) in (None, "draining", "unloading")
    )
    assert unrouted_at <= paused_at + 0.5  # the host fence removes it from routing at once
    # make-before-break, in every status read: whenever the paused host's copy is draining
    # or gone, the spare's replacement is ready and routable in that same read
    for t, _s, c, r in timeline:
        if c.get(victim) in (None, "draining", "unloading"):
            assert spare in r and c.get(spare) == "ready", (t, timeline)
    # the drain follows the replacement within one controller pass, which a status read
    # 0.2 s apart can land after: both may first show in the same read
    assert spare_ready_at <= victim_drain_at, timeline
    assert failures == []
    print(
        f"\nMEASURED user activity -> host paused {paused_at:.1f}s, spare READY "
        f"{spare_ready_at:.1f}s, old replica draining {victim_drain_at:.1f}s; "
        f"{served[0]} requests served, 0 failed"
    )
