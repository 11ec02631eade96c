"""Split stages in fleet snapshot files and the row rules they share with heartbeats: a
stage row is kept only when it is a stage a host can serve, and a host reporting any
other row is unhealthy (fail closed), exactly like a malformed residency row."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gridctl.config.snapshots import load_snapshot, snapshot_from_json
from gridctl.config.splitstages import stage_json, stage_problem, stages_from_rows
from gridctl.domain import HostState, ObservedStage
from gridctl.errors import WireError


def row(index: int = 0, start: int = 0, end: int = 16, **extra: Any) -> dict[str, Any]:
    return {
        "model_id": "big",
        "coordinator_id": "coord-1",
        "coordinator_term": 1,
        "stage_index": index,
        "stage_count": 2,
        "layer_start": start,
        "layer_end": end,
        "endpoint": "stage-1.lan:50052",
        **extra,
    }


def document(stages: list[dict[str, Any]], **residency: Any) -> dict[str, Any]:
    allocator: dict[str, Any] = {
        "schema_version": 1,
        "state": "accepting",
        "residencies": [{"model_id": "big", "memory_mb": 512, "state": "ready", **residency}],
    }
    if stages:
        allocator["split_stages"] = stages
    return {
        "now": 100,
        "hosts": [{"host_id": "h1", "resources": {"capacity_mb": 8192}, "allocator": allocator}],
    }


def test_a_snapshot_file_round_trips_stages_and_the_split_term(tmp_path: Path) -> None:
    path = tmp_path / "fleet.json"
    path.write_text(json.dumps(document([row(1, 16, 32), row(0)], split_term=2)))
    (host,) = load_snapshot(path).hosts
    assert host.state is HostState.ACCEPTING
    assert host.split_stages == (
        ObservedStage("big", "coord-1", 1, 0, 2, 0, 16, "stage-1.lan:50052"),
        ObservedStage("big", "coord-1", 1, 1, 2, 16, 32, "stage-1.lan:50052"),
    )
    assert [r.split_term for r in host.residencies] == [2]
    rewritten = document([stage_json(s) for s in host.split_stages or ()], split_term=2)
    assert snapshot_from_json(rewritten).hosts == (host,)


def test_a_snapshot_without_stages_reads_as_before() -> None:
    (host,) = snapshot_from_json(document([])).hosts
    assert host.split_stages is None
    assert [r.split_term for r in host.residencies] == [None]


def test_a_malformed_stage_row_in_a_file_makes_the_host_unhealthy() -> None:
    (host,) = snapshot_from_json(document([row(0), row(1, 20, 10)])).hosts
    assert host.state is HostState.UNHEALTHY
    assert [s.stage_index for s in host.split_stages or ()] == [0]
    assert [r.model_id for r in host.residencies] == ["big"]


@pytest.mark.parametrize(
    ("field", "value", "pointer"),
    [
        ("model_id", "not an id", "/hosts/0/allocator/split_stages/0/model_id"),
        ("coordinator_term", 0, "/hosts/0/allocator/split_stages/0/coordinator_term"),
        ("endpoint", "no-port", "/hosts/0/allocator/split_stages/0/endpoint"),
    ],
)
def test_a_stage_row_of_the_wrong_shape_refuses_the_file(
    field: str, value: Any, pointer: str
) -> None:
    with pytest.raises(WireError) as caught:
        snapshot_from_json(document([row(**{field: value})]))
    assert caught.value.pointer == pointer


def test_split_term_zero_is_a_malformed_residency_row() -> None:
    (host,) = snapshot_from_json(document([], split_term=0)).hosts
    assert host.state is HostState.UNHEALTHY and host.residencies == ()


def test_each_problem_is_named() -> None:
    assert stage_problem(row()) is None
    assert stage_problem("big") == "a stage row must be an object"
    assert stage_problem(row(model_id="a b")) is not None
    assert stage_problem(row(stage_count=True)) == "stage_count must be an integer"
    assert stage_problem(row(layer_end=2_000_000)) == "layer_end 2000000 is outside 1..1048576"
    assert stage_problem(row(endpoint="h:" + "1" * 6)) == "endpoint must be host:port"


small = st.integers(min_value=-2, max_value=6)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(small, small, small, small, st.integers(min_value=0, max_value=2)),
        max_size=8,
    )
)
def test_only_servable_stages_are_kept_and_every_other_row_is_named(
    shapes: list[tuple[int, int, int, int, int]],
) -> None:
    rows = [
        row(index, start, end, stage_count=count, coordinator_term=term)
        for index, count, start, end, term in shapes
    ]
    stages, reasons = stages_from_rows(rows)
    kept = stages or ()
    assert stages is None or stages  # never an empty tuple: None means none
    assert len(kept) + len(reasons) == len(rows)
    for stage in kept:
        assert 0 <= stage.stage_index < stage.stage_count
        assert 0 <= stage.layer_start < stage.layer_end
        assert stage.coordinator_term >= 1
    keys = [(s.model_id, s.coordinator_term, s.stage_index) for s in kept]
    assert keys == sorted(set(keys))  # ordered, and no stage twice
    named = [int(reason.split(":")[0].rsplit(" ", 1)[1]) for reason in reasons]
    assert named == sorted(named) and all(0 <= n < len(rows) for n in named)
