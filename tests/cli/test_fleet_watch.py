"""``gridctl fleet watch`` joining a running fleet prints what happens from now on: earlier
history is not replayed as if it had just happened, and an old rejection does not name
today's revision as the one that stayed in force."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gridctl import contexts
from gridctl.cli.main import main
from gridctl.cli.up_cmd import Follower


def document(events: list[dict[str, Any]], revision: str = "b" * 40) -> dict[str, Any]:
    return {
        "hosts": [{"host_id": "local-1", "residencies": [{"model_id": "m", "state": "ready"}]}],
        "desired": {
            "revision": revision,
            "rejected": [{"revision": "a" * 40, "at": 5.0, "errors": []}],
        },
        "history": events,
    }


OLD = [{"at": 10.0, "event": "warm_succeeded", "model_id": "m", "host_id": "local-1"}]
NEW = {"at": 99.0, "event": "drain_succeeded", "model_id": "m", "host_id": "local-1"}


def test_watch_primes_then_prints_only_new_events() -> None:
    follower = Follower(replay=False)
    now, first = follower.follow(document(OLD))
    assert first.startswith("[   0.0s] watching: revision bbbbbbbbbbbbbbbbbbb in force, 1 host(s)")
    assert "1 earlier event(s) not replayed" in first
    assert now.endswith("m on local-1: absent -> ready")  # the residencies as they are now
    assert follower.follow(document(OLD)) == []
    later = follower.follow(document([*OLD, NEW]))
    assert len(later) == 1 and "drain_succeeded: m on local-1" in later[0]


def test_up_replays_from_its_own_start() -> None:
    lines = Follower().follow(document(OLD))
    assert any("warm_succeeded" in line for line in lines)
    assert any("rejected" in line for line in lines)


def test_up_says_once_how_long_from_controller_start_to_a_routable_model() -> None:
    started = time.monotonic() - 1.5  # the controller was spawned 1.5 s ago
    follower = Follower(controller_started=started)
    cold = document([])
    cold["hosts"][0]["residencies"][0].update(state="warming", routable=False)
    assert follower.awaiting_first_routable
    assert not any("model routable" in line for line in follower.follow(cold))
    warm = document([])
    warm["hosts"][0]["residencies"][0].update(routable=True)
    lines = follower.follow(warm)
    said = [line for line in lines if "controller start -> model routable:" in line]
    assert len(said) == 1 and said[0].endswith("s (m on local-1)")
    seconds = float(said[0].split("routable: ")[1].split(" s")[0])
    assert seconds >= 1.5
    assert not follower.awaiting_first_routable
    assert not any("model routable" in line for line in follower.follow(warm))


def test_watch_never_reports_a_start_to_routable_time() -> None:
    warm = document([])
    warm["hosts"][0]["residencies"][0].update(routable=True)
    follower = Follower(replay=False)
    assert not follower.awaiting_first_routable
    for _ in range(2):
        assert not any("model routable" in line for line in follower.follow(warm))


def test_fleet_commands_find_the_fleet_of_the_current_context(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`gridctl fleet status` (watch, down) look where the context's `up` ran, not only at
    the default state directory."""
    root = tmp_path / "elsewhere"
    contexts.record(
        contexts.Context(
            name="local-22400", controller="http://127.0.0.1:22400", state_root=str(root)
        )
    )
    assert main(["fleet", "status"]) == 1
    assert f"no fleet recorded under {root}" in capsys.readouterr().err
