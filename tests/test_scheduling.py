"""The suite's file order: longest recorded files first, whole, and recorded again on demand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.scheduling import DURATIONS, longest_first, recorded


class Item(NamedTuple):
    nodeid: str


def items(*ids: str) -> list[Item]:
    return [Item(i) for i in ids]


def test_longest_file_first_and_its_tests_in_their_order() -> None:
    got = longest_first(
        items("a.py::t1", "a.py::t2", "b.py::t1", "c.py::t1", "c.py::t2"),
        {"c.py": 30.0, "a.py": 2.0},
    )
    assert [i.nodeid for i in got] == ["c.py::t1", "c.py::t2", "a.py::t1", "a.py::t2", "b.py::t1"]


def test_files_with_no_record_keep_the_collection_order() -> None:
    ids = ("z.py::t", "a.py::t1", "a.py::t2", "m.py::t")
    assert [i.nodeid for i in longest_first(items(*ids), {})] == list(ids)


files = st.sampled_from(["a.py", "b.py", "c.py", "d.py", "e.py"])


@given(
    st.lists(st.tuples(files, st.integers(0, 3)), max_size=30),
    st.dictionaries(files, st.floats(0, 1000, allow_nan=False)),
)
def test_a_reordering_is_a_permutation_that_runs_longer_files_earlier(
    drawn: list[tuple[str, int]], seconds: dict[str, float]
) -> None:
    # contiguous files, as pytest collects them: a file's tests are adjacent
    ids = [f"{f}::t{n}-{k}" for k, (f, n) in enumerate(sorted(drawn, key=lambda d: d[0]))]
    got = [i.nodeid for i in longest_first(items(*ids), seconds)]
    assert sorted(got) == sorted(ids)
    position = {nodeid: k for k, nodeid in enumerate(got)}
    for x in ids:
        for y in ids:
            fx, fy = x.split("::")[0], y.split("::")[0]
            if fx == fy and ids.index(x) < ids.index(y):
                assert position[x] < position[y]  # a file's own order is kept
            if seconds.get(fx, 0.0) > seconds.get(fy, 0.0):
                assert position[x] < position[y]  # a longer file starts first


def test_an_unreadable_record_orders_nothing(tmp_path: Path) -> None:
    assert recorded(tmp_path / "missing.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert recorded(tmp_path / "bad.json") == {}
    (tmp_path / "list.json").write_text("[1, 2]")
    assert recorded(tmp_path / "list.json") == {}


def test_the_checked_in_record_names_files_that_exist() -> None:
    table = recorded(DURATIONS)
    assert table, "tests/durations.json is missing or empty"
    root = DURATIONS.parents[1]
    missing = sorted(name for name in table if not (root / name).is_file())
    assert not missing, f"recorded files that no longer exist (run --store-durations): {missing}"


def test_store_durations_records_each_file_of_a_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(DURATIONS.parents[1]))  # the plugin's package
    pytester.makepyfile(
        test_slow="import time\ndef test_a():\n    time.sleep(0.6)\n",
        test_quick="def test_b():\n    pass\n",
    )
    out = pytester.path / "durations.json"
    result = pytester.runpytest_subprocess("-p", "tests.scheduling", "--store-durations", str(out))
    result.assert_outcomes(passed=2)
    table = json.loads(out.read_text())
    assert list(table) == ["test_slow.py"]  # files under half a second are left out
    assert table["test_slow.py"] >= 0.6

    again = pytester.runpytest_subprocess(
        "-p", "tests.scheduling", "--durations-path", str(out), "--collect-only", "-q"
    )
    assert again.outlines[:2] == ["test_slow.py::test_a", "test_quick.py::test_b"]
