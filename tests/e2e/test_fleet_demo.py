"""``gridctl fleet demo --duration 5m`` end to end: the real day, its verdicts, and no leftovers.

The command starts its own 3-host fleet (real controller, node daemons and
llama-server children), drives the day through the router with the official
``openai`` client and stops everything. This test runs the command as an
operator does, in a fresh process, and checks what it printed, the report it
wrote, and that no process naming its state directory is left.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from tests.e2e.harness import ROOT, engine_port_base, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(1200)]


def ours(state: Path) -> list[str]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            cmd = proc.info.get("cmdline") or []
        except psutil.Error:
            continue
        if any(str(state) in part for part in cmd):
            found.append(" ".join(cmd[:4]))
    return found


def test_the_demo_day_scales_offloads_evacuates_and_cools_down(tmp_path: Path) -> None:
    state, report = tmp_path / "demo", tmp_path / "report"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gridctl",
            "fleet",
            "demo",
            "--duration",
            "5m",
            "--state-dir",
            str(state),
            "--report",
            str(report),
            "--port",
            str(free_port()),
            "--engine-port-base",
            str(engine_port_base()),
            "--json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    leftovers = ours(state)
    assert not leftovers, leftovers
    assert done.stdout, done.stderr[-4000:]
    doc = json.loads(done.stdout)
    (run,) = doc["runs"]
    timeline = "\n".join(t["text"] for t in run["timeline"])
    print(timeline)
    for v in run["verdicts"]:
        print(("held     " if v["held"] else "NOT HELD ") + v["promise"] + ": " + v["evidence"])
    assert done.returncode == 0, done.stderr[-4000:]
    assert all(v["held"] for v in run["verdicts"])
    assert run["failed"] == 0 and run["served"] >= 20  # real traffic, even when busy
    assert "-> 3 routable" in timeline
    assert "host local-3: accepting -> draining" in timeline
    assert run["served_by"]["coding"].get("coder", 0) > 0  # the specialist answered
    assert (report / "index.html").is_file() and (report / "served.png").is_file()
    assert (report / "residency-smart.png").is_file()
    assert json.loads((report / "report.json").read_text()) == doc
