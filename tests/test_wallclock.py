"""The daemons' wall clock: time.time unless an offset file is named."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gridctl.wallclock import OFFSET_FILE_ENV, OffsetClock, wall_clock


def test_without_the_variable_it_is_time_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OFFSET_FILE_ENV, raising=False)
    assert wall_clock() is time.time


def test_the_offset_file_steps_the_clock(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    offset = tmp_path / "offset"
    monkeypatch.setenv(OFFSET_FILE_ENV, str(offset))
    clock = wall_clock()
    assert isinstance(clock, OffsetClock)
    assert abs(clock() - time.time()) < 1  # a missing file is no offset
    offset.write_text("3600\n")
    clock._read_at = float("-inf")  # skip the 0.1 s re-read interval
    assert abs(clock() - time.time() - 3600) < 1
    for junk in ("soon", "nan", ""):
        offset.write_text(junk)
        clock._read_at = float("-inf")
        assert abs(clock() - time.time()) < 1
