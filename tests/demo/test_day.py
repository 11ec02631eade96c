"""The demo's pure parts: its desired state validates, the verdicts read the samples right
on both sides of each promise, the report's buckets add up, and the CLI refuses bad input."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from gridctl.cli.demo_cmd import duration
from gridctl.config import check_directory
from gridctl.demo.day import LAPTOP, PHASES, DayResult, verdicts
from gridctl.demo.desired import BASELINE, SPECIALIST, STRATEGIES, write_desired_state
from gridctl.demo.report import document, residency_rows, served_rows
from gridctl.demo.timeline import Sample, read_sample
from gridctl.demo.traffic import Outcome

ROOT = Path(__file__).resolve().parents[2]
OFFLOADED = "the specialist is offloaded during the surge and restored after it"
DAY = 300.0


def sample(at: float, base: int, spec: int, laptop: bool = True) -> Sample:
    hosts = ["local-1", "local-2", LAPTOP] if laptop else ["local-1", "local-2"]
    routable = {BASELINE: tuple(hosts[:base])}
    if spec:
        routable[SPECIALIST] = (hosts[-1],)
    return Sample(at, routable, {h: "accepting" for h in hosts}, {})


def day(samples: list[Sample], outcomes: list[Outcome] | None = None) -> DayResult:
    return DayResult(
        "smart",
        DAY,
        [(name, DAY * start) for name, start in PHASES],
        outcomes if outcomes is not None else [Outcome("g", "general", 1.0, 0.2, BASELINE)],
        samples,
        [],
        (120.0, 170.0),
    )


def good_day() -> list[Sample]:
    return [
        sample(10, 1, 0),
        sample(40, 1, 1),  # morning: specialist loaded
        sample(100, 3, 0, laptop=True),  # surge: 1 -> 3, specialist offloaded
        sample(150, 2, 0, laptop=False),  # drained laptop evacuated
        sample(200, 1, 0),  # quiet
        sample(280, 1, 1),  # cooldown: specialist back
    ]


def held(result: DayResult) -> dict[str, bool]:
    return {v.promise: v.held for v in verdicts(result)}


def test_every_promise_holds_on_a_good_day() -> None:
    assert all(held(day(good_day())).values())


@pytest.mark.parametrize(
    ("replacements", "promise"),
    [
        ({2: sample(100, 2, 0)}, "baseline scales 1 -> 3 during the surge"),
        ({1: sample(40, 1, 0)}, OFFLOADED),  # never loaded in the morning
        ({2: sample(100, 3, 1), 3: sample(150, 2, 1, laptop=False)}, OFFLOADED),
        ({5: sample(280, 1, 0)}, OFFLOADED),  # not restored
        ({3: sample(150, 3, 0, laptop=True)}, f"the drained host {LAPTOP} is evacuated"),
        ({5: sample(280, 2, 1)}, "the cooldown scales the baseline back to 1"),
    ],
)
def test_each_promise_fails_when_its_evidence_is_missing(
    replacements: dict[int, Sample], promise: str
) -> None:
    samples = good_day()
    for index, replacement in replacements.items():
        samples[index] = replacement
    result = held(day(samples))
    assert result[promise] is False
    assert sum(not ok for ok in result.values()) == 1, result


def test_a_failed_request_or_a_leftover_process_breaks_the_day() -> None:
    failing = day(good_day(), [Outcome("g", "general", 5.0, 1.0, None, "APIStatusError 503")])
    assert held(failing)["no failed request"] is False
    leftover = day(good_day())
    leftover.left_running = ["123 llama-server"]
    assert held(leftover)["nothing left running"] is False


def test_a_static_day_promises_only_safety() -> None:
    result = day([sample(10, 2, 1), sample(280, 2, 1)])
    result.strategy = "static"
    assert set(held(result)) == {
        f"the drained host {LAPTOP} is evacuated",
        "no failed request",
        "nothing left running",
    }


def test_status_rows_become_samples() -> None:
    status = {
        "hosts": [
            {
                "host_id": "local-2",
                "state": "draining",
                "residencies": [
                    {"model_id": BASELINE, "routable": True},
                    {"model_id": SPECIALIST, "routable": False},
                ],
            },
            {"host_id": "local-1", "state": "accepting", "residencies": []},
        ],
        "models": [{"model_id": BASELINE, "desired": 2}],
    }
    s = read_sample(status, 3.0)
    assert s.routable == {BASELINE: ("local-2",)}
    assert s.host_states == {"local-1": "accepting", "local-2": "draining"}
    assert s.desired == {BASELINE: 2}


def test_report_buckets_add_up() -> None:
    outcomes = [
        Outcome("g", "general", 1.0, 0.1, BASELINE),
        Outcome("g", "general", 12.0, 0.1, None, "boom"),
        Outcome("c", "coding", 12.5, 0.1, SPECIALIST),
    ]
    result = day(good_day(), outcomes)
    rows = served_rows(result)
    assert rows[0] == {"general": [1, 1]} and rows[1] == {"general": [1, 0], "coding": [1, 1]}
    assert sum(c[0] for r in rows for c in r.values()) == 3
    residency = residency_rows(result)
    assert residency[1] == {"local-1": [BASELINE]}
    doc = document([(result, verdicts(result))])
    (run,) = doc["runs"]
    assert (run["served"], run["failed"]) == (2, 1)
    assert run["served_by"] == {"coding": {SPECIALIST: 1}, "general": {BASELINE: 1}}


@pytest.mark.parametrize("strategy", sorted(STRATEGIES))
def test_the_demo_desired_state_validates(tmp_path: Path, strategy: str) -> None:
    write_desired_state(tmp_path, STRATEGIES[strategy], cooldown_seconds=15)
    report = check_directory(tmp_path)
    assert not report.errors, [e.render() for e in report.errors]
    assert report.state is not None
    names = sorted(p.name for p in report.state.profiles)
    assert names == sorted([BASELINE, SPECIALIST])


def test_duration_parsing() -> None:
    assert duration("5m") == 300.0 and duration("300s") == 300.0 and duration("150") == 150.0
    for bad in ("1m", "2h", "soon", "-5m"):
        with pytest.raises(argparse.ArgumentTypeError):
            duration(bad)


def test_the_cli_refuses_unknown_strategies_and_durations() -> None:
    run = [sys.executable, "-m", "gridctl", "fleet"]
    done = subprocess.run(
        [*run, "compete", "smart", "oracle"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "unknown strategy oracle" in done.stderr
    done = subprocess.run(
        [*run, "demo", "--duration", "10s"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2 and "--duration" in done.stderr


def test_a_state_directory_the_demo_did_not_make_is_never_emptied(tmp_path: Path) -> None:
    from gridctl.demo.day import STATE_MARKER, _fresh_state_root

    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(RuntimeError, match="was not made by `gridctl fleet demo`"):
        _fresh_state_root(foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"
    ours = tmp_path / "day"
    _fresh_state_root(ours)
    (ours / "old.log").write_text("last day")
    _fresh_state_root(ours)
    assert sorted(p.name for p in ours.iterdir()) == [STATE_MARKER]
