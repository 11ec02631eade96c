"""``gridctl lab scenario`` / ``graduate`` end to end in-process: output, errors, report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gridctl.cli.main import main

SMALL = ["--machines", "2", "--models", "4", "--users", "10", "--duration", "10m"]


def test_scenario_json_is_byte_identical_across_runs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "scenario", *SMALL, "--json"]) == 0
    first = capsys.readouterr().out
    assert main(["lab", "scenario", *SMALL, "--json"]) == 0
    assert capsys.readouterr().out == first
    body = json.loads(first)
    assert body["identical_traces"] is True
    assert body["runs"][0]["strategy"] == "smart"
    assert body["scenario"]["duration_minutes"] == 10


def test_scenario_table_and_timeline(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "scenario", *SMALL, "--strategy", "greedy", "--timeline"]) == 0
    out = capsys.readouterr().out
    assert "greedy" in out and "served%" in out and "[   0]" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--machines", "0"], "--machines must be between 1 and 64"),
        (["--machines", "x"], "--machines 'x' is not an integer"),
        (["--models", "33"], "--models must be between 1 and 32"),
        (["--duration", "2 weeks"], "--duration '2 weeks'"),
        (["--workload-trace", "coding"], "use WORKLOAD=CSV"),
        (["--workload-trace", "cooking=x.csv"], "unknown workload 'cooking'"),
        (["--oracle", "--machines", "5"], "--oracle: at most 4 machines"),
    ],
)
def test_bad_arguments_exit_1_naming_the_option(
    args: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["lab", "scenario", *SMALL, *args]) == 1
    assert words in capsys.readouterr().err


def test_a_bad_trace_is_refused_with_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("0,1\n60,2\n30,1\n")
    assert main(["lab", "scenario", *SMALL, "--workload-trace", f"coding={trace}"]) == 1
    assert f"{trace}:3: timestamp 30 is not after the previous one" in capsys.readouterr().err


def test_a_trace_replays_with_a_burst(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "trace.csv"
    trace.write_text("".join(f"{t},{50 if 300 <= t < 360 else 1}\n" for t in range(0, 600, 10)))
    args = [*SMALL, "--users", "80", "--workload-trace", f"coding={trace}", "--json"]
    assert main(["lab", "scenario", *args]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["scenario"]["traces"] == {"coding": str(trace)}
    offered = [row["offered"].get("coding", 0) for row in body["runs"][0]["timeline"]]
    burst = sum(offered[5:6])  # trace seconds 300-360 of 600 map onto minute 5 of 10
    assert burst > 2 * max(offered[:4] + offered[7:])


def test_report_writes_json_html_and_charts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    assert main(["lab", "scenario", *SMALL, "--compare", "--report", str(out)]) == 0
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out
    page = (out / "index.html").read_text()
    for chart in ("served.png", "residency.png", "churn.png"):
        assert (out / chart).stat().st_size > 1000
        assert f'src="{chart}"' in page
    body = json.loads((out / "report.json").read_text())
    assert [r["strategy"] for r in body["runs"]] == ["smart", "reactive", "greedy", "static"]


def test_graduate_prints_every_gate(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "lab",
            "graduate",
            "--machines",
            "2",
            "--seeds",
            "1",
            "--models",
            "4",
            "--users",
            "10",
            "--duration",
            "8m",
            "--json",
        ]
    )
    body = json.loads(capsys.readouterr().out)
    names = [g["name"] for g in body["gates"]]
    assert len(names) == 9 and "predictive_startup_savings_over_reactive" in names
    assert code == (0 if body["passed"] else 1)
    assert {"name", "value", "threshold", "passed"} <= set(body["gates"][0])
    assert len(body["runs"]) == 4


def test_graduate_bad_list_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "graduate", "--seeds", "a,b"]) == 2
    assert "--seeds 'a,b'" in capsys.readouterr().err


def test_graduate_says_the_gates_assume_full_length_runs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["lab", "graduate", "--machines", "2", "--seeds", "42", "--duration", "10m"]
    assert main([*argv, "--models", "2", "--users", "5"]) == 1
    err = capsys.readouterr().err
    assert "failing gates: " in err
    assert "calibrated on runs of at least 2h of simulated time; this run had 10m" in err
