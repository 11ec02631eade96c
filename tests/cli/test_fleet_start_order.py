"""`gridctl up` starts its nodes when the controller announces its address: the wait for
that line reads only what this start appended to the (appended-to) controller log, and
gives up as soon as the controller exits."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from gridctl.fleetrun import CONTROLLER_ANNOUNCEMENT, wait_announced


def child(log: Path, code: str) -> subprocess.Popen[bytes]:
    out = log.open("ab")
    try:
        return subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=subprocess.STDOUT)
    finally:
        out.close()


def test_the_announcement_of_this_start_is_found(tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    line = CONTROLLER_ANNOUNCEMENT.decode() + "http://127.0.0.1:1 (state s)"
    proc = child(log, f"import sys, time; print({line!r}, flush=True); time.sleep(30)")
    try:
        assert wait_announced(log, proc, deadline=20.0)
    finally:
        proc.kill()
        proc.wait()


def test_an_earlier_start_in_the_same_log_does_not_count(tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    log.write_bytes(CONTROLLER_ANNOUNCEMENT + b"http://127.0.0.1:1 (an earlier run)\n")
    before = log.stat().st_size
    # alive for a while after its own (different) first line: the stale one must not count
    proc = child(log, "import time; print('error: no', flush=True); time.sleep(1)")
    assert not wait_announced(log, proc, after=before, deadline=20.0)
    assert proc.wait() == 0


def test_a_controller_that_exits_without_announcing_is_not_waited_for(tmp_path: Path) -> None:
    log = tmp_path / "controller.log"
    proc = child(log, "raise SystemExit(3)")
    assert not wait_announced(log, proc, deadline=20.0)
    assert proc.wait() == 3
