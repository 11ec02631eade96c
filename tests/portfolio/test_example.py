"""The worked example in examples/portfolio: its plan and forecast output, checked."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gridctl.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "portfolio"


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_plan_observations_output_matches_the_checked_in_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run(
        capsys,
        "plan",
        str(EXAMPLE / "desired"),
        "--against",
        str(EXAMPLE / "one-slot.json"),
        "--observations",
        str(EXAMPLE / "trace.jsonl"),
    )
    masked = re.sub(r"planned in [0-9.]+ ms", "planned in N ms", out, count=1)
    expected = (EXAMPLE / "expected-plan.txt").read_text(encoding="utf-8")
    # the inputs digest covers the desired state's revision: the example's git commit
    digest = re.compile(r"^gridctl plan: inputs [0-9a-f]{12},")
    assert digest.match(masked) and digest.match(expected)
    assert digest.sub("", masked) == digest.sub("", expected)
    assert "coding -> general-7b" in out and "research -> general-7b" in out


def test_plan_observations_json_names_the_generalist(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(
        capsys,
        "plan",
        str(EXAMPLE / "desired"),
        "--against",
        str(EXAMPLE / "one-slot.json"),
        "--observations",
        str(EXAMPLE / "trace.jsonl"),
        "--json",
    )
    document = json.loads(out)
    portfolio = document["portfolio"]
    assert portfolio["mapping"] == {"coding": "general-7b", "research": "general-7b"}
    assert portfolio["selected"] == ["general-7b"]
    assert [r["state"] for r in portfolio["admission"]] == ["planned", "planned"]
    assert [a["model_id"] for a in document["assignments"]] == ["general-7b"]


def test_forecast_json_reports_workload_demand(capsys: pytest.CaptureFixture[str]) -> None:
    out = run(
        capsys,
        "forecast",
        str(EXAMPLE / "desired"),
        "--observations",
        str(EXAMPLE / "trace.jsonl"),
        "--json",
    )
    document = json.loads(out)
    assert {w["workload"]: w["requests"] for w in document["workloads"]} == {
        "coding": 30,
        "research": 20,
    }
    assert document["models"] == [] and document["transitions"] == []


def test_forecast_reports_mature_transitions_and_correlation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = []
    t0 = 1_800_000_000
    for s in range(5):  # five campaign sessions: image then video
        base = t0 + s * 100
        for offset, endpoint in ((0, "image"), (40, "video")):
            rows.append(
                {
                    "t": base + offset + 30,
                    "endpoint": endpoint,
                    "model": None,
                    "served_model": None,
                    "workload": None,
                    "modality": endpoint,
                    "input_units": 1,
                    "output_units": 1,
                    "service_seconds": 30.0,
                    "queue_depth": 0,
                    "outcome": "ok",
                    "session": f"hash-{s}",
                }
            )
    for minute in range(6):  # coder-7b and general-7b always busy in the same minutes
        for model in ("coder-7b", "general-7b"):
            rows.append(
                {
                    "t": t0 + minute * 60 + 5,
                    "endpoint": "chat",
                    "model": model,
                    "served_model": model,
                    "workload": "coding",
                    "modality": "text",
                    "service_seconds": 1.0,
                    "outcome": "ok",
                }
            )
    rows.append(
        {
            "t": t0 + 6 * 60 + 5,
            "endpoint": "chat",
            "model": "coder-7b",
            "served_model": "coder-7b",
            "workload": "coding",
            "modality": "text",
            "service_seconds": 1.0,
            "outcome": "ok",
        }
    )
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    desired = tmp_path / "desired"
    desired.mkdir()
    for name, source in (
        ("workloads.yaml", ROOT / "policies"),
        ("models.yaml", EXAMPLE / "desired"),
    ):
        text = (source / name).read_text(encoding="utf-8")
        (desired / name).write_text(text, encoding="utf-8")
    out = run(
        capsys,
        "forecast",
        str(desired),
        "--observations",
        str(trace),
        "--now",
        str(t0 + 7 * 60 + 30),
        "--json",
    )
    document = json.loads(out)
    (edge,) = document["transitions"]
    assert (edge["from"], edge["to"], edge["examples"], edge["confidence"]) == (
        "image",
        "video",
        5,
        1.0,
    )
    assert edge["lead_seconds"] == 40.0
    general = next(m for m in document["models"] if m["model"] == "general-7b")
    assert general["sources"] == ["coder-7b"] and general["correlated_requests_per_minute"] > 0


def test_forecast_names_the_bad_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text(
        '{"t": 1, "endpoint": "fax", "modality": "text", "service_seconds": 1, "outcome": "ok"}\n',
        encoding="utf-8",
    )
    assert main(["forecast", str(EXAMPLE / "desired"), "--observations", str(trace)]) == 1
    assert "line 1" in capsys.readouterr().err


def test_forecast_refuses_observations_over_the_policys_trace_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    desired = tmp_path / "desired"
    desired.mkdir()
    for name in ("models.yaml", "workloads.yaml"):
        (desired / name).write_text((EXAMPLE / "desired" / name).read_text(encoding="utf-8"))
    trace = EXAMPLE / "trace.jsonl"
    argv = ["forecast", str(desired), "--observations", str(trace), "--json"]
    assert main(argv) == 0
    capsys.readouterr()
    limit = trace.stat().st_size - 1
    (desired / "policy.yaml").write_text(
        "apiVersion: gridctl/v1\nkind: ControllerPolicy\nmetadata: {name: p}\n"
        f"spec: {{trace_max_bytes: {limit}}}\n",
        encoding="utf-8",
    )
    assert main(argv) == 1
    assert f"trace_max_bytes is {limit}" in capsys.readouterr().err
