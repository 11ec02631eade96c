"""``gridctl lab graduate`` as a sweep: ranges, bad input, parallel cells, progress, the page."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gridctl.cli.lab_cmd import UsageError
from gridctl.cli.lab_sweep import parse_int_ranges, run_sweep
from gridctl.cli.main import main
from gridctl.lab.graduation import graduate, sweep_cells
from tests.lab.worlds import blueprints, catalog

TINY = ["--models", "3", "--users", "6", "--duration", "5m"]
ROOT = Path(__file__).resolve().parents[2]


def test_ranges_and_lists_expand_in_the_order_given() -> None:
    assert parse_int_ranges("--seeds", "1-5,42,100-102", 0, 1000) == [
        1, 2, 3, 4, 5, 42, 100, 101, 102,
    ]  # fmt: skip
    assert parse_int_ranges("--seeds", " 7 ", 0, 10) == [7]
    assert parse_int_ranges("--machines", "16,2", 1, 64) == [16, 2]


@pytest.mark.parametrize(
    ("option", "text", "words"),
    [
        ("--seeds", "a,b", "--seeds 'a,b': use integers and ranges"),
        ("--seeds", "5-1", "range 5-1 runs backwards"),
        ("--seeds", "1-3,2", "2 is given twice"),
        ("--seeds", "", "--seeds '': use integers and ranges"),
        ("--seeds", "1,", "--seeds '1,': use integers and ranges"),
        ("--seeds", "0-99999", "more than 10000 values"),
        ("--machines", "0,2", "values must be between 1 and 64"),
        ("--machines", "60-65", "values must be between 1 and 64"),
        ("--jobs", "0", "--jobs must be between 1 and 1024, got 0"),
        ("--jobs", "many", "--jobs 'many' is not an integer"),
        ("--users", "0", "--users must be between 1 and 10000"),
        ("--duration", "1m", "--duration must be between 2 minutes and 24 hours"),
    ],
)
def test_bad_input_is_one_line_naming_the_flag_exit_2_and_runs_nothing(
    option: str, text: str, words: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    report = tmp_path / "page"
    argv = ["lab", "graduate", "--machines", "2", "--seeds", "1", *TINY, "--report", str(report)]
    assert main([*argv, option, text, "--progress"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1 and words in lines[0] and lines[0].startswith("gridctl lab graduate:")
    assert not report.exists()


def test_parse_int_ranges_refuses_a_value_out_of_range() -> None:
    with pytest.raises(UsageError, match="--seeds '-1'"):
        parse_int_ranges("--seeds", "-1", 0, 10)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=2, unique=True),
    seeds=st.lists(st.integers(0, 10_000), min_size=1, max_size=2, unique=True),
)
def test_a_parallel_sweep_equals_a_serial_one(sizes: list[int], seeds: list[int]) -> None:
    cells = sweep_cells(sizes, seeds, minutes=4, users=5, models=3)
    serial = run_sweep(blueprints(), catalog(), cells, 1)
    finished: list[tuple[int, int, int]] = []
    parallel = run_sweep(
        blueprints(), catalog(), cells, 2, lambda k, c, _s: finished.append((k, c.machines, c.seed))
    )
    assert json.dumps(parallel.to_json(), sort_keys=True) == json.dumps(
        serial.to_json(), sort_keys=True
    )
    in_order = graduate(blueprints(), catalog(), sizes, seeds, minutes=4, users=5, models=3)
    assert in_order == serial
    assert [k for k, _, _ in finished] == list(range(1, len(cells) + 1))
    assert sorted((m, s) for _, m, s in finished) == sorted((c.machines, c.seed) for c in cells)


def _gridctl(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "gridctl", *argv],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
        check=False,
    )


def test_the_json_report_is_the_same_bytes_whatever_jobs_is() -> None:
    argv = ["lab", "graduate", "--machines", "1-2", "--seeds", "3,1", *TINY, "--json"]
    serial = _gridctl(*argv, "--jobs", "1", "--progress")
    parallel = _gridctl(*argv, "--jobs", "3", "--progress")
    assert serial.returncode in (0, 1), serial.stderr
    assert parallel.returncode == serial.returncode
    assert parallel.stdout == serial.stdout
    progress = [line for line in parallel.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 4
    assert progress[-1].startswith("[4/4] machines ") and progress[-1].endswith("s")
    body = json.loads(serial.stdout)
    assert [(c["machines"], c["seed"]) for c in body["cells"]] == [(1, 3), (1, 1), (2, 3), (2, 1)]
    assert [(r["machines"], r["seed"]) for r in body["runs"][::4]] == [
        (1, 3), (1, 1), (2, 3), (2, 1),
    ]  # fmt: skip
    for gate in body["gates"]:
        assert {"name", "value", "threshold", "comparison", "passed", "detail"} <= set(gate)
        assert {"worst_cell", "median", "deciding_cell"} <= set(gate)
    cell = body["cells"][0]
    assert set(cell["scores"]) == {"smart", "reactive", "greedy", "static"}
    assert cell["winner"] in cell["scores"]
    assert {"smart_margin_over_best_baseline", "smart_margin_over_static"} <= set(cell)


def test_no_progress_lines_unless_asked_or_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    main(["lab", "graduate", "--machines", "1", "--seeds", "1", *TINY, "--jobs", "1"])
    captured = capsys.readouterr()
    assert "[1/1]" not in captured.err
    assert "vs-best" in captured.out and "worst cell" in captured.out


def test_sixteen_machines_run_in_the_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["lab", "graduate", "--machines", "16", "--seeds", "2", *TINY, "--json"])
    body = json.loads(capsys.readouterr().out)
    assert code == (0 if body["passed"] else 1)
    assert [c["machines"] for c in body["cells"]] == [16]
    assert len(body["runs"]) == 4


def test_report_charts_the_worst_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sweep"
    argv = ["lab", "graduate", "--machines", "1-2", "--seeds", "1-2", *TINY, "--jobs", "2"]
    main([*argv, "--report", str(out)])
    assert f"report: {out / 'index.html'}" in capsys.readouterr().out
    body = json.loads((out / "report.json").read_text())
    ranked = sorted(body["cells"], key=lambda c: c["smart_margin_over_best_baseline"])
    page = (out / "index.html").read_text()
    assert page.count('class="worst"') == 3
    for cell in ranked[:3]:
        stem = f"m{cell['machines']}-s{cell['seed']}"
        served = out / f"served-{stem}.png"
        assert served.stat().st_size > 1000 and f'src="{served.name}"' in page
        charts = sorted(out.glob(f"residency-{stem}-*.png"))
        assert any(c.name.endswith("-smart.png") for c in charts)
        assert all(f'src="{c.name}"' in page for c in charts)
    for gate in body["gates"]:
        assert gate["name"] in page
