"""What a heartbeat says of splits: the stages a host serves, a coordinator engine's term.

Built with the real report builders and checked against the wire schema; the
inventory tracker must send a full heartbeat (not a lease) once a stage starts,
stops or changes term, since the controller learns of stages only from full ones.
"""

from __future__ import annotations

from dataclasses import replace

from gridctl.config.schemas import validator
from gridctl.domain.fleet import ObservedStage
from gridctl.domain.states import HostState, ResidencyState
from gridctl.node import reports
from gridctl.node.inventory import Inventory, InventoryTracker
from gridctl.node.records import ResidencyRecord

FACTS = reports.HostFacts(host_id="host-a", capacity_mb=4096)
SAMPLE = reports.ResourceSample(8192, 8192, 0, 100_000, 200_000)
STAGE_0 = ObservedStage("gemma", "host-a", 3, 0, 2, 0, 9, "127.0.0.1:40001")
STAGE_1 = replace(STAGE_0, model_id="llama", stage_index=1, layer_start=9, layer_end=18)


def envelope(
    stages: tuple[ObservedStage, ...] = (), records: tuple[ResidencyRecord, ...] = ()
) -> dict[str, object]:
    return reports.allocator_envelope(
        HostState.ACCEPTING,
        list(records),
        [],
        1000.0,
        endpoint_of=lambda _r: "http://127.0.0.1:20000",
        engine_api_key="key",
        max_concurrency=2,
        stage_host=True,
        split_stages=stages,
    )


def schema_errors(body: dict[str, object]) -> list[str]:
    found = validator("wire/allocator-envelope.schema.json").iter_errors(body)
    return [f"{list(e.absolute_path)}: {e.message}" for e in found]


def inventory(stages: tuple[ObservedStage, ...], now: float = 1000.0) -> Inventory:
    return Inventory.of(reports.resources(FACTS, SAMPLE), envelope(stages), now)


def test_the_stages_served_are_rows_that_validate_and_match_them() -> None:
    body = envelope((STAGE_1, STAGE_0))
    assert schema_errors(body) == []
    assert body["split_stages"] == [
        {"model_id": "gemma", "coordinator_id": "host-a", "coordinator_term": 3,
         "stage_index": 0, "stage_count": 2, "layer_start": 0, "layer_end": 9,
         "endpoint": "127.0.0.1:40001"},
        {"model_id": "llama", "coordinator_id": "host-a", "coordinator_term": 3,
         "stage_index": 1, "stage_count": 2, "layer_start": 9, "layer_end": 18,
         "endpoint": "127.0.0.1:40001"},
    ]  # fmt: skip


def test_a_host_serving_no_stage_leaves_the_key_out() -> None:
    body = envelope(())
    assert "split_stages" not in body and schema_errors(body) == []


def test_a_coordinator_engine_names_its_term_and_a_whole_replica_does_not() -> None:
    coordinator = ResidencyRecord(
        "gemma", ResidencyState.READY, 640, "a" * 64, port=20000, pid=42, split_term=3
    )
    whole = replace(coordinator, model_id="other", split_term=None)
    stopped = replace(coordinator, model_id="gone", state=ResidencyState.CACHED, pid=None)
    body = envelope(records=(coordinator, whole, stopped))
    assert schema_errors(body) == []
    rows = {row["model_id"]: row for row in body["residencies"]}  # type: ignore[attr-defined]
    assert rows["gemma"]["split_term"] == 3
    assert "split_term" not in rows["other"] and "split_term" not in rows["gone"]


def test_a_stage_starting_stopping_or_changing_term_sends_the_full_inventory() -> None:
    tracker = InventoryTracker()
    before = inventory(())
    tracker.taken(before, at=10.0)
    assert not tracker.full_due(inventory((), now=1001.0), at=11.0)  # nothing new: a lease
    started = inventory((STAGE_0,), now=1001.0)
    assert started.digest != before.digest and tracker.full_due(started, at=11.0)
    tracker.taken(started, at=11.0)
    assert not tracker.full_due(inventory((STAGE_0,), now=1002.0), at=12.0)
    newer = replace(STAGE_0, coordinator_term=4)
    assert tracker.full_due(inventory((newer,), now=1002.0), at=12.0)
    assert tracker.full_due(inventory((), now=1002.0), at=12.0)  # the stage stopped
