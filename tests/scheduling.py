"""Longest files first: the order in which the suite's test files start.

The README's test command runs files whole on parallel workers (``--dist loadfile``:
a file's module-scoped fleet is built once) and hands them out in collection order.
A file that takes five minutes and starts last leaves the other workers idle while
it finishes, so the collection starts with the files that took longest in a
recorded run (``tests/durations.json``, seconds of wall time per file), longest
first; files it does not name keep their place after them. That is the classic
longest-processing-time-first rule: no file is split, and the run ends close to
when the slowest worker's share does.

``pytest --store-durations tests/durations.json`` records a run's per-file wall time
(every phase of every test: setup, call and teardown), so the order follows the
suite as it changes. An order never changes what a test checks, only when it runs.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

DURATIONS = Path(__file__).with_name("durations.json")


class _Collected(Protocol):
    @property
    def nodeid(self) -> str: ...


T = TypeVar("T", bound=_Collected)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def recorded(path: Path = DURATIONS) -> dict[str, float]:
    """The recorded seconds per test file; none when the file is missing or unreadable."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, int | float)}


def longest_first(items: Sequence[T], seconds: dict[str, float]) -> list[T]:
    """``items`` with whole files ordered by recorded seconds, longest first; a file's
    own tests keep their order, and files with no record keep theirs, after the rest."""
    first_seen: dict[str, int] = {}
    for index, item in enumerate(items):
        first_seen.setdefault(_file_of(item.nodeid), index)

    def key(item: T) -> tuple[float, int]:
        name = _file_of(item.nodeid)
        return (-seconds.get(name, 0.0), first_seen[name])

    return sorted(items, key=key)  # stable: a file's tests stay in collection order


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gridctl scheduling")
    group.addoption(
        "--durations-path",
        default=str(DURATIONS),
        metavar="PATH",
        help=f"the recorded seconds per file that order the run (default tests/{DURATIONS.name})",
    )
    group.addoption(
        "--store-durations",
        default=None,
        metavar="PATH",
        help=f"write this run's wall seconds per test file to PATH (tests/{DURATIONS.name} "
        "to order the next runs by it)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items[:] = longest_first(items, recorded(Path(config.getoption("durations_path"))))


class Recorder:
    """Sums every report's duration per file (the xdist controller sees every
    worker's reports) and writes the table when the session ends."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_file_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # a worker: the controller writes the whole run's table
        table = {k: round(v, 1) for k, v in sorted(self.seconds.items()) if v >= 0.5}
        self.path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    path = config.getoption("store_durations")
    if path and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Recorder(Path(path)), "gridctl-store-durations")
